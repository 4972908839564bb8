"""nccl_loopback: all GPUs of the node in one all-reduce forced through the node's HCAs.

With NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1 (and NVLS off) the ring between GPUs of the same node
must leave through the NICs and loop back through the fabric (the AzureHPC NHC IB loop-back idea):
a broken HCA, cable, GPUDirect RDMA or switch port shows up without a multi-node reservation.

* sweep of message sizes: algbw and busbw (= algbw * 2(n-1)/n) per size;
* the large-message busbw is judged against the model baseline (scaled by NICs per GPU);
* the transport is proven from NCCL_DEBUG=INFO: a run that fell back to sockets fails even when its
  numbers look fine; the reduced values are verified, not only timed;
* nccl-tests' all_reduce_perf when it is in PATH (-c 1 verifies), else torch.distributed with one
  process per GPU; --transport nvlink runs the same with P2P on for comparison;
* CPU mode: gloo with --cpu-ranks processes (plumbing and value check; transport check skipped).

    python -m cluster_doctor_suites.nccl_loopback [--transport ib|nvlink] [--ib-hca mlx5_0,mlx5_1] ...
"""

from __future__ import annotations

import glob
import json
import multiprocessing
import multiprocessing.connection as mp_connection
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass

from . import parsers
from .baselines import Baselines, expectations, model_for_node
from .checkers import ib_ports, nic_selector
from .harness.checks import Check, SuiteError, at_least
from .harness.context import Context
from .harness.inventory import gpu_inventory
from .harness.runner import main_entry, run_suite
from .harness.text import fmt, one_line

SUITE = "nccl_loopback"


def _bytes(s: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)I?B?\s*", str(s).upper())
    if not m:
        raise ValueError(f"bad size {s!r}")
    return int(
        float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2)]
    )


def _human(n: int) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def add_arguments(p) -> None:
    g = p.add_argument_group("nccl_loopback")
    g.add_argument(
        "--transport",
        choices=("ib", "nvlink"),
        default="ib",
        help="ib: P2P/SHM/NVLS disabled, traffic must use the HCAs; nvlink: P2P on, for comparison",
    )
    g.add_argument(
        "--impl",
        choices=("auto", "nccl-tests", "torch"),
        default="auto",
        help="auto: all_reduce_perf when in PATH (GPU mode), else torch.distributed",
    )
    g.add_argument(
        "--all-reduce-perf",
        default=os.environ.get("CLUSTER_DOCTOR_ALL_REDUCE_PERF", "all_reduce_perf"),
        help="nccl-tests binary [CLUSTER_DOCTOR_ALL_REDUCE_PERF]",
    )
    g.add_argument(
        "--ib-hca",
        default=os.environ.get("CLUSTER_DOCTOR_NCCL_IB_HCA") or os.environ.get("NCCL_IB_HCA"),
        help="NCCL_IB_HCA for the run, e.g. '=mlx5_0:1,mlx5_1:1' [CLUSTER_DOCTOR_NCCL_IB_HCA]",
    )
    g.add_argument(
        "--expect-net",
        default="^IB",
        help="regex the NCCL network plugin name must match in ib mode (IB, IBext_v8, ...); "
        "e.g. 'Libfabric' on EFA",
    )
    g.add_argument(
        "--expected-hcas",
        type=int,
        default=None,
        help="HCA ports NCCL must report as usable (default: not judged)",
    )
    g.add_argument("--sysfs-root", default=os.environ.get("CLUSTER_DOCTOR_IB_SYSFS", ib_ports.SYSFS_ROOT),
                   help="the RDMA devices' sysfs directory: which HCAs a prefix or exclusion in NCCL_IB_HCA "
                   "selects [CLUSTER_DOCTOR_IB_SYSFS]")
    g.add_argument("--min-bytes", default=None, help="smallest message; default 1M (GPU), 1K (CPU)")
    g.add_argument("--max-bytes", default=None, help="largest message; default 4G (GPU), 4M (CPU)")
    g.add_argument("--factor", type=int, default=None, help="size step factor; default 2 (GPU), 4 (CPU)")
    g.add_argument(
        "--iters", type=int, default=None, help="timed iterations per size; default 20 (GPU), 5 (CPU)"
    )
    g.add_argument(
        "--warmup", type=int, default=None, help="warm-up iterations per size; default 5 (GPU), 2 (CPU)"
    )
    g.add_argument("--cpu-ranks", type=int, default=2, help="gloo processes in CPU mode")
    g.add_argument("--min-busbw", type=float, default=None, help="override the busbw floor (GB/s)")
    g.add_argument(
        "--run-timeout",
        type=float,
        default=None,
        help="seconds the all-reduce may take before it is declared hung; default 240 (GPU), 90 (CPU)",
    )


