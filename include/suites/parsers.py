"""Parsers for the outputs of the tools the suites drive. Pure functions, no I/O.

Each parser raises ValueError on output it cannot make sense of: the caller turns that into an
`error` check ("garbage output"), never a pass.

  fio --output-format=json          parse_fio
  NCCL_DEBUG=INFO logs              parse_nccl_log
  nccl-tests all_reduce_perf        parse_nccl_tests
  nvidia-smi -q -x                  parse_smi_xml
  nvidia-smi nvlink -s              parse_nvlink_status
(the kernel log is split and classified by checkers/kernel_log.py and checkers/driver_log.py)
  dcgmi diag -r N -j (DCGM 3.x / 4.x) parse_dcgmi_diag_json
  dcgmi diag -r N (DCGM 3.x / 4.x)  parse_dcgmi_diag (the table; the fallback)
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from typing import Any

MIB = 1024 * 1024


# --------------------------------------------------------------------------------------------------
# fio
# --------------------------------------------------------------------------------------------------
def extract_json_object(text: str) -> dict:
    """The first complete JSON object in text. fio may print notes ("fio: ...") before or after it."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^\s*\{", text)] or [
        m.start() for m in re.finditer(r"\{", text)
    ]
    for pos in starts:
        pos = text.index("{", pos)
        try:
            obj, _ = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    raise ValueError("no JSON object in fio output")


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def _p99_ms(d: dict) -> float | None:
    """p99 completion latency in ms: fio 3 `clat_ns` (ns), fio 2 `clat` (usec), else `lat_ns`."""
    for key, scale in (("clat_ns", 1e-6), ("clat", 1e-3), ("lat_ns", 1e-6)):
        block = d.get(key)
        if not isinstance(block, dict):
            continue
        pct = block.get("percentile")
        if isinstance(pct, dict):
            for k, v in pct.items():
                if abs(float(k) - 99.0) < 1e-6 and _num(v) is not None:
                    return _num(v) * scale
    return None


def _direction(d: Any) -> dict | None:
    if not isinstance(d, dict):
        return None
    bw_bytes = _num(d.get("bw_bytes"))
    if bw_bytes is None and _num(d.get("bw")) is not None:
        bw_bytes = _num(d.get("bw")) * 1024  # fio reports bw in KiB/s
    io_bytes = _num(d.get("io_bytes"))
    if io_bytes is None and _num(d.get("io_kbytes")) is not None:
        io_bytes = _num(d.get("io_kbytes")) * 1024
    return {
        "bw_mibps": None if bw_bytes is None else bw_bytes / MIB,
        "iops": _num(d.get("iops")),
        "p99_ms": _p99_ms(d),
        "io_bytes": io_bytes,
        "runtime_ms": _num(d.get("runtime")),
    }


def parse_fio(text: str) -> dict:
    """{'version': str, 'jobs': {jobname: {'error': int, 'read': {...}, 'write': {...}}}}.

    Clones of one job (numjobs > 1 without group_reporting) are merged: bandwidth and IOPS add up,
    p99 takes the worst clone, an error in any clone is kept."""
    data = extract_json_object(text)
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise ValueError("fio JSON has no 'jobs' list")
    out: dict[str, dict] = {}
    for job in jobs:
        if not isinstance(job, dict) or "jobname" not in job:
            raise ValueError("fio JSON job without a jobname")
        name = str(job["jobname"])
        err = int(_num(job.get("error")) or 0)
        cur = {"error": err, "read": _direction(job.get("read")), "write": _direction(job.get("write"))}
        if name not in out:
            out[name] = cur
            continue
        prev = out[name]
        prev["error"] = prev["error"] or err
        for side in ("read", "write"):
            a, b = prev[side], cur[side]
            if a is None or b is None:
                prev[side] = a or b
                continue
            for k in ("bw_mibps", "iops", "io_bytes"):
                if a[k] is not None or b[k] is not None:
                    a[k] = (a[k] or 0) + (b[k] or 0)
            ps = [p for p in (a["p99_ms"], b["p99_ms"]) if p is not None]
            a["p99_ms"] = max(ps) if ps else None
    return {"version": str(data.get("fio version", "")), "jobs": out}


