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

from . import parsers
from .baselines import Baselines, model_for_node
from .common import Context, SuiteError, fmt, gpu_inventory, main_entry, one_line, run_suite

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
def judge_transport(
    ctx: Context, info: dict, transport: str, expect_net: str, n: int, expected_hcas: int | None
) -> None:
    families = info["transport_families"]
    nets = info["networks"]
    ctx.environment.update(
        nccl_networks=sorted(nets), nccl_transports=families, nccl_ib_devices=sorted(info["ib_devices"])
    )
    ctx.metric("nccl_channels", info["channel_count"])
    ctx.metric("nccl_gdr_channels", info["gdr_channels"])
    ctx.metric("nccl_ib_devices", len(info["ib_devices"]), summary=transport == "ib")
    if n < 2:
        ctx.check("transport", "skip", message="single GPU: no inter-GPU transport to prove")
        return
    net_fams = {f: c for f, c in families.items() if f.startswith("NET/")}
    summary = ", ".join(f"{f} x{c}" for f, c in sorted(families.items())) or "none"
    if transport == "ib":
        sock = "Socket" in nets or "NET/Socket" in families
        wanted = [f for f in net_fams if re.search(expect_net, f[4:])]
        if sock:
            ctx.check(
                "transport",
                "fail",
                value="NET/Socket",
                device=None,
                threshold=f"NET matching /{expect_net}/",
                message="NCCL fell back to socket transport (NET/Socket) instead of IB; "
                f"channels: {summary}; "
                f"networks: {', '.join(nets) or 'none'}"
                + (" (NET/IB: no device found)" if info["ib_no_device"] else ""),
            )
        elif "P2P" in families or "SHM" in families or "NVLS" in families:
            ctx.check(
                "transport",
                "fail",
                value=summary,
                threshold="NET only",
                message="intra-node P2P/SHM used although disabled, traffic did not leave the node: "
                + summary,
            )
        elif wanted and len(wanted) == len(net_fams):
            gdr = info["gdr_channels"]
            ctx.check(
                "transport",
                "pass",
                value=",".join(sorted(wanted)),
                threshold=f"NET matching /{expect_net}/",
                message=f"{info['channel_count']} channel(s) via {', '.join(sorted(wanted))} "
                f"({gdr} with GPUDirect RDMA); HCAs: {', '.join(sorted(info['ib_devices'])) or '?'}",
            )
            if gdr == 0:
                ctx.check(
                    "gpudirect_rdma",
                    "warn",
                    value=0,
                    unit="channels",
                    message="no channel uses GPUDirect RDMA: data is staged through host memory",
                )
        elif net_fams:
            ctx.check(
                "transport",
                "fail",
                value=",".join(sorted(net_fams)),
                threshold=f"NET matching /{expect_net}/",
                message=f"NCCL used {', '.join(sorted(net_fams))}, not a network matching /{expect_net}/",
            )
        elif any(re.search(expect_net, k) for k in nets):
            ctx.check(
                "transport",
                "warn",
                value=",".join(sorted(nets)),
                threshold=f"NET matching /{expect_net}/",
                message=f"NCCL chose network {', '.join(sorted(nets))} but printed no channel lines",
            )
        else:
            ctx.check(
                "transport",
                "error",
                message="could not determine the transport: no 'Using network' or "
                "'via NET/...' lines in the NCCL INFO output",
            )
        if expected_hcas is not None:
            have = len(info["ib_devices"])
            ctx.check(
                "ib_hcas",
                "pass" if have >= expected_hcas else "fail",
                value=have,
                unit="ports",
                threshold=f">= {expected_hcas}",
                message=f"NCCL found {have} usable HCA port(s): "
                + (", ".join(sorted(info["ib_devices"])) or "none"),
            )
    else:
        if net_fams or "SHM" in families:
            ctx.check(
                "transport",
                "fail",
                value=summary,
                threshold="P2P/NVLS only",
                message=f"NVLink mode but NCCL used {summary}: P2P between GPUs is not available",
            )
        elif "P2P" in families or "NVLS" in families:
            ctx.check(
                "transport", "pass", value=summary, message=f"{info['channel_count']} channel(s): {summary}"
            )
        else:
            ctx.check(
                "transport", "error", message="could not determine the transport from the NCCL INFO output"
            )


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
    wrong_rows = [r for r in rows if r.get("wrong")]
    unvalidated = [r for r in rows if r.get("wrong") is None]
    if wrong_rows:
        r = wrong_rows[0]
        ranks = sorted({k for x in wrong_rows for k in (x.get("wrong_by_rank") or {})})
        devices = [rank_device(k) if rank_device else f"rank{k}" for k in ranks]
        ctx.check(
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
    elif unvalidated:
        ctx.check(
            "allreduce_values", "error", message=f"{len(unvalidated)} size(s) without a validation result"
        )
    else:
        ctx.check(
            "allreduce_values",
            "pass",
            value=0,
            unit="elements",
            threshold="== 0",
            message=f"reduced values correct at all {len(rows)} sizes",
        )
    for r in rows:
        tag = _human(r["size"])
        ctx.metric(f"nccl_busbw_gbps.{tag}", r["busbw"])
        ctx.metric(f"nccl_algbw_gbps.{tag}", r["algbw"])
    big = rows[-1]
    ctx.metric("nccl_size_bytes", big["size"], summary=True)
    ctx.metric("nccl_busbw_gbps", big["busbw"], summary=True)
    ctx.metric("nccl_algbw_gbps", big["algbw"], summary=True)
    ctx.metric("nccl_busbw_peak_gbps", max(r["busbw"] for r in rows), summary=True)
    ctx.metric("nccl_ranks", n, summary=True)
    if n < 2:
        ctx.check(
            "busbw",
            "skip",
            value=big["busbw"],
            unit="GB/s",
            message="single rank: all-reduce moves no data",
            code="NCCL_BUSBW_NOT_JUDGED",
        )
        return
    if min_busbw is not None:
        floor, basis = min_busbw, "--min-busbw"
    elif expectation is not None:
        floor, basis = expectation.floor, expectation.basis()
    else:
        floor, basis = None, f"no baseline for this model{unit_note}"
    ctx.at_least(
        "busbw",
        big["busbw"],
        floor,
        unit="GB/s",
        device=f"{_human(big['size'])}B",
        basis=f"{n} ranks; {basis}",
    )


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
        first = next((ln for ln in reversed(text.splitlines()) if "WARN" in ln or "error" in ln.lower()), "")
        return (
            [],
            text,
            f"all_reduce_perf exited {rc} without usable results ({exc}) {one_line(first, 160)}".strip(),
        )
    rows = []
    for r in parsed["rows"]:
        wrong = None if r["oop_wrong"] is None or r["ip_wrong"] is None else r["oop_wrong"] + r["ip_wrong"]
        best = max(
            (r["oop_busbw"], r["oop_algbw"], r["oop_time_us"]),
            (r["ip_busbw"], r["ip_algbw"], r["ip_time_us"]),
        )
        rows.append(
            {"size": r["size"], "busbw": best[0], "algbw": best[1], "time_us": best[2], "wrong": wrong}
        )
    if parsed["oob"]:
        ctx.check(
            "nccl_tests_oob",
            "fail",
            value=parsed["oob"],
            unit="elements",
            threshold="== 0",
            message=f"all_reduce_perf reports {parsed['oob']} out-of-bounds value(s) "
            f"('Out of bounds values : {parsed['oob']} FAILED')",
            code="NCCL_WRONG_VALUES",
        )
    if parsed["header"].get("validation") == 0:
        for r in rows:
            r["wrong"] = None
    # all_reduce_perf exits 1 whenever a value was wrong: that exit is the verdict it printed, not a
    # crash. Any other non-zero exit (or one without wrong values to explain it) leaves the run unjudged.
    explained = rc == 1 and (parsed["oob"] or any(r["wrong"] for r in rows))
    problem = None if rc == 0 or explained else f"all_reduce_perf exited with code {rc}"
    if explained:
        ctx.log(f"all_reduce_perf exited {rc} because it found wrong values: judged as a failure")
    return rows, text, problem


def run_torch(
    ctx: Context, backend: str, n: int, sizes: list[int], iters: int, warmup: int, env: dict, timeout: float
) -> tuple[list[dict], str, str | None]:
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
def run(ctx: Context) -> None:
    a = ctx.args
    cpu = ctx.cpu
    baselines = Baselines.load(a.baselines)
    try:
        min_b = _bytes(a.min_bytes or ("1K" if cpu else "1M"))
        max_b = _bytes(a.max_bytes or ("4M" if cpu else "4G"))
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
    factor = a.factor or (4 if cpu else 2)
    sizes = sweep(min_b, max_b, factor)
    iters = a.iters or (5 if cpu else 20)
    warmup = a.warmup if a.warmup is not None else (2 if cpu else 5)
    run_timeout = a.run_timeout or (90 if cpu else 240)

    if cpu:
        n, inv, source = a.cpu_ranks, [], "CPU mode"
        if a.expected_gpus:
            inv, _, src = gpu_inventory()
            ctx.check_gpu_count(len(inv), source=src)
        else:
            ctx.check_gpu_count(0, source="CPU mode")
        if n < 1:
            raise SuiteError("--cpu-ranks must be >= 1")
        backend, impl = "gloo", "torch"
        key, name = model_for_node(ctx, baselines, [])
        metric = "nccl_gloo_busbw_gbps"
        ctx.environment.update(gpu_model=a.gpu_model, gpu_count=0, baseline=None)
    else:
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # rank N on nvidia-smi's GPU N
        n, inv, source = visible_gpus(ctx)
        if not ctx.check_gpu_count(n, source=source):
            return
        key, name = model_for_node(ctx, baselines, [g["name"] for g in inv])
        ctx.environment.update(
            gpu_model=name,
            gpu_count=n,
            baseline=key,
            gpus=[{k: g.get(k) for k in ("index", "name", "uuid", "pci_bus_id")} for g in inv],
        )
        backend = "nccl"
        binary = shutil.which(a.all_reduce_perf)
        impl = a.impl if a.impl != "auto" else ("nccl-tests" if binary else "torch")
        if impl == "nccl-tests" and not binary:
            raise SuiteError(f"--impl nccl-tests but {a.all_reduce_perf!r} is not in PATH", code="TOOL_MISSING")
        metric = "nccl_ib_busbw_gbps" if a.transport == "ib" else "nccl_nvlink_busbw_gbps"
    env = nccl_env(a.transport, a.ib_hca) if not cpu else {}
    ctx.environment.update(
        nccl_impl=impl,
        nccl_transport_mode=a.transport if not cpu else "gloo",
        nccl_env={k: v for k, v in env.items() if not k.startswith("NCCL_DEBUG")},
    )
    ctx.set_phase(
        f"all-reduce {impl}/{backend}, {n} ranks, {_human(sizes[0])}..{_human(sizes[-1])}B "
        f"x{factor}, {iters} iters, env {' '.join(f'{k}={v}' for k, v in env.items())}"
    )
    if impl == "nccl-tests":
        rows, text, problem = run_nccl_tests(ctx, binary, n, sizes, factor, iters, warmup, env, run_timeout)
    else:
        rows, text, problem = run_torch(ctx, backend, n, sizes, iters, warmup, env, run_timeout)

    info = parsers.parse_nccl_log(text) if not cpu else None
    if info and info.get("version"):
        ctx.environment["nccl"] = info["version"]
    if problem:
        if info and (info["transport_families"] or info["networks"]):
            # NCCL said which network it chose before the run broke: a fall-back to sockets (no IB
            # device, e.g. NVIDIA/nccl-tests#217) is the node's fault even without a result table
            judge_transport(ctx, info, a.transport, a.expect_net, n, a.expected_hcas)
            if any(c.name == "transport" and c.status == "fail" for c in ctx.checks):
                ctx.warn(f"run did not complete: {one_line(problem, 200)}")
                return
        if info and info["ib_errors"]:
            # the run broke because the fabric did: that is a verdict on the node, not "could not judge"
            ctx.check(
                "ib_errors",
                "fail",
                value=len(info["ib_errors"]),
                message=f"NCCL reported IB completion errors (link / HCA / cable fault), run aborted: "
                f"{one_line(info['ib_errors'][0], 200)}",
            )
            return
        warn = f"; NCCL WARN: {one_line(info['warnings'][0], 150)}" if info and info["warnings"] else ""
        raise SuiteError(problem + warn)
    if not rows:
        raise SuiteError("the all-reduce produced no results")
    if cpu:
        ctx.check(
            "transport", "skip", message="CPU mode: gloo over TCP loopback has no NCCL transport to prove"
        )
    else:
        judge_transport(ctx, info, a.transport, a.expect_net, n, a.expected_hcas)
        if info["ib_errors"]:
            ctx.check(
                "ib_errors",
                "fail",
                value=len(info["ib_errors"]),
                message=f"NCCL reported IB completion errors: {one_line(info['ib_errors'][0], 200)}",
            )
    nics = nics_in_use(info, a.ib_hca) if (not cpu and a.transport == "ib") else None
    if nics:
        ctx.metric("nccl_nics_used", nics)
    expectation = baselines.expectation(key, metric, n, nics=nics) if key else None
    note = "" if key else " (unknown GPU model)"
    if not cpu and expectation is None and key:
        note = f" ({key} has no {metric} baseline)"
    judge_rows(
        ctx,
        sorted(rows, key=lambda r: r["size"]),
        n,
        expectation,
        a.min_busbw,
        note,
        rank_device=(lambda k: f"cpu-rank{k}") if cpu else (lambda k: f"cuda:{k}"),
    )


def nics_in_use(info: dict | None, ib_hca: str | None) -> int | None:
    """How many HCA ports NCCL actually used: what it reported (`NET/IB : Using [0]mlx5_0:1/IB ...`),
    else the entries of an inclusive NCCL_IB_HCA list; None when unknown (the model's nics_per_node
    applies). With --ib-hca restricting NCCL to one HCA, a healthy node shares one NIC among all GPUs."""
    if info and info.get("ib_devices"):
        return len(info["ib_devices"])
    if ib_hca and not ib_hca.lstrip("=").startswith("^"):
        names = [x for x in ib_hca.lstrip("=").split(",") if x.strip()]
        return len(names) or None
    return None


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