def default_timeout(args) -> float:
    return (args.run_timeout or (90 if args.device == "cpu" else 240)) + 60


def nccl_env(transport: str, ib_hca: str | None) -> dict:
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    if transport == "ib":
        env.update(
            NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_NVLS_ENABLE="0"
        )  # NVLink SHARP would carry the all-reduce over NVSwitch
        if ib_hca:
            env["NCCL_IB_HCA"] = ib_hca
    return env


def sweep(min_b: int, max_b: int, factor: int) -> list[int]:
    if min_b <= 0 or max_b < min_b or factor < 2:
        raise SuiteError(f"bad size sweep {min_b}..{max_b} x{factor}")
    out, s = [], min_b
    while s <= max_b:
        out.append(s)
        s *= factor
    return out


def visible_gpus(ctx: Context) -> tuple[int, list[dict], str]:
    """GPU count for the run (CUDA's view when torch can tell, NVML otherwise) and the inventory."""
    inv, driver, source = gpu_inventory()
    ctx.environment.update(driver=driver)
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device_count(), inv, "CUDA"
    except Exception as exc:  # a broken CUDA install is reported through the count
        ctx.log(f"torch/CUDA unavailable: {exc}")
    return len(inv), inv, source


# --------------------------------------------------------------------------------------------------
# Judging (pure apart from ctx)
# --------------------------------------------------------------------------------------------------
def judge_transport(ctx: Context, info: dict, transport: str, expect_net: str, n: int) -> None:
    """What NCCL said it used. ib mode: `transport_isolation` (no P2P/SHM/NVLS path although
    disabled) and `transport` (the network: IB as expected, sockets, or another one), each condition
    its own code; nvlink mode: P2P/NVLS between the GPUs, anything else names the NVLink failure."""
    families = info["transport_families"]
    nets = info["networks"]
    ctx.environment.update(
        nccl_networks=sorted(nets), nccl_transports=families, nccl_ib_devices=sorted(info["ib_devices"])
    )
    ctx.metric("nccl_channels", info["channel_count"])
    ctx.metric("nccl_gdr_channels", info["gdr_channels"])
    ctx.metric("nccl_ib_devices", len(info["ib_devices"]), summary=transport == "ib")
    if n < 2:
        for name in ("transport", "transport_isolation") if transport == "ib" else ("transport",):
            ctx.check(name, "skip", code="NCCL_TRANSPORT_NOT_APPLICABLE",
                      message="single GPU: no inter-GPU transport to prove")
        return
    summary = ", ".join(f"{f} x{c}" for f, c in sorted(families.items())) or "none"
    if transport == "ib":
        _judge_isolation(ctx, families, summary)
        _judge_network(ctx, info, expect_net, summary)
    else:
        _judge_nvlink_mode(ctx, info, summary)


def _judge_isolation(ctx: Context, families: dict, summary: str) -> None:
    local = sorted(f for f in families if f in ("P2P", "SHM", "NVLS"))
    if local:
        ctx.check("transport_isolation", "fail", value=",".join(local), threshold="NET only", code="NCCL_P2P_SHM_USED",
                  message="intra-node P2P/SHM used although disabled (NCCL_P2P_DISABLE / NCCL_SHM_DISABLE / "
                  f"NCCL_NVLS_ENABLE=0 not honoured): traffic did not leave the node; channels: {summary}")
    elif families:
        ctx.check("transport_isolation", "pass", value="NET only", threshold="NET only",
                  message=f"no P2P/SHM/NVLS channel: every channel left the node ({summary})")
    else:  # no channel line: nothing shows the traffic left the node, nor that it did not
        ctx.check("transport_isolation", "skip", threshold="NET only", code="NCCL_TRANSPORT_UNKNOWN",
                  message="NCCL printed no 'Channel ... via ...' line: whether P2P/SHM/NVLS stayed off cannot be "
                  "proven (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,NET reaching the suite?)")