# --------------------------------------------------------------------------------------------------
# NCCL INFO logs
# --------------------------------------------------------------------------------------------------
_NCCL_LINE = re.compile(r"NCCL (INFO|WARN) (.*)$")
# `Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA`, `Channel 01 : 2[c7000] -> 0[87000] ...`
# (bus ids in the brackets, nccl#707), `Ring 00 : 15 -> 0 [send] via NET/Socket/0` (NCCL 2.4, nccl#398)
_CHANNEL = re.compile(
    r"(?:Channel|Ring) \d+(?:/\d+)? : \d+(?:\[[0-9a-fx]+\])? -> \d+(?:\[[0-9a-fx]+\])?"
    r"(?: \[(send|receive)\])? via (.+?)\s*$"
)
_IB_DEV = re.compile(r"\[\d+\]([A-Za-z0-9_.\-]+):(\d+)/([A-Za-z]+)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
_IB_COMPLETION = re.compile(
    r"(Got completion.*(error|status=\s*[1-9])|IBV_WC_\w+_ERR|NET/IB.*(timeout|retry))", re.I
)


def parse_nccl_log(text: str) -> dict:
    """What NCCL said about itself: version, chosen network, IB devices, channel transports, warnings."""
    # Long: one pass over NCCL's INFO lines, one branch per line kind.
    networks: Counter = Counter()
    transports: Counter = Counter()
    ib_devices: dict[str, str] = {}
    warns: list[str] = []
    ib_errors: list[str] = []
    version = None
    ib_no_device = False
    socket_ifs: list[str] = []
    init_complete = 0
    for raw in text.splitlines():
        line = raw.strip()
        m = _VERSION.search(line)
        if m and not version:
            version = m.group(1)
        m = _NCCL_LINE.search(line)
        if not m:
            continue
        level, msg = m.group(1), m.group(2).strip()
        if level == "WARN":
            if len(warns) < 20:
                warns.append(msg)
            if _IB_COMPLETION.search(msg):
                ib_errors.append(msg)
            continue
        if msg.startswith("Using network "):
            networks[msg[len("Using network ") :].strip()] += 1
        elif msg.startswith("NET/IB : No device found"):
            ib_no_device = True
        elif re.match(r"NET/IB\w* ?: Using ", msg):
            for dev, port, layer in _IB_DEV.findall(msg):
                ib_devices[f"{dev}:{port}"] = layer
        elif msg.startswith("NET/Socket : Using "):
            socket_ifs = re.findall(r"\[\d+\]([^:\s]+):", msg)
        elif "Init COMPLETE" in msg:
            init_complete += 1
        else:
            cm = _CHANNEL.search(msg)
            if cm:
                transports[cm.group(2)] += 1
    families: Counter = Counter()
    gdr = 0
    for t, n in transports.items():
        parts = t.split("/")
        fam = parts[0]
        if fam == "NET" and len(parts) > 1:
            fam = "NET/" + parts[1]
        families[fam] += n
        if "GDRDMA" in t:
            gdr += n
    return {
        "version": version,
        "networks": dict(networks),
        "ib_devices": ib_devices,
        "ib_no_device": ib_no_device,
        "socket_interfaces": socket_ifs,
        "transports": dict(transports),
        "transport_families": dict(families),
        "gdr_channels": gdr,
        "channel_count": sum(transports.values()),
        "warnings": warns,
        "ib_errors": ib_errors,
        "init_complete": init_complete,
    }


# --------------------------------------------------------------------------------------------------
# nccl-tests (all_reduce_perf)
# --------------------------------------------------------------------------------------------------
_TYPES = {
    "int8",
    "uint8",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "half",
    "float",
    "double",
    "bfloat16",
    "fp8_e4m3",
    "fp8_e5m2",
    "f8e4m3",
    "f8e5m2",
}


# nccl-tests before 2.13 print the largest absolute error of a size (`error`, e.g. 4e-07) instead of
# the number of wrong elements (`#wrong`), and count a size as wrong only beyond DeltaMaxValue(type)
# of their common.cu: a float sum legitimately differs by rounding (NVIDIA/nccl#1244, #527).
_MAX_DELTA = {"half": 1e-2, "bfloat16": 1e-2, "float": 1e-5, "double": 1e-12}


def _wrong(tok: str, dtype: str) -> int | None:
    """Wrong elements of one column: the count (`#wrong`), or 0/1 for a max error within/beyond the
    tool's tolerance (`error`; the old layout does not say how many); None when not validated."""
    if tok.upper() == "N/A":
        return None
    if tok.isdigit():
        return int(tok)
    delta = float(tok)  # ValueError propagates: the row is garbage
    return 0 if delta <= _MAX_DELTA.get(dtype, 0.0) else 1


def parse_nccl_tests(text: str) -> dict:
    """Rows of the out-of-place / in-place table, the header, the OOB line and the average busbw.

    Supports the current layout (with `root` and `#wrong` columns, nccl-tests >= 2.13) and the older
    one (no root column, `error` column holding the largest absolute error, judged against the tool's
    own tolerance per type). Interleaved NCCL INFO lines are ignored."""
    header: dict[str, Any] = {}
    rows: list[dict] = []
    oob = None
    oob_ok = None
    avg = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("# nThread"):
            for k, v in re.findall(r"(\w[\w ]*?):?\s+(\d+)", line[1:]):
                header[k.strip().replace(" ", "_")] = int(v)
            continue
        m = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(\w+)?", line)
        if m:
            oob, oob_ok = int(m.group(1)), (m.group(2) or "").upper() == "OK"
            continue
        m = re.match(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", line)
        if m:
            avg = float(m.group(1))
            continue
        if not line or line.startswith("#") or not line[0].isdigit():
            continue
        tok = line.split()
        if len(tok) not in (12, 13) or tok[2] not in _TYPES:
            continue  # NCCL INFO lines start with a hostname that may begin with a digit
        off = 1 if len(tok) == 13 else 0  # `root` column
        try:
            row = {
                "size": int(tok[0]),
                "count": int(tok[1]),
                "type": tok[2],
                "redop": tok[3],
                "oop_time_us": float(tok[4 + off]),
                "oop_algbw": float(tok[5 + off]),
                "oop_busbw": float(tok[6 + off]),
                "oop_wrong": _wrong(tok[7 + off], tok[2]),
                "ip_time_us": float(tok[8 + off]),
                "ip_algbw": float(tok[9 + off]),
                "ip_busbw": float(tok[10 + off]),
                "ip_wrong": _wrong(tok[11 + off], tok[2]),
            }
        except ValueError as exc:
            raise ValueError(f"unparseable all_reduce_perf row: {line!r}") from exc
        rows.append(row)
    if not rows:
        raise ValueError("no result rows in all_reduce_perf output")
    return {"header": header, "rows": rows, "oob": oob, "oob_ok": oob_ok, "avg_busbw": avg}


# --------------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------------------------------
def _txt(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    el = node.find(path)
    if el is None or el.text is None:
        return None
    t = el.text.strip()
    return None if t in ("", "N/A", "Unknown Error", "Not Supported") or "deprecated" in t.lower() else t


def _int(node: ET.Element | None, path: str) -> int | None:
    t = _txt(node, path)
    if t is None:
        return None
    m = re.match(r"-?\d+", t)
    return int(m.group(0)) if m else None


def _yes(node: ET.Element | None, path: str) -> bool | None:
    t = _txt(node, path)
    return None if t is None else t.strip().lower() in ("yes", "active", "enabled", "true")


def _sum_ints(node: ET.Element | None, paths: list[str]) -> int | None:
    vals = [_int(node, p) for p in paths]
    vals = [v for v in vals if v is not None]
    return sum(vals) if vals else None


_UNC_PATHS = [
    "dram_uncorrectable",
    "sram_uncorrectable",
    "sram_uncorrectable_parity",
    "sram_uncorrectable_secded",
    "double_bit/total",
]


def _fabric_unavailable(g: ET.Element) -> str | None:
    """Why `nvidia-smi -q` gave no fabric state (None: it gave one)."""
    if _txt(g, "fabric/state"):
        return None
    return "nvidia-smi -q printed no Fabric section" if g.find("fabric") is None else \
        "nvidia-smi -q printed the Fabric state as N/A"


def parse_smi_xml(text: str) -> dict:
    """Normalised per-GPU health state from `nvidia-smi -q -x` (old and new tag names)."""
    # Long: one field per line of the normalised state.
    start = min((i for i in (text.find("<?xml"), text.find("<nvidia_smi_log")) if i >= 0), default=-1)
    if start < 0:
        raise ValueError("no nvidia_smi_log XML in the output")
    body = text[start:]
    end = body.rfind("</nvidia_smi_log>")
    body = body[: end + len("</nvidia_smi_log>")] if end >= 0 else body
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        try:  # some expat builds choke on the external DTD reference: drop it and retry
            root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", body))
        except ET.ParseError as exc:
            raise ValueError(f"nvidia-smi XML does not parse: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"unexpected XML root <{root.tag}>")
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        throttle_block = g.find("clocks_event_reasons")
        prefix = "clocks_event_reason_"
        if throttle_block is None:
            throttle_block = g.find("clocks_throttle_reasons")
            prefix = "clocks_throttle_reason_"
        active: list[str] | None = None
        if throttle_block is not None:
            active = [
                el.tag.replace(prefix, "")
                for el in throttle_block
                if (el.text or "").strip().lower() == "active"
            ]
        pstate = _txt(g, "performance_state")
        gpus.append(
            {
                "index": i,
                "name": _txt(g, "product_name"),
                "uuid": _txt(g, "uuid"),
                "pci_bus_id": g.get("id") or _txt(g, "pci/pci_bus_id"),
                "ecc_enabled": _yes(g, "ecc_mode/current_ecc"),
                "volatile_uncorrected": _sum_ints(g.find("ecc_errors/volatile"), _UNC_PATHS),
                "aggregate_uncorrected": _sum_ints(g.find("ecc_errors/aggregate"), _UNC_PATHS),
                "retired_pending": _yes(g, "retired_pages/pending_retirement"),
                "retired_dbe": _int(g, "retired_pages/double_bit_retirement/retired_count"),
                "remap_pending": _yes(g, "remapped_rows/remapped_row_pending"),
                "remap_failure": _yes(g, "remapped_rows/remapped_row_failure"),
                "remap_uncorrectable": _int(g, "remapped_rows/remapped_row_unc"),
                "throttle_active": sorted(active) if active is not None else None,
                "pcie_gen": _int(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
                "pcie_gen_max": _int(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
                "pcie_gen_gpu_max": _int(g, "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen"),
                "pcie_width": _int(g, "pci/pci_gpu_link_info/link_widths/current_link_width"),
                "pcie_width_max": _int(g, "pci/pci_gpu_link_info/link_widths/max_link_width"),
                "pcie_replays": _int(g, "pci/replay_counter"),
                "pstate": int(pstate[1:]) if pstate and re.fullmatch(r"P\d+", pstate) else None,
                "temp_c": _int(g, "temperature/gpu_temp"),
                "slowdown_temp_c": _int(g, "temperature/gpu_temp_slow_threshold"),
                "fabric_state": _txt(g, "fabric/state"),
                "fabric_status": _txt(g, "fabric/status"),
                "recovery_action": _txt(g, "gpu_recovery_action"),
                "reset_required": _yes(g, "gpu_reset_status/reset_required"),
                "drain_and_reset": _yes(g, "gpu_reset_status/drain_and_reset_recommended"),
                "persistence": _yes(g, "persistence_mode"),
                "mig_mode": _txt(g, "mig_mode/current_mig"), "fabric_unavailable": _fabric_unavailable(g),
                "processes": len(g.findall("processes/process_info")),
                "process_mib": sum(_int(p, "used_memory") or 0 for p in g.findall("processes/process_info")),
                "nvlinks": None,  # not in -q -x; see parse_nvlink_status
                # fields the driver answered with an error: reported, never read as "not reported"
                "field_errors": sorted({el.tag for el in g.iter() if (el.text or "").strip() == "Unknown Error"}),
            }
        )
    attached = _int(root, "attached_gpus")
    return {
        "driver": _txt(root, "driver_version"),
        "cuda": _txt(root, "cuda_version"),
        "attached_gpus": attached,
        "gpus": gpus,
    }


_NVLINK_ALL_INACTIVE = re.compile(r"Unable to retrieve NVLink information as all links are inactive", re.I)


def parse_nvlink_status(text: str) -> dict[int, dict]:
    """`nvidia-smi nvlink -s`: {gpu: {"links": {link: GB/s, or None when inactive}, "all_inactive":
    bool, "unparsed": [lines], "uuid": the GPU's UUID when printed}}.

    Drivers print `Link 3: <inactive>` (V100, Azure/azhpc-diagnostics#73) and, when no link of a GPU
    is up, no Link lines but `NVML: Unable to retrieve NVLink information as all links are inActive`
    (B200 / 590, leptonai/gpud#1085, NVIDIA/open-gpu-kernel-modules#1150). A line of a GPU block
    that is neither is kept in `unparsed`: the caller reports it, it is never "no data"."""
    out: dict[int, dict] = {}
    cur = None
    for line in text.splitlines():
        if not line.strip():
            continue
        m = re.match(r"\s*GPU (\d+):", line)
        if m:
            cur = int(m.group(1))
            uuid = re.search(r"\(UUID: (GPU-[0-9a-fA-F-]+)\)", line)
            out[cur] = {"links": {}, "all_inactive": False, "unparsed": [], **({"uuid": uuid.group(1)} if uuid else {})}
            continue
        if cur is None:
            continue  # a preamble (e.g. a warning) before the first GPU block
        m = re.match(r"\s*Link (\d+):\s*(.+?)\s*$", line)
        if m:
            num = re.match(r"([0-9.]+)\s*GB/s", m.group(2))
            if num:
                out[cur]["links"][int(m.group(1))] = float(num.group(1))
            elif "inactive" in m.group(2).lower():
                out[cur]["links"][int(m.group(1))] = None
            else:
                out[cur]["unparsed"].append(line.strip())
        elif _NVLINK_ALL_INACTIVE.search(line):
            out[cur]["all_inactive"] = True
        else:
            out[cur]["unparsed"].append(line.strip())
    if not out:
        raise ValueError("no GPU sections in nvidia-smi nvlink -s output")
    return out


# --------------------------------------------------------------------------------------------------
# DCGM
# --------------------------------------------------------------------------------------------------
_DCGM_STATUS = re.compile(r"^(Pass|Fail|Skip|Warn|Not Run)\b", re.I)


def parse_dcgmi_diag(text: str) -> dict:
    """Tests and per-GPU results of the `dcgmi diag` table, DCGM 3.x and 4.x layouts.

    3.x: '| Memory | Fail - GPU: 0 |' and continuation rows '|  | Pass - GPU: 1 |';
    4.x: '| memory | Fail |' then '|  | GPU0: Fail |'. 'Warning' / 'Info' texts are cut every `width`
    characters, mid-word or not: a piece that fills the cell continues in the next row as is, a shorter
    one ended in a space that the padding hides (go-dcgm#52: 'cuCtxCreate Check' / 'DCGM and ...')."""
    # Long: a small state machine over the table's rows (sections, wrapped messages, per-GPU rows).
    tests: list[dict] = []
    meta: dict[str, str] = {}
    section = None
    cur: dict | None = None
    in_msg = False
    saw_table = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("|-----") or line.startswith("+-----"):
            m = re.match(r"[|+]-+\s+([A-Za-z ]+?)\s+-+", line)
            section = m.group(1).strip() if m else section
            cur, in_msg, saw_table = None, False, True
            continue
        if not line.startswith("|") or line.count("|") < 3:
            continue
        parts = line.split("|")
        left = parts[1].strip()
        right_raw = parts[2][1:] if parts[2].startswith(" ") else parts[2]  # drop the padding space only
        right = right_raw.strip()
        if left == "Diagnostic" and right == "Result":
            saw_table = True
            continue
        if section == "Metadata":
            if left:
                meta[left] = right
            continue
        if left in ("Warning", "Info", "Error"):
            if cur is not None:
                cur["messages"].append([left, right_raw.rstrip(), _fills_cell(parts[2])])
                in_msg = True
            continue
        if left:
            sm = _DCGM_STATUS.match(right)
            cur = {
                "category": section,
                "name": left,
                "status": sm.group(1).title() if sm else right,
                "gpus": {},
                "messages": [],
            }
            tests.append(cur)
            in_msg = False
            _dcgm_gpu_results(cur, right)
            continue
        if cur is None or not right:
            continue
        if _DCGM_STATUS.match(right) or re.match(r"GPU\d+:", right):
            in_msg = False
            _dcgm_gpu_results(cur, right)
        elif in_msg and cur["messages"]:
            msg = cur["messages"][-1]
            msg[1] += ("" if msg[2] else " ") + right_raw.rstrip()
            msg[2] = _fills_cell(parts[2])
    if not saw_table or not tests:
        raise ValueError("no dcgmi diag result table found")
    for t in tests:
        t["messages"] = [f"{k}: {' '.join(v.split())}" for k, v, _ in t["messages"]]
        if any(s == "Fail" for s in t["gpus"].values()):
            t["status"] = "Fail"
    return {
        "version": meta.get("DCGM Version"),
        "driver": meta.get("Driver Version Detected"),
        "metadata": meta,
        "tests": tests,
    }


def _fills_cell(cell: str) -> bool:
    """Whether a wrapped piece of text uses the whole cell: ' text' + padding, two columns of slack."""
    return len(cell[1:].rstrip()) >= len(cell) - 3


def _dcgm_gpu_results(test: dict, cell: str) -> None:
    m = re.match(r"GPU(\d+):\s*(\w+)", cell)  # DCGM 4.x
    if m:
        test["gpus"][int(m.group(1))] = m.group(2).title()
        return
    m = re.match(r"(Pass|Fail|Skip|Warn)\s*-\s*GPUs?:\s*([\d,\s]+)", cell, re.I)  # DCGM 3.x
    if m:
        for g in re.findall(r"\d+", m.group(2)):
            test["gpus"][int(g)] = m.group(1).title()


_DCGM_JSON_STATUS = {
    "pass": "Pass",
    "fail": "Fail",
    "skip": "Skip",
    "warn": "Warn",
    "warning": "Warn",
    "not run": "Not Run",
    "not_run": "Not Run",
    "notrun": "Not Run",
}
_DCGM_STATUS_RANK = {"Fail": 5, "Warn": 4, "Pass": 3, "Skip": 2, "Not Run": 1}


def _dcgm_json_status(value: Any) -> str | None:
    """'Pass' / 'PASS' (NVVS) / 'pass' -> 'Pass'; 'Fail - All' style suffixes are cut."""
    if not isinstance(value, str) or not value.strip():
        return None
    word = re.split(r"\s+-\s+", value.strip(), maxsplit=1)[0].lower()
    return _DCGM_JSON_STATUS.get(word, value.strip())


def _dcgm_json_gpu(result: dict) -> int | None:
    """The one GPU a result is about, or None for a result about the whole run (several GPUs, a CPU).

    DCGM 4: `entity_group` "GPU" (`entity_group_id` 1) and `entity_id`; DCGM 3 dcgmi: `gpu_id` "0";
    NVVS JSON: `gpu_ids` 0 or "0,1,2" (a list of GPUs is a global result, as the table's bare 'Pass')."""
    if "entity_id" in result:
        group = result.get("entity_group")
        if group is not None and str(group).upper() != "GPU":
            return None
        if group is None and result.get("entity_group_id") not in (None, 1):
            return None
        ids: Any = result.get("entity_id")
    else:
        ids = result.get("gpu_id", result.get("gpu_ids"))
    if isinstance(ids, bool):
        return None
    if isinstance(ids, int):
        return ids
    if isinstance(ids, str) and ids.strip().isdigit():
        return int(ids.strip())
    return None


def _dcgm_json_messages(block: dict, out: list[str]) -> None:
    """'Warning: ...' / 'Info: ...' from `warnings` (objects with `warning`, or strings) and `info`
    (a string, DCGM 3, or a list of strings, DCGM 4)."""
    for key, label in (("warnings", "Warning"), ("errors", "Error"), ("info", "Info")):
        items = block.get(key)
        if items is None:
            continue
        for item in items if isinstance(items, list) else [items]:
            if isinstance(item, dict):
                item = item.get("warning") or item.get("message") or item.get("msg")
            if isinstance(item, str) and item.strip():
                msg = f"{label}: {' '.join(item.split())}"
                if msg not in out:
                    out.append(msg)


def parse_dcgmi_diag_json(text: str) -> dict:
    """`dcgmi diag -r N -j`, the same dict as parse_dcgmi_diag: version, driver, metadata, tests
    [{category, name, status, gpus {index: status}, messages}].

    DCGM 3 (dcgmi `Diag.cpp`, NVVS `JsonOutput.cpp`): {"DCGM GPU Diagnostic": {"test_categories":
    [{"category", "tests": [{"name", "results": [{"gpu_id"|"gpu_ids", "status", "warnings", "info"}]}]}],
    "version", "Driver Version Detected"}}; NVVS 3.1 also puts `null` between tests and upper-case
    statuses. DCGM 4 (`testing/python3/dcgm_diag_schema.json`): {"DCGM Diagnostic": {"test_categories":
    [... results [{"entity_group", "entity_group_id", "entity_id", "status", "warnings", "info"}],
    "test_summary": {"status"}]}, "entity_groups": [...], "metadata": {"version", "Driver Version
    Detected"}}. Unknown keys are ignored. Text before the document (dcgmi or NVVS notes) is skipped.
    ValueError when there is no such document, or when it only carries dcgmi's `runtime_error`."""
    try:
        doc = extract_json_object(text or "")
    except ValueError:
        raise ValueError("no JSON document in dcgmi diag -j output") from None
    root = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic"))
    if not isinstance(root, dict):
        raise ValueError(
            "JSON without a 'DCGM Diagnostic' (DCGM 4) or 'DCGM GPU Diagnostic' (DCGM 3) object: "
            + ", ".join(sorted(map(str, doc))[:8])
        )
    meta, version, driver = _dcgm_json_metadata(doc, root)
    tests: list[dict] = []
    categories = root.get("test_categories")
    for cat in categories if isinstance(categories, list) else []:
        if not isinstance(cat, dict):
            continue
        for t in cat.get("tests") or []:
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                continue  # NVVS 3.1 puts null between the tests
            test = _dcgm_json_test(cat, t)
            if test is not None:
                tests.append(test)
    if not tests:
        err = root.get("runtime_error") or doc.get("runtime_error")
        if isinstance(err, str) and err.strip():
            raise ValueError(f"dcgmi diag did not run: {' '.join(err.split())}")
        raise ValueError("dcgmi diag JSON has no test results")
    return {"version": version, "driver": driver, "metadata": meta, "tests": tests}


def _dcgm_json_metadata(doc: dict, root: dict) -> tuple[dict[str, str], str | None, str | None]:
    """(metadata, DCGM version, driver version): the scalar fields of the root object (DCGM 3) and of
    `metadata` (DCGM 4), spelled as the text output spells them, and the GPUs of `entity_groups`."""
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    meta: dict[str, str] = {}
    for key, val in list(root.items()) + list(metadata.items()):
        if isinstance(val, (str, int, float)) and not isinstance(val, bool):
            meta[str(key)] = str(val)
    version = meta.get("version") or meta.get("DCGM Version")
    driver = meta.get("Driver Version Detected") or meta.get("driver_version") or meta.get("Driver Version")
    if version:
        meta.setdefault("DCGM Version", version)
    if driver:
        meta.setdefault("Driver Version Detected", driver)
    dev_ids = [
        str(e.get("device_id"))
        for g in doc.get("entity_groups") or []
        if isinstance(g, dict) and str(g.get("entity_group", "")).upper() == "GPU"
        for e in g.get("entities") or []
        if isinstance(e, dict) and e.get("device_id")
    ]
    if dev_ids:
        meta.setdefault("GPU Device IDs Detected", ", ".join(dev_ids))
    return meta, version, driver


def _dcgm_json_test(cat: dict, t: dict) -> dict | None:
    """One test of a category: {category, name, status, gpus {index: status}, messages}; None when it
    carries no result at all (it says nothing)."""
    test: dict = {"category": cat.get("category"), "name": t["name"], "status": None}
    test.update(gpus={}, messages=[])
    seen = []
    for r in t.get("results") or []:
        if not isinstance(r, dict):
            continue
        st = _dcgm_json_status(r.get("status"))
        if st:
            seen.append(st)
            gpu = _dcgm_json_gpu(r)
            if gpu is not None:
                test["gpus"][gpu] = st
        _dcgm_json_messages(r, test["messages"])
    summary = t.get("test_summary") if isinstance(t.get("test_summary"), dict) else {}
    _dcgm_json_messages(summary, test["messages"])
    overall = _dcgm_json_status(summary.get("status"))
    if overall is None and seen:
        overall = max(seen, key=lambda s: _DCGM_STATUS_RANK.get(s, 0))
    if overall is None:
        return None
    if "Fail" in seen:
        overall = "Fail"
    test["status"] = overall
    return test
