"""perftest's ib_write_bw between two nodes, one HCA (rail) at a time: its result table and its exit
code, read as perftest's source defines them, judged against the floor of the rail's link type
(baselines.yaml fabric_peer.ib_write_bw_gbps: by the port's link layer, the rate the node's HCAs
should run, expect.ib_rate_gbps, and the NIC; each floor with its source: 400 Gb/s RoCE on a
Broadcom NIC is not InfiniBand NDR with GPUDirect).

The table (src/perftest_parameters.h, `--report_gbits`: RESULT_FMT_G and REPORT_FMT):

     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     8388608    5000             392.11             391.87             0.005839

Both sides print it: the client its own figures, the server the client's report (write_bw.c
`print_full_bw_report(&user_param, &rem_bw_rep, NULL)`). Exit codes (linux-rdma/perftest @00b55b66,
v6.29, src/write_bw.c and perftest_parameters.h): `SUCCESS` 0; every failure path returns
`FAILURE` 1 (device not found, no context, socket connection, QP transitions, data exchange, the
bandwidth limit), with its message on stderr.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..harness.checks import Check
from ..harness.text import fmt, one_line

CODES = ("PEER_IB_BW_LOW", "IB_WRITE_BW_FAILED", "PEER_UNREACHABLE", "BASELINE_MISSING")
EXIT_CODES = {0: "SUCCESS", 1: "FAILURE"}  # perftest_parameters.h
_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[([^\]]+)\]\s+BW average\[([^\]]+)\]\s+MsgRate\[Mpps\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
# perftest's own failure messages (write_bw.c, perftest_communication.c, perftest_resources.c)
_SOCKET = re.compile(r"Couldn't connect to \S+|Unable to init the socket connection|Couldn't listen to port \d+|"
                     r"Unable to open file descriptor for socket connection")
_FAILURE = re.compile(r"Couldn't connect to|Unable to|Couldn't|Failed to|Completion with error|"
                      r"Parser function exited with Error|Error: BW result is below bw limit|status=\d+|"
                      r"ethernet_read_keys|did not finish within")


@dataclass(frozen=True)
class Floor:
    """One entry of fabric_peer.ib_write_bw_gbps: what link it is for and its floor (Gb/s)."""

    link_layer: str
    rate_gbps: int
    nic: str | None  # a regex searched in "<device> <hca_type>"; None: any NIC
    value: float
    tolerance: float
    source: str

    @property
    def floor(self) -> float:
        return self.value * (1.0 - self.tolerance)

    def describe(self) -> str:
        nic = f", NIC /{self.nic}/" if self.nic else ""
        return (f"{self.link_layer} {self.rate_gbps} Gb/s{nic}: baseline {fmt(self.value)} -{self.tolerance:.0%}; "
                f"{self.source}")


def floors(spec) -> list[Floor]:
    """baselines.yaml fabric_peer.ib_write_bw_gbps, in file order; a malformed entry is an error of
    the baselines, never a silently missing floor."""
    out = []
    for i, e in enumerate(spec or []):
        try:
            out.append(Floor(str(e["link_layer"]), int(e["rate_gbps"]), e.get("nic") or None, float(e["value"]),
                             float(e["tolerance"]), str(e["source"])))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"fabric_peer.ib_write_bw_gbps[{i}] needs link_layer, rate_gbps, value, tolerance "
                             f"and source ({exc})") from None
    return out


def floor_for(table: list[Floor], link_layer: str | None, rate: int | None, nic: str) -> tuple[float | None, str]:
    """(floor, basis) of the first entry for this link layer, expected rate and NIC; (None, why not)."""
    if not rate:
        return None, "no expected port rate (expect.ib_rate_gbps, --expect ib_rate_gbps=N)"
    for f in table:
        if f.link_layer == link_layer and f.rate_gbps == rate and (not f.nic or re.search(f.nic, nic)):
            return f.floor, f.describe()
    return None, f"no fabric_peer.ib_write_bw_gbps floor for {link_layer or 'unknown link layer'} {rate} Gb/s ({nic})"


def parse(text: str) -> dict:
    """{unit, rows: [{bytes, iterations, bw_peak, bw_average, msg_rate_mpps}], failures: [lines]}."""
    unit, rows, failures = None, [], []
    in_table = False
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _HEADER.search(line)
        if m:
            unit, in_table = m.group(2), True
            continue
        r = _ROW.match(line) if in_table else None
        if r:
            rows.append({"bytes": int(r.group(1)), "iterations": int(r.group(2)), "bw_peak": float(r.group(3)),
                         "bw_average": float(r.group(4)), "msg_rate_mpps": float(r.group(5))})
        elif _FAILURE.search(line):
            failures.append(line.strip())
    return {"unit": unit, "rows": rows, "failures": failures}


def judge(rail: int, hca: str, peer: str, rc: int | None, text: str, floor, basis: str) -> Check:
    """One rail: `floor` (Gb/s) from the rate the node should run, or None (no baseline: not run).
    `peer` names the other end (node and HCA) for the message."""
    parsed = parse(text)
    where = f"rail {rail} {hca} <-> {peer}"
    lines = " / ".join(parsed["failures"][:3]) or "no failure message"
    if rc not in (0, None) or not parsed["rows"]:
        name = ("stopped: no exit code" if rc is None else
                EXIT_CODES.get(rc, "killed by a signal" if rc < 0 else "not an exit code perftest returns"))
        if parsed["failures"] and all(_SOCKET.search(x) for x in parsed["failures"]):
            # only the TCP side channel failed: the peer's ib_write_bw was not there, nothing was measured
            return Check("ib_write_bw", "error", rc, unit=None, device=hca, code="PEER_UNREACHABLE",
                         message=one_line(f"{where}: ib_write_bw exited {rc} ({name}) before any transfer: {lines}", 400))
        if rc == 0:
            return Check("ib_write_bw", "error", device=hca, code="IB_WRITE_BW_FAILED",
                         message=one_line(f"{where}: ib_write_bw exited 0 without a result table "
                                          "(not --report_gbits output?)", 400))
        return Check("ib_write_bw", "fail", rc, device=hca, threshold="exit 0", code="IB_WRITE_BW_FAILED",
                     message=one_line(f"{where}: ib_write_bw exited {rc} ({name}): {lines}", 400))
    if parsed["unit"] != "Gb/sec":
        return Check("ib_write_bw", "error", device=hca, code="IB_WRITE_BW_FAILED",
                     message=f"{where}: table in {parsed['unit']}, expected Gb/sec (--report_gbits)")
    row = max(parsed["rows"], key=lambda r: r["bytes"])  # the largest message: the link's bandwidth
    value = row["bw_average"]
    size = f"{row['bytes']} B x {row['iterations']}"
    if floor is None:
        return Check("ib_write_bw", "skip", value, "Gb/s", device=hca, code="BASELINE_MISSING",
                     message=f"{where}: {fmt(value)} Gb/s ({size}); no floor ({basis})")
    if value < floor:
        return Check("ib_write_bw", "fail", value, "Gb/s", f">= {fmt(floor)}", device=hca, code="PEER_IB_BW_LOW",
                     message=one_line(f"{where}: BW average {fmt(value)} Gb/s < {fmt(floor)} Gb/s ({size}; {basis})", 400))
    return Check("ib_write_bw", "pass", value, "Gb/s", f">= {fmt(floor)}", device=hca,
                 message=one_line(f"{where}: BW average {fmt(value)} Gb/s >= {fmt(floor)} Gb/s ({size}; {basis})", 400))