def _judge_network(ctx: Context, info: dict, expect_net: str, summary: str) -> None:
    families, nets = info["transport_families"], info["networks"]
    net_fams = {f: c for f, c in families.items() if f.startswith("NET/")}
    wanted = [f for f in net_fams if re.search(expect_net, f[4:])]
    threshold = f"NET matching /{expect_net}/"
    if "Socket" in nets or "NET/Socket" in families:
        ctx.check("transport", "fail", value="NET/Socket", threshold=threshold, code="NCCL_SOCKET_FALLBACK",
                  message="NCCL fell back to socket transport (NET/Socket) instead of IB; "
                  f"channels: {summary}; networks: {', '.join(nets) or 'none'}"
                  + (" (NET/IB: no device found)" if info["ib_no_device"] else ""))
    elif net_fams and len(wanted) < len(net_fams):
        other = sorted(set(net_fams) - set(wanted))
        ctx.check("transport", "fail", value=",".join(other), threshold=threshold, code="NCCL_NET_UNEXPECTED",
                  message=f"NCCL used {', '.join(other)}, not a network matching /{expect_net}/")
    elif wanted:
        gdr = info["gdr_channels"]
        ctx.check("transport", "pass", value=",".join(sorted(wanted)), threshold=threshold,
                  message=f"{info['channel_count']} channel(s) via {', '.join(sorted(wanted))} "
                  f"({gdr} with GPUDirect RDMA); HCAs: {', '.join(sorted(info['ib_devices'])) or '?'}")
        if gdr == 0:
            ctx.check("gpudirect_rdma", "warn", value=0, unit="channels", code="NCCL_NO_GPUDIRECT",
                      message="no channel uses GPUDirect RDMA: data is staged through host memory")
    elif any(re.search(expect_net, k) for k in nets):
        ctx.check("transport", "warn", value=",".join(sorted(nets)), threshold=threshold, code="NCCL_TRANSPORT_UNKNOWN",
                  message=f"NCCL chose network {', '.join(sorted(nets))} but printed no channel lines")
    elif info["ib_no_device"]:
        ctx.check("transport", "fail", value="no IB device", threshold=threshold, code="NCCL_IB_NO_DEVICE",
                  message="NCCL found no IB device at all (NET/IB: no device found, or libibverbs missing); "
                  f"networks: {', '.join(nets) or 'none'}")
    else:
        ctx.check("transport", "error", code="NCCL_TRANSPORT_UNKNOWN",
                  message="could not determine the transport: no 'Using network' or "
                  "'via NET/...' lines in the NCCL INFO output")


def _judge_nvlink_mode(ctx: Context, info: dict, summary: str) -> None:
    families = info["transport_families"]
    if any(f.startswith("NET/") for f in families) or "SHM" in families:
        ctx.check("transport", "fail", value=summary, threshold="P2P/NVLS only", code="NCCL_NVLINK_UNAVAILABLE",
                  message=f"NVLink mode but NCCL used {summary}: P2P over NVLink between the GPUs is not available")
    elif "P2P" in families or "NVLS" in families:
        ctx.check("transport", "pass", value=summary, message=f"{info['channel_count']} channel(s): {summary}")
    else:
        ctx.check("transport", "error", code="NCCL_TRANSPORT_UNKNOWN",
                  message="could not determine the transport from the NCCL INFO output")


@dataclass(frozen=True)
class HcaBar:
    """The HCA ports this run must use: `count`, and `names` ("mlx5_0:1", "mlx5_3" any port) when
    something names them, so a missing rail is named whatever else NCCL found; `basis` says why."""

    count: int | None
    basis: str
    names: tuple[str, ...] = ()
    layer: str | None = None  # "IB": only InfiniBand ports count as rails (the selection also takes others)


def judge_hcas(ctx: Context, info: dict, bar: HcaBar | int | None, basis: str = "") -> None:
    """The HCA ports NCCL found against the node's expected set: every named one present, and
    exactly the expected count (a storage HCA NCCL also took cannot stand in for a compute one)."""
    if not isinstance(bar, HcaBar):
        bar = HcaBar(bar, basis)
    have = len(info["ib_devices"])
    found = ", ".join(sorted(info["ib_devices"])) or "none"
    if bar.count is None and not bar.names:
        ctx.check("ib_hcas", "skip", value=have, unit="ports", code="EXPECTATION_MISSING",
                  message=f"NCCL found {have} HCA port(s) ({found}); no expected count for this node "
                  "(baselines.yaml expect.hcas, --expect hcas=N, --expected-hcas)")
        return
    if bar.layer:  # a RoCE port NCCL also took cannot stand in for a missing InfiniBand rail
        have = sum(1 for layer in info["ib_devices"].values() if layer == bar.layer)
    want = len(bar.names) if bar.names else bar.count
    missing = [n for n in bar.names if not any(_same_port(n, d) for d in info["ib_devices"])]
    thr = f"== {want}" + (" named" if bar.names else "")
    if missing or have < want:
        code = "NCCL_IB_NO_DEVICE" if have == 0 and info["ib_no_device"] else "IB_HCAS_MISSING"
        named = f"; missing: {', '.join(missing)}" if missing else ""
        ctx.check("ib_hcas", "fail", value=want - len(missing) if bar.names else have, unit="ports",
                  threshold=thr, code=code,
                  message=f"NCCL found {have} usable HCA port(s) ({found}), expected {want}{named} ({bar.basis})")
        return
    extra = [d for d in sorted(info["ib_devices"]) if not _wanted(bar, d)
             or (bar.layer and info["ib_devices"][d] != bar.layer)]
    if have > want or extra:
        ctx.check("ib_hcas", "warn", value=have, unit="ports", threshold=thr, code="IB_HCAS_EXTRA",
                  message=f"NCCL found {have} HCA port(s) ({found}), expected {want} ({bar.basis}): it also uses "
                  f"{', '.join(extra) or 'ports beyond the expected count'}; a storage HCA counted as a rail would "
                  "hide a missing one: name the compute HCAs (NCCL_IB_HCA '=mlx5_0,...')")
        return
    ctx.check("ib_hcas", "pass", value=have, unit="ports", threshold=thr,
              message=f"NCCL found {have} usable HCA port(s) ({found}), expected {want} ({bar.basis})")


def _same_port(name: str, device: str) -> bool:
    """An expected "mlx5_0" (any port) or "mlx5_0:1" against NCCL's "mlx5_0:1"."""
    want_dev, _, want_port = name.partition(":")
    dev, _, port = device.partition(":")
    return dev == want_dev and (not want_port or want_port == port)


def _wanted(bar: HcaBar, device: str) -> bool:
    return not bar.names or any(_same_port(n, device) for n in bar.names)


def merge_rank_rows(per_rank: list[list[dict]]) -> list[dict]:
    """One row per size from every rank's rows: each rank checks the values it received, so wrong
    elements seen by any rank count (per rank in `wrong_by_rank`). Timings are rank 0's (already the
    max over ranks)."""
    merged = []
    for i, r0 in enumerate(per_rank[0]):
        row = dict(r0)
        by_rank = {}
        for rank, rows in enumerate(per_rank):
            r = rows[i] if i < len(rows) else None
            if r is None or r.get("size") != r0["size"] or r.get("wrong") is None:
                by_rank = None  # a rank did not validate this size: unvalidated, never a pass
                break
            if r["wrong"]:
                by_rank[rank] = r
        if by_rank is None:
            row["wrong"] = None
        else:
            row["wrong"] = sum(r["wrong"] for r in by_rank.values())
            row["wrong_by_rank"] = {k: r["wrong"] for k, r in by_rank.items()}
            if by_rank:
                first = by_rank[min(by_rank)]
                row["first_wrong_index"] = first.get("first_wrong_index")
                row["max_abs_error"] = max(r.get("max_abs_error") or 0 for r in by_rank.values())
        merged.append(row)
    return merged


def judge_rows(
    ctx: Context,
    rows: list[dict],
    n: int,
    expectation,
    min_busbw: float | None,
    unit_note: str,
    rank_device=None,
) -> None:
    """rows: [{size, algbw, busbw, wrong (None = not validated), time_us, wrong_by_rank?}] sorted by
    size. `rank_device(rank)` names the device of a rank (cuda:N, or the CPU rank)."""
    ctx.record(values_check(rows, rank_device))
    for key, value, summary in sweep_metrics(rows, n):
        ctx.metric(key, value, summary=summary)
    ctx.record(busbw_check(rows[-1], n, expectation, min_busbw, unit_note))


def values_check(rows: list[dict], rank_device=None) -> Check:
    """`allreduce_values`: every reduced value right at every size, the ranks that saw wrong ones named."""
    wrong_rows = [r for r in rows if r.get("wrong")]
    unvalidated = [r for r in rows if r.get("wrong") is None]
    if wrong_rows:
        r = wrong_rows[0]
        ranks = sorted({k for x in wrong_rows for k in (x.get("wrong_by_rank") or {})})
        devices = [rank_device(k) if rank_device else f"rank{k}" for k in ranks]
        return Check(
            "allreduce_values",
            "fail",
            value=sum(x["wrong"] for x in wrong_rows),
            unit="elements",
            threshold="== 0",
            device=devices[0] if len(devices) == 1 else None,
            message=f"{r['wrong']} wrong element(s) at {_human(r['size'])}B"
            + (f" seen by {', '.join(devices)}" if devices else "")
            + (
                f" (first at index {r['first_wrong_index']}, max error {fmt(r.get('max_abs_error'))})"
                if r.get("first_wrong_index") is not None
                else ""
            )
            + (f"; {len(wrong_rows)} sizes affected" if len(wrong_rows) > 1 else ""),
        )
    if unvalidated:
        return Check("allreduce_values", "error", message=f"{len(unvalidated)} size(s) without a validation result")
    return Check("allreduce_values", "pass", value=0, unit="elements", threshold="== 0",
                 message=f"reduced values correct at all {len(rows)} sizes")


def sweep_metrics(rows: list[dict], n: int) -> list[tuple[str, float, bool]]:
    """(key, value, key figure of the summary?): bandwidths per size, then the largest size's and the peak."""
    out = []
    for r in rows:
        tag = _human(r["size"])
        out += [(f"nccl_busbw_gbps.{tag}", r["busbw"], False), (f"nccl_algbw_gbps.{tag}", r["algbw"], False)]
    big = rows[-1]
    return out + [
        ("nccl_size_bytes", big["size"], True),
        ("nccl_busbw_gbps", big["busbw"], True),
        ("nccl_algbw_gbps", big["algbw"], True),
        ("nccl_busbw_peak_gbps", max(r["busbw"] for r in rows), True),
        ("nccl_ranks", n, True),
    ]


def busbw_check(big: dict, n: int, expectation, min_busbw: float | None, unit_note: str) -> Check:
    """`busbw` of the largest size against --min-busbw, else the model's floor; one rank moves no data."""
    if n < 2:
        return Check("busbw", "skip", value=big["busbw"], unit="GB/s", message="single rank: all-reduce moves no data",
                     code="NCCL_BUSBW_NOT_JUDGED")
    if min_busbw is not None:
        floor, basis = min_busbw, "--min-busbw"
    elif expectation is not None:
        floor, basis = expectation.floor, expectation.basis()
    else:
        floor, basis = None, f"no baseline for this model{unit_note}"
    return at_least("busbw", big["busbw"], floor, unit="GB/s", device=f"{_human(big['size'])}B",
                    basis=f"{n} ranks; {basis}")


# --------------------------------------------------------------------------------------------------
# Implementations
# --------------------------------------------------------------------------------------------------
def run_nccl_tests(
    ctx: Context,
    binary: str,
    n: int,
    sizes: list[int],
    factor: int,
    iters: int,
    warmup: int,
    env: dict,
    timeout: float,
) -> tuple[list[dict], str, str | None]:
    argv = [
        binary,
        "-b",
        str(sizes[0]),
        "-e",
        str(sizes[-1]),
        "-f",
        str(factor),
        "-g",
        str(n),
        "-c",
        "1",
        "-n",
        str(iters),
        "-w",
        str(warmup),
        "-d",
        "float",
        "-o",
        "sum",
    ]
    try:
        rc, out, err = ctx.run_tool(argv, timeout=timeout, env={**os.environ, **env})
    except SuiteError as exc:
        for line in exc.output.splitlines():
            ctx.log(f"| {line}")
        return [], exc.output, f"all_reduce_perf hung: {exc}"
    text = out + "\n" + err
    for line in text.splitlines():
        ctx.log(f"| {line}")
    try:
        parsed = parsers.parse_nccl_tests(out)
    except ValueError as exc:
        return [], text, exit_problem(rc, text, f"no usable results ({exc})")
    rows = table_rows(ctx, parsed)
    wrong = bool(parsed["oob"]) or any(r["wrong"] for r in rows)
    if wrong:  # wrong values are a failure whatever the exit code says (1 before nccl-tests 2.17.3, 7 since)
        ctx.log(f"all_reduce_perf exited {rc} and reported wrong values: judged as a failure")
        return rows, text, None
    if rc == NCCL_TESTS_NUM_RESULTS:
        # testNumResults without wrong values: the average bus bandwidth was below NCCL_TESTS_MIN_BW
        ctx.check("nccl_tests_result", "fail", value=rc, code="NCCL_TESTS_FAILED",
                  message=f"all_reduce_perf exited {rc} (testNumResults: results out of bounds or below "
                  f"NCCL_TESTS_MIN_BW) without wrong values in its table: {one_line(_failure_lines(text), 200)}")
        return rows, text, None
    return rows, text, None if rc == 0 else exit_problem(rc, text, "results printed")


# nccl-tests' testResult_t (src/common.h), what all_reduce_perf's main returns since nccl-tests 2.17.3
# (TESTCHECK(run()) in main); older builds exit(EXIT_FAILURE) = 1 when values were wrong
NCCL_TESTS_RESULTS = {0: "testSuccess", 1: "testInternalError", 2: "testCudaError", 3: "testNcclError",
                      4: "testTimeout", 5: "testNotImplemented", 6: "testInvalidUsage", 7: "testNumResults"}
NCCL_TESTS_NUM_RESULTS = 7


def exit_problem(rc: int, text: str, what: str) -> str:
    """One line on why all_reduce_perf did not succeed, named as its source names the exit code."""
    name = NCCL_TESTS_RESULTS.get(rc, "killed by a signal" if rc < 0 else "not a testResult_t (the loader?)")
    return one_line(f"all_reduce_perf exited {rc} ({name}), {what}: {_failure_lines(text)}", 400)


def _failure_lines(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines()
             if re.search(r"Test (CUDA |NCCL )?failure|NCCL WARN|error while loading|Test timeout|FAILED", ln)]
    return " / ".join(lines[:3]) or "no failure message"


def table_rows(ctx: Context, parsed: dict) -> list[dict]:
    """One row per size (the better of out-of-place / in-place), wrong elements of both added; the
    OOB summary line is a check of its own."""
    rows = []
    for r in parsed["rows"]:
        wrong = None if r["oop_wrong"] is None or r["ip_wrong"] is None else r["oop_wrong"] + r["ip_wrong"]
        best = max(
            (r["oop_busbw"], r["oop_algbw"], r["oop_time_us"]),
            (r["ip_busbw"], r["ip_algbw"], r["ip_time_us"]),
        )
        rows.append({"size": r["size"], "busbw": best[0], "algbw": best[1], "time_us": best[2], "wrong": wrong})
    if parsed["oob"]:
        ctx.check("nccl_tests_oob", "fail", value=parsed["oob"], unit="elements", threshold="== 0",
                  message=f"all_reduce_perf reports {parsed['oob']} out-of-bounds value(s) "
                  f"('Out of bounds values : {parsed['oob']} FAILED')", code="NCCL_WRONG_VALUES")
    if parsed["header"].get("validation") == 0:
        for r in rows:
            r["wrong"] = None
    return rows


def run_torch(
    ctx: Context, backend: str, n: int, sizes: list[int], iters: int, warmup: int, env: dict, timeout: float
) -> tuple[list[dict], str, str | None]:
    # Long: spawns the ranks, supervises them (a dead rank stops the others) and collects their results.
    workdir = tempfile.mkdtemp(prefix="cd-nccl-")
    ctx.register_scratch(workdir)
    try:
        from . import nccl_worker

        mp = multiprocessing.get_context("spawn")  # CUDA cannot be forked
        procs = []
        for rank in range(n):
            # the ranks' own collective timeout fires first, so a broken rank shows up as an error
            p = mp.Process(
                target=nccl_worker.worker,
                name=f"rank{rank}",
                daemon=True,
                args=(rank, n, backend, workdir, sizes, iters, warmup, env, timeout * 0.8),
            )
            p.start()
            ctx.register_child(p)
            procs.append(p)
        deadline = time.monotonic() + timeout
        failed_at = None
        while True:
            alive = [p for p in procs if p.is_alive()]
            now = time.monotonic()
            if not alive or now >= deadline:
                break
            if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
                failed_at = now
            if failed_at is not None and now - failed_at > 15:
                break  # the surviving ranks wait for the dead one until their own timeout: stop them
            mp_connection.wait([p.sentinel for p in alive], timeout=min(1.0, deadline - now))
        hung = [p.name for p in procs if p.is_alive()]
        if hung:
            ctx.kill_children()
        for p in procs:
            ctx.unregister_child(p)
        logs = []
        for rank in range(n):
            path = os.path.join(workdir, f"rank{rank}.log")
            text = open(path, errors="replace").read() if os.path.exists(path) else ""
            logs.append(text)
            for line in text.splitlines():
                ctx.log(f"[rank{rank}] {line}")
        results = {}
        for path in glob.glob(os.path.join(workdir, "rank*.json")):
            with open(path) as fh:
                r = json.load(fh)
            results[r["rank"]] = r
        text = "\n".join(logs)
        errors = [f"rank{k}: {r['error']}" for k, r in sorted(results.items()) if r.get("error")]
        if hung and not errors:
            return (
                [],
                text,
                f"all-reduce did not finish within {fmt(timeout)} s (hung ranks: {', '.join(hung)})",
            )
        missing = [f"rank{k}" for k in range(n) if k not in results]
        if errors or missing:
            codes = {p.name: p.exitcode for p in procs}
            what = "; ".join(errors) or f"{', '.join(missing)} died without a result (exit codes {codes})"
            return [], text, one_line(what, 400)
        if "nccl_version" in results[0]:
            ctx.environment["nccl"] = results[0]["nccl_version"]
        return merge_rank_rows([results[k]["rows"] for k in range(n)]), text, None
    finally:
        ctx.cleanup_scratch(workdir)


# --------------------------------------------------------------------------------------------------
@dataclass
class Plan:
    """What one run of the suite does: the sweep, the implementation and what it is judged against."""

    sizes: list[int]
    factor: int
    iters: int
    warmup: int
    run_timeout: float
    n: int
    backend: str
    impl: str
    binary: str | None
    metric: str
    key: str | None
    env: dict
    hcas: HcaBar | None = None  # the HCA ports this run must use (ib mode)


# the checks without which the suite proves nothing: one not judged for want of a floor is an error
KEY_CHECKS = ("busbw", "baseline")


def run(ctx: Context) -> None:
    ctx.key_checks = KEY_CHECKS
    baselines = Baselines.load(ctx.args.baselines)
    plan = _plan(ctx, baselines)
    if plan is None:
        return  # no GPU to run on: gpu_count failed
    ctx.set_phase(
        f"all-reduce {plan.impl}/{plan.backend}, {plan.n} ranks, {_human(plan.sizes[0])}..{_human(plan.sizes[-1])}B "
        f"x{plan.factor}, {plan.iters} iters, env {' '.join(f'{k}={v}' for k, v in plan.env.items())}"
    )
    if plan.impl == "nccl-tests":
        rows, text, problem = run_nccl_tests(ctx, plan.binary, plan.n, plan.sizes, plan.factor, plan.iters,
                                             plan.warmup, plan.env, plan.run_timeout)
    else:
        rows, text, problem = run_torch(ctx, plan.backend, plan.n, plan.sizes, plan.iters, plan.warmup, plan.env,
                                        plan.run_timeout)
    info = parsers.parse_nccl_log(text) if not ctx.cpu else None
    if info and info.get("version"):
        ctx.environment["nccl"] = info["version"]
    if problem:
        _judge_broken_run(ctx, plan, info, text, problem)
        return
    if not rows:
        raise SuiteError("the all-reduce produced no results")
    if ctx.cpu:
        for name in ("transport", "transport_isolation") if ctx.args.transport == "ib" else ("transport",):
            ctx.check(name, "skip", code="NCCL_TRANSPORT_NOT_APPLICABLE",
                      message="CPU mode: gloo over TCP loopback has no NCCL transport to prove")
    else:
        _judge_nccl_said(ctx, plan, info)
    expectation = baselines.expectation(plan.key, plan.metric, plan.n, hcas=plan.hcas.count if plan.hcas else None) if plan.key else None
    note = "" if plan.key else " (unknown GPU model)"
    if not ctx.cpu and expectation is None and plan.key:
        note = f" ({plan.key} has no {plan.metric} baseline)"
    judge_rows(ctx, sorted(rows, key=lambda r: r["size"]), plan.n, expectation, ctx.args.min_busbw, note,
               rank_device=(lambda k: f"cpu-rank{k}") if ctx.cpu else (lambda k: f"cuda:{k}"))


def _plan(ctx: Context, baselines: Baselines) -> Plan | None:
    a, cpu = ctx.args, ctx.cpu
    try:
        min_b = _bytes(a.min_bytes or ("1K" if cpu else "1M"))
        max_b = _bytes(a.max_bytes or ("4M" if cpu else "4G"))
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
    factor = a.factor or (4 if cpu else 2)
    common = dict(sizes=sweep(min_b, max_b, factor), factor=factor, iters=a.iters or (5 if cpu else 20),
                  warmup=a.warmup if a.warmup is not None else (2 if cpu else 5),
                  run_timeout=a.run_timeout or (90 if cpu else 240))
    if cpu:
        if a.cpu_ranks < 1:
            raise SuiteError("--cpu-ranks must be >= 1")
        inv, _, src = gpu_inventory() if ctx.expected_gpus else ([], None, "CPU mode")
        ctx.check_gpu_count(len(inv), source=src)
        model_for_node(ctx, baselines, [])
        ctx.environment.update(gpu_model=a.gpu_model, gpu_count=0, baseline=None, nccl_impl="torch",
                               nccl_transport_mode="gloo", nccl_env={})
        return Plan(**common, n=a.cpu_ranks, backend="gloo", impl="torch", binary=None,
                    metric="nccl_gloo_busbw_gbps", key="cpu" if "cpu" in baselines.models else None, env={})
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # rank N on nvidia-smi's GPU N
    n, inv, source = visible_gpus(ctx)
    if not ctx.check_gpu_count(n, source=source):
        return None
    key, name = model_for_node(ctx, baselines, [g["name"] for g in inv])
    expect = expectations(baselines, key, a)
    hcas = expected_hcas(a, expect, ib_ports.scan(a.sysfs_root) if a.transport == "ib" else [])
    binary = shutil.which(a.all_reduce_perf)
    impl = a.impl if a.impl != "auto" else ("nccl-tests" if binary else "torch")
    if impl == "nccl-tests" and not binary:
        raise SuiteError(f"--impl nccl-tests but {a.all_reduce_perf!r} is not in PATH", code="TOOL_MISSING")
    env = nccl_env(a.transport, a.ib_hca)
    ctx.environment.update(
        gpu_model=name, gpu_count=n, baseline=key, expectations=expect.as_environment(),
        gpus=[{k: g.get(k) for k in ("index", "name", "uuid", "pci_bus_id")} for g in inv],
        nccl_impl=impl, nccl_transport_mode=a.transport,
        nccl_env={k: v for k, v in env.items() if not k.startswith("NCCL_DEBUG")},
    )
    if hcas.count is not None:
        ctx.metric("nccl_hcas_expected", hcas.count)
    return Plan(**common, n=n, backend="nccl", impl=impl, binary=binary,
                metric="nccl_ib_busbw_gbps" if a.transport == "ib" else "nccl_nvlink_busbw_gbps", key=key, env=env,
                hcas=hcas if a.transport == "ib" else None)


def expected_hcas(a, expect, ports: list | None = None) -> HcaBar:
    """The HCA ports this run must use: --expected-hcas; else the devices an inclusive exact --ib-hca
    lists (the operator restricted NCCL to them); else, for a prefix or an exclusion, the ports of
    the node that NCCL_IB_HCA selects as NCCL reads it (nic_selector; `ports`: sysfs), never fewer
    than the node's expectation when the selector leaves every present port in; else the node's
    expectation (model / --expect). Never what NCCL happened to find: a node with HCAs down must not
    lower its own bar."""
    if a.expected_hcas is not None:
        return HcaBar(a.expected_hcas, "--expected-hcas")
    node = expect.get("hcas")
    sel = nic_selector.parse(a.ib_hca) if a.ib_hca else None
    if sel is not None and sel.names_each:
        names = tuple(str(i) for i in sel.items)
        return HcaBar(len(names), f"--ib-hca {a.ib_hca} names {len(names)}", names)
    listed = [p for p in ports or [] if p.link_layer == "InfiniBand" or p.device_error or sel is not None]
    if sel is not None and listed:
        taken = [p for p in listed if sel.selects(p.device, p.port)]
        if len(taken) < len(listed) or not node:  # the selector restricts NCCL to these
            return HcaBar(len(taken), f"{sel.describe()} selects {len(taken)} of the node's {len(listed)} "
                          f"port(s) ({', '.join(p.name for p in taken) or 'none'})",
                          tuple(p.name for p in taken))
        ib = [p for p in taken if p.link_layer == "InfiniBand"]
        if ib and len(ib) < len(taken):  # one fabric, one link layer: the others are not rails
            return HcaBar(max(node, len(ib)), f"{expect.basis('hcas')}; {sel.describe()} selects every port, "
                          f"{len(ib)} of them InfiniBand", layer="IB")
        return HcaBar(max(node, len(taken)), f"{expect.basis('hcas')}; {sel.describe()} selects every port")
    return HcaBar(node, expect.basis("hcas") + (f"; {sel.describe()}" if sel is not None else ""))


def _judge_nccl_said(ctx: Context, plan: Plan, info: dict) -> bool:
    """Transport, HCA count and IB errors from the NCCL INFO output; True when any of them failed."""
    a = ctx.args
    judge_transport(ctx, info, a.transport, a.expect_net, plan.n)
    if a.transport == "ib":
        if info["networks"] or info["ib_devices"] or info["ib_no_device"]:
            judge_hcas(ctx, info, plan.hcas)
        else:
            ctx.check("ib_hcas", "skip", code="NCCL_TRANSPORT_UNKNOWN",
                      message="NCCL printed no network selection: the HCAs it found cannot be counted")
    if info["ib_errors"]:
        ctx.check("ib_errors", "fail", value=len(info["ib_errors"]), code="IB_COMPLETION_ERROR",
                  message=f"NCCL reported IB completion errors (link / HCA / cable fault): "
                  f"{one_line(info['ib_errors'][0], 200)}")
    return any(c.status == "fail" for c in ctx.checks if c.name in ("transport", "transport_isolation", "ib_hcas", "ib_errors"))


def _judge_broken_run(ctx: Context, plan: Plan, info: dict | None, text: str, problem: str) -> None:
    """The run did not complete. What NCCL said before it broke (sockets, no IB device, fewer HCAs,
    IB completion errors) or a hardware-class CUDA error is a verdict on the node; anything else
    leaves it unjudged (error)."""
    said = info is not None and (info["transport_families"] or info["networks"] or info["ib_no_device"]
                                 or info["ib_errors"])
    if said and _judge_nccl_said(ctx, plan, info):
        ctx.warn(f"run did not complete: {one_line(problem, 200)}")
        return
    hw = re.search(r"Test CUDA failure [^']*'([^']*(?:ECC|fallen off the bus|NVLink|Xid|unspecified launch failure)[^']*)'",
                   text, re.I)
    if hw:
        ctx.check("allreduce_values", "fail", code="GPU_HW_ERROR",
                  message=f"all_reduce_perf stopped on a hardware-class CUDA error: {one_line(hw.group(1), 200)}")
        return
    warn = f"; NCCL WARN: {one_line(info['warnings'][0], 150)}" if info and info["warnings"] else ""
    code = "TOOL_MISSING" if re.search(r"error while loading shared libraries", text) else None
    raise SuiteError(problem + warn, code=code)


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
