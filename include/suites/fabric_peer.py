"""fabric_peer: a test between two nodes of the same GPU model (a peer test), one pod on each.

The two sides meet at a TCP rendezvous (the server, rank 0, listens on CLUSTER_DOCTOR_PEER_PORT on
every interface; the client, rank 1, connects to CLUSTER_DOCTOR_PEER_ADDRESS), exchange what they
have, and then:

* `ib_write_bw` (perftest) per rail: the server runs one `ib_write_bw -d <hca> -p <base+1+i>` per
  HCA at once, the client drives them one after the other; the BW average of each rail is judged
  against the floor of its link type (baselines.yaml fabric_peer: the port's link layer, the rate
  the node's HCAs should run and the NIC), the slow rail named by its HCA; every expected rail
  appears (a missing HCA fails, never skipped);
* a two-rank all-reduce forced onto the network (torch.distributed: nccl with NCCL_NET=IB and
  NCCL_DEBUG=INFO, the transport proven from NCCL's own lines; gloo over TCP in CPU mode), the
  values checked bit for bit on both sides, the bus bandwidth against the per-rail floor times the
  rails the run can drive, from the node's EXPECTED HCA count (never the count found).

A peer that never shows up, or one that goes silent in a phase, is an `error` (PEER_UNREACHABLE)
with every check that phase and the later ones would have recorded visibly not run.

    python -m cluster_doctor_suites.fabric_peer --role server|client --peer-address HOST [--device cpu]
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time

from . import parsers
from .baselines import Baselines, Expectation, expectations, model_for_node
from .checkers import ib_hcas, ib_ports, ib_write_bw
from .harness.checks import Check, SuiteError
from .harness.context import Context
from .harness.runner import main_entry, run_suite
from .harness.text import fmt, one_line
from .harness.tools import _terminate

SUITE = "fabric_peer"
ROLES = ("server", "client")  # rank 0, rank 1
ALLREDUCE_CHECKS = ("allreduce_transport", "allreduce_values", "allreduce_busbw")


def _env(name: str, default=None):
    v = os.environ.get(name)
    return v if v not in (None, "") else default


def add_arguments(p) -> None:
    g = p.add_argument_group("fabric_peer (the rendezvous: environment variables in brackets)")
    g.add_argument("--role", choices=ROLES, default=_env("CLUSTER_DOCTOR_PEER_ROLE"),
                   help="server (rank 0: listens) or client (rank 1: connects) [CLUSTER_DOCTOR_PEER_ROLE]")
    g.add_argument("--peer-node", default=_env("CLUSTER_DOCTOR_PEER_NODE"),
                   help="the other node's name, recorded as the result's `peer` [CLUSTER_DOCTOR_PEER_NODE]")
    g.add_argument("--peer-address", default=_env("CLUSTER_DOCTOR_PEER_ADDRESS"),
                   help="host of the server (rank 0); the client connects there, the server binds 0.0.0.0 "
                   "[CLUSTER_DOCTOR_PEER_ADDRESS]")
    g.add_argument("--peer-port", type=int, default=_env("CLUSTER_DOCTOR_PEER_PORT", "29500"),
                   help="base TCP port: the rendezvous and torch.distributed use it, ib_write_bw rail i "
                   "port+1+i [CLUSTER_DOCTOR_PEER_PORT]")
    g.add_argument("--peer-timeout", type=float, default=_env("CLUSTER_DOCTOR_PEER_TIMEOUT", "300"),
                   help="seconds to wait for the peer [CLUSTER_DOCTOR_PEER_TIMEOUT]")
    g.add_argument("--ib-write-bw", default=_env("CLUSTER_DOCTOR_IB_WRITE_BW", "ib_write_bw"),
                   help="perftest's ib_write_bw [CLUSTER_DOCTOR_IB_WRITE_BW]")
    g.add_argument("--ib-write-bw-args", default=_env("CLUSTER_DOCTOR_IB_WRITE_BW_ARGS", ""),
                   help="extra ib_write_bw arguments on both sides, e.g. '-x 3' (RoCE GID index)")
    g.add_argument("--message-bytes", type=int, default=8388608, help="ib_write_bw -s (message size)")
    g.add_argument("--ib-iters", type=int, default=5000, help="ib_write_bw -n (iterations per rail)")
    g.add_argument("--rail-timeout", type=float, default=120, help="seconds one rail's ib_write_bw may take")
    g.add_argument("--sysfs-root", default=_env("CLUSTER_DOCTOR_IB_SYSFS", ib_ports.SYSFS_ROOT),
                   help="the RDMA devices' sysfs directory [CLUSTER_DOCTOR_IB_SYSFS]")
    g.add_argument("--ib-hca", default=_env("CLUSTER_DOCTOR_IB_HCA") or _env("NCCL_IB_HCA"),
                   help="the compute-fabric HCAs, NCCL_IB_HCA syntax (default: every InfiniBand port) "
                   "[CLUSTER_DOCTOR_IB_HCA, NCCL_IB_HCA]")
    g.add_argument("--nccl-net", default="IB", help="NCCL_NET for the all-reduce ('' lets NCCL choose)")
    g.add_argument("--expect-net", default="^IB", help="regex the NCCL network must match")
    g.add_argument("--allreduce-bytes", default=None, help="all-reduce message sizes, comma-separated; "
                   "default 1M,16M,256M (GPU), 4K,64K,1M (CPU)")
    g.add_argument("--iters", type=int, default=None, help="timed all-reduces per size; default 20 (GPU), 5 (CPU)")
    g.add_argument("--min-busbw", type=float, default=None, help="override the all-reduce busbw floor (GB/s)")


def default_timeout(args) -> float:
    rails = 8 if args.device != "cpu" else 0
    return (args.peer_timeout or 300) * 2 + rails * (args.rail_timeout or 120) + (300 if args.device != "cpu" else 60)


# --------------------------------------------------------------------------------------------------
# The rendezvous
# --------------------------------------------------------------------------------------------------
class PeerUnreachable(Exception):
    pass


def rendezvous(ctx: Context, role: str, address: str | None, port: int, timeout: float):
    """A torch TCPStore: the server hosts it on every interface, the client connects to the server."""
    from torch.distributed import TCPStore

    td = datetime.timedelta(seconds=timeout)
    where = f"0.0.0.0:{port}" if role == "server" else f"{address}:{port}"
    ctx.set_phase(f"rendezvous as {role} at {where} (waiting up to {fmt(timeout)} s for the peer)")
    try:
        if role == "server":
            return TCPStore("0.0.0.0", port, 2, True, timeout=td, wait_for_workers=True)
        return TCPStore(address, port, 2, False, timeout=td)
    except Exception as exc:  # noqa: BLE001 - torch raises DistStoreError / RuntimeError / TimeoutError
        raise PeerUnreachable(f"no peer at {where} within {fmt(timeout)} s ({one_line(exc, 160)})") from None


def exchange(store, role: str, mine: dict) -> dict:
    other = ROLES[1 - ROLES.index(role)]
    store.set(f"info/{role}", json.dumps(mine))
    try:
        return json.loads(store.get(f"info/{other}"))
    except Exception as exc:  # noqa: BLE001
        raise PeerUnreachable(f"the peer connected but never said who it is ({one_line(exc, 160)})") from None


def not_run(ctx: Context, checks, why: str, code: str) -> None:
    for name, device in checks:
        ctx.check(name, "skip", device=device, code=code, message=f"not run: {why}")


# --------------------------------------------------------------------------------------------------
# ib_write_bw per rail
# --------------------------------------------------------------------------------------------------
def ib_floor(baselines: Baselines, expect, port: ib_ports.IbPort | None) -> tuple[float | None, str]:
    """The rail's floor (Gb/s): by its port's link layer and NIC and the rate the node's HCAs should
    run, never the rate they run."""
    table = ib_write_bw.floors(baselines.section(SUITE).get("ib_write_bw_gbps"))
    if port is None:
        return None, "no port"
    return ib_write_bw.floor_for(table, port.link_layer, expect.get("ib_rate_gbps"),
                                 f"{port.device} {port.hca_type or ''}".strip())


def rail_plan(local: list[str], peer: list[str], expected: int | None) -> list[tuple[int, str | None, str | None]]:
    """(index, local HCA, peer HCA) for every rail the node should have (and any further one both
    have); without an expectation, this node's rails. Rail i is the i-th fabric HCA in name order."""
    n = max(expected, min(len(local), len(peer))) if expected else len(local)
    return [(i, local[i] if i < len(local) else None, peer[i] if i < len(peer) else None) for i in range(n)]


def _bw_argv(a, hca: str, port: int, tcp_port: int, server: str | None) -> list[str]:
    argv = [a.ib_write_bw, "-d", hca, "-i", str(port), "-p", str(tcp_port), "-s", str(a.message_bytes),
            "-n", str(a.ib_iters), "-F", "--report_gbits", *shlex.split(a.ib_write_bw_args or "")]
    return argv + ([server] if server else [])


def run_rails(ctx: Context, store, role: str, plan, local_ports: dict, peer_name: str) -> dict[int, tuple]:
    """{rail: (rc, text)} for the rails both nodes have; the server's processes run at once, the
    client drives them in order."""
    a = ctx.args
    both = [(i, h, p) for i, h, p in plan if h and p]
    if role == "server":
        procs = {}
        for i, hca, _ in both:
            argv = _bw_argv(a, hca, local_ports[hca], a.peer_port + 1 + i, None)
            ctx.log("$ " + " ".join(argv))
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", start_new_session=True)
            ctx.register_child(proc)
            procs[i] = proc
        store.set("ib/ready", json.dumps(sorted(procs)))
        try:
            store.get("ib/done")  # blocks until the client has driven every rail (or the store times out)
        except Exception as exc:  # noqa: BLE001
            ctx.warn(f"the client never finished the ib_write_bw rails: {one_line(exc, 160)}")
        out = {}
        for i, proc in procs.items():
            try:  # the client has driven every rail: a server still waiting was never connected to
                text, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                _terminate(proc, signal.SIGTERM)
                text, _ = proc.communicate()
                text += "\n(no client connected: stopped by fabric_peer)"
            ctx.unregister_child(proc)
            out[i] = (proc.returncode, text)
        return out
    started = set(json.loads(_get(store, "ib/ready", "the server never started its ib_write_bw rails")))
    out = {}
    for i, hca, _ in both:
        if i not in started:
            continue
        out[i] = _client_rail(ctx, _bw_argv(a, hca, local_ports[hca], a.peer_port + 1 + i, a.peer_address))
    store.set("ib/done", "1")
    return out


def _get(store, key: str, what: str) -> str:
    """A value the peer must publish; a peer gone silent leaves this node unjudged, not passed."""
    try:
        return store.get(key)
    except Exception as exc:  # noqa: BLE001 - the store timed out or the server went away
        raise SuiteError(f"{what}: {one_line(exc, 160)}", code="PEER_UNREACHABLE") from None


def _client_rail(ctx: Context, argv: list[str]) -> tuple[int | None, str]:
    """One rail from the client: retried briefly while the server's ib_write_bw is not listening yet."""
    for attempt in range(4):
        try:
            rc, out, err = ctx.run_tool(argv, timeout=ctx.args.rail_timeout)
        except SuiteError as exc:
            return None, exc.output + f"\n{exc}"
        text = out + err
        if rc == 0 or "Couldn't connect to" not in text or attempt == 3:
            return rc, text
        time.sleep(1.0)
    return None, ""


def ib_phase(ctx: Context, store, role: str, rails, peer_rails: list[str], expect, baselines, peer_name: str) -> None:
    """The expected HCAs, then one ib_write_bw check per expected rail. Both sides always go through
    run_rails (possibly with nothing to run), so neither waits for a step the other skipped."""
    selected, how, ports, exp = rails
    expected = expect.get("hcas")
    ctx.record(ib_hcas.judge(ports, selected, exp, how, ctx.cpu))
    if ctx.cpu:  # both sides are in CPU mode (a mixed pair is warned about): no rail phase at all
        ctx.check("ib_write_bw", "skip", code="IB_NOT_APPLICABLE",
                  message=f"CPU mode: no InfiniBand HCA; ib_write_bw not run ({len(selected)} port(s) present)")
        return
    plan = rail_plan([p.device for p in selected], peer_rails, expected)
    have_tool = shutil.which(ctx.args.ib_write_bw) is not None
    runnable = [(i, h if have_tool else None, p) for i, h, p in plan]
    ctx.set_phase(f"ib_write_bw over {sum(1 for _, h, p in runnable if h and p)} rail(s) with {peer_name}")
    results = run_rails(ctx, store, role, runnable, {p.device: p.port for p in selected}, peer_name)
    by_device = {p.device: p for p in selected}
    if not plan:
        ctx.check("ib_write_bw", "skip", code="EXPECTATION_MISSING",
                  message=f"no rail to test: no HCA port here ({how}) and no expected count (expect.hcas)")
    for i, hca, peer_hca in plan:
        floor, basis = ib_floor(baselines, expect, by_device.get(hca))
        ctx.record(_rail_check(ctx, i, hca, peer_hca, results, have_tool, floor, basis, peer_name, expect,
                               len(selected)))
    values = [c.value for c in ctx.checks if c.name == "ib_write_bw" and isinstance(c.value, float)]
    if values:
        ctx.metric("ib_write_bw_gbps_min", min(values), summary=True)


def _rail_check(ctx: Context, i: int, hca, peer_hca, results: dict, have_tool: bool, floor, basis: str,
                peer_name: str, expect, present: int) -> Check:
    if hca is None:
        return Check("ib_write_bw", "fail", device=f"rail{i}", threshold="present", code="IB_HCAS_NOT_PRESENT",
                     message=f"rail {i}: no HCA on this node for it ({present} of {expect.get('hcas')} expected; "
                     f"{expect.basis('hcas')})")
    if not have_tool:
        return Check("ib_write_bw", "error", device=hca, code="TOOL_MISSING",
                     message=f"{ctx.args.ib_write_bw!r} not found (perftest): rail {i} {hca} not measured")
    if peer_hca is None:
        return Check("ib_write_bw", "skip", device=hca, code="PEER_RAIL_MISSING",
                     message=f"rail {i} {hca}: {peer_name} has no HCA for it (its own result fails); not measured")
    if i not in results:
        return Check("ib_write_bw", "skip", device=hca, code="PEER_RAIL_MISSING",
                     message=f"rail {i} {hca}: {peer_name} did not run its side (its own result says why)")
    rc, text = results[i]
    for line in text.splitlines():
        ctx.log(f"| [rail{i} {hca}] {line}")
    c = ib_write_bw.judge(i, hca, f"{peer_name} {peer_hca}", rc, text, floor, basis)
    if c.status in ("pass", "fail") and isinstance(c.value, float):
        ctx.metric(f"ib_write_bw_gbps.{hca}", c.value)
    return c


# --------------------------------------------------------------------------------------------------
# The two-rank all-reduce
# --------------------------------------------------------------------------------------------------
def _sizes(ctx: Context) -> list[int]:
    from .nccl_loopback import _bytes

    text = ctx.args.allreduce_bytes or ("4K,64K,1M" if ctx.cpu else "1M,16M,256M")
    try:
        return sorted(_bytes(s) for s in text.split(",") if s.strip())
    except ValueError as exc:
        raise SuiteError(str(exc)) from None


def nccl_env(scratch: str, nccl_net: str) -> dict:
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
           "NCCL_DEBUG_FILE": os.path.join(scratch, "nccl.%h.%p.log")}
    if nccl_net:
        env["NCCL_NET"] = nccl_net  # forced: no fallback to sockets; NCCL fails instead
    return env


def allreduce(ctx: Context, store, rank: int, sizes: list[int], iters: int, scratch: str) -> tuple[list[dict], str]:
    """Rows of nccl_worker's per-size measurement (values checked bit for bit on this rank), and what
    NCCL printed."""
    import torch
    import torch.distributed as dist

    from . import nccl_worker

    backend = "gloo" if ctx.cpu else "nccl"
    if backend == "nccl":
        os.environ.update(nccl_env(scratch, ctx.args.nccl_net))
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cpu")
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, store=dist.PrefixStore("allreduce", store), rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=ctx.args.peer_timeout), **kwargs)
    try:
        hook = os.environ.get("CLUSTER_DOCTOR_CPU_FAULT_HOOK")
        if hook and backend == "gloo":  # CPU mode only: a test injects a fault as hardware would
            import importlib

            mod, _, fn = hook.partition(":")
            getattr(importlib.import_module(mod), fn or "install")(rank=rank, world=2)
        rows = [nccl_worker._one_size(torch, dist, s, rank, 2, device, backend, iters, 2 if ctx.cpu else 5)
                for s in sizes]
        dist.barrier()
    finally:
        dist.destroy_process_group()
    text = ""
    for path in sorted(os.listdir(scratch)):
        if path.startswith("nccl."):
            with open(os.path.join(scratch, path), errors="replace") as fh:
                text += fh.read()
    return rows, text


def judge_transport(ctx: Context, info: dict, expect_net: str) -> None:
    """Across two nodes every channel must be a network one matching --expect-net (NET/IB)."""
    import re

    fams = info["transport_families"]
    summary = ", ".join(f"{f} x{c}" for f, c in sorted(fams.items())) or "none"
    nets = [f for f in fams if f.startswith("NET/")]
    wanted = [f for f in nets if re.search(expect_net, f[4:])]
    if "NET/Socket" in fams or "Socket" in info["networks"]:
        ctx.check("allreduce_transport", "fail", value="NET/Socket", code="NCCL_SOCKET_FALLBACK",
                  message=f"NCCL used sockets between the nodes, not IB; channels: {summary}")
    elif info["ib_no_device"] and not wanted:
        ctx.check("allreduce_transport", "fail", value="no IB device", code="NCCL_IB_NO_DEVICE",
                  message=f"NCCL found no IB device (NET/IB : No device found); channels: {summary}")
    elif wanted and len(wanted) == len(fams):
        ctx.check("allreduce_transport", "pass", value=",".join(sorted(wanted)), threshold=f"NET /{expect_net}/",
                  message=f"{info['channel_count']} channel(s) via {', '.join(sorted(wanted))}; "
                  f"HCAs: {', '.join(sorted(info['ib_devices'])) or '?'}")
    elif fams:
        ctx.check("allreduce_transport", "fail", value=summary, threshold=f"NET /{expect_net}/ only",
                  code="PEER_NCCL_NOT_NETWORK",
                  message=f"the all-reduce between the two nodes did not go (only) over the network: {summary}")
    else:
        ctx.check("allreduce_transport", "error", code="NCCL_TRANSPORT_UNKNOWN",
                  message="NCCL printed no 'via NET/...' channel line (NCCL_DEBUG=INFO output missing)")


def busbw_floor(spec: dict | None, expected_hcas: int | None, gpus_per_node: int) -> Expectation | None:
    """The all-reduce floor: the per-rail figure times the rails the run can drive, from the node's
    EXPECTED HCA count (a node with HCAs missing does not lower its own bar); each GPU drives at most
    its own rail (PCIe Gen5 x16 carries about one NDR port)."""
    if not spec or not expected_hcas:
        return None
    rails = min(expected_hcas, max(1, gpus_per_node))
    return Expectation("allreduce_busbw_gbps", float(spec["value"]) * rails, float(spec["tolerance"]),
                       f"{spec['source']}; x{rails} rail(s): min(expected HCAs {expected_hcas}, "
                       f"GPUs per node in the run {gpus_per_node})")


def judge_allreduce(ctx: Context, rows: list[dict], peer_wrong: dict, peer_name: str, floor: Expectation | None,
                    basis: str) -> None:
    mine = {r["size"]: r for r in rows}
    bad = [(ctx.node, r) for r in rows if r["wrong"]] + [
        (peer_name, {"size": int(k), "wrong": v}) for k, v in peer_wrong.items() if v]
    if bad:
        who, r = bad[0]
        ctx.check("allreduce_values", "fail", value=sum(x["wrong"] for _, x in bad), unit="elements",
                  threshold="== 0", device=who, code="PEER_NCCL_WRONG_RESULT",
                  message=f"{r['wrong']} wrong element(s) at {r['size']} B seen on {who}"
                  + (f" (first at index {r['first_wrong_index']})" if r.get("first_wrong_index") is not None else "")
                  + f"; {len(bad)} size(s) affected across both nodes")
    else:
        ctx.check("allreduce_values", "pass", value=0, unit="elements", threshold="== 0",
                  message=f"{len(rows)} size(s) reduced bit-exactly on both nodes ({ctx.node}, {peer_name})")
    big = mine[max(mine)]
    ctx.metric("allreduce_busbw_gbps", big["busbw"], summary=True)
    value = ctx.args.min_busbw if ctx.args.min_busbw is not None else (floor.floor if floor else None)
    note = "--min-busbw" if ctx.args.min_busbw is not None else (floor.basis() if floor else basis)
    ctx.at_least("allreduce_busbw", big["busbw"], value, unit="GB/s", basis=f"{big['size']} B; {note}",
                 code="PEER_NCCL_BW_LOW")


def allreduce_phase(ctx: Context, store, rank: int, baselines, key, expect, peer_name: str) -> None:
    # Long: the plan, the run (a failure leaves the checks visibly not run), the exchange and the judging.
    sizes = _sizes(ctx)
    iters = ctx.args.iters or (5 if ctx.cpu else 20)
    ctx.set_phase(f"all-reduce with {peer_name}: {'gloo/TCP' if ctx.cpu else 'nccl/NET'}, 2 ranks, "
                  f"{', '.join(str(s) for s in sizes)} B, {iters} iters")
    scratch = tempfile.mkdtemp(prefix="cd-peer-")
    ctx.register_scratch(scratch)
    try:
        rows, text = allreduce(ctx, store, rank, sizes, iters, scratch)
    except Exception as exc:  # noqa: BLE001 - the peer died, the collective timed out, NCCL failed
        info = parsers.parse_nccl_log(_read_logs(scratch)) if not ctx.cpu else None
        if info and (info["transport_families"] or info["networks"] or info["ib_no_device"]):
            judge_transport(ctx, info, ctx.args.expect_net)
        why = one_line(f"the all-reduce did not complete: {type(exc).__name__}: {exc}", 300)
        not_run(ctx, [(n, None) for n in ALLREDUCE_CHECKS if not any(c.name == n for c in ctx.checks)], why,
                "PEER_NCCL_FAILED")
        raise SuiteError(why, code="PEER_NCCL_FAILED") from None
    finally:
        ctx.cleanup_scratch(scratch)
    for line in text.splitlines():
        ctx.log(f"| {line}")
    role = ROLES[rank]
    store.set(f"wrong/{role}", json.dumps({r["size"]: r["wrong"] for r in rows}))
    peer_wrong = json.loads(_get(store, f"wrong/{ROLES[1 - rank]}", "the peer never reported its all-reduce values"))
    if ctx.cpu:
        ctx.check("allreduce_transport", "skip", code="NCCL_TRANSPORT_NOT_APPLICABLE",
                  message="CPU mode: gloo over TCP has no NCCL transport to prove")
        spec = (baselines.model("cpu").get("metrics") or {}).get("peer_gloo_busbw_gbps")
        floor = Expectation("peer_gloo_busbw_gbps", float(spec["value"]), float(spec["tolerance"]),
                            str(spec["source"])) if spec else None
        basis = "no cpu floor"
    else:
        info = parsers.parse_nccl_log(text)
        if info.get("version"):
            ctx.environment["nccl"] = info["version"]
        judge_transport(ctx, info, ctx.args.expect_net)
        rate = expect.get("ib_rate_gbps")
        spec = (baselines.section(SUITE).get("nccl_busbw_per_rail_gbps") or {}).get(rate) if rate else None
        floor = busbw_floor(spec, expect.get("hcas"), 1)
        basis = "no per-rail floor for this rate / no expected HCA count (expect.hcas, expect.ib_rate_gbps)"
    judge_allreduce(ctx, rows, peer_wrong, peer_name, floor, basis)


def _read_logs(scratch: str) -> str:
    out = ""
    for name in sorted(os.listdir(scratch)) if os.path.isdir(scratch) else []:
        with open(os.path.join(scratch, name), errors="replace") as fh:
            out += fh.read()
    return out


# --------------------------------------------------------------------------------------------------
# the checks without which the suite proves nothing: one not judged for want of a floor (a rail type
# with no floor, e.g. a 200/400 GbE RoCE rail) is an error, never `pass (incomplete)`
KEY_CHECKS = ("ib_write_bw", "allreduce_busbw", "baseline")


def run(ctx: Context) -> None:
    ctx.key_checks = KEY_CHECKS
    # Long: arguments, the node's expectations and rails, the rendezvous (with its visible not-run), the phases.
    a = ctx.args
    if not a.role:
        raise SuiteError("no role: --role server|client or CLUSTER_DOCTOR_PEER_ROLE")
    if a.role == "client" and not a.peer_address:
        raise SuiteError("the client needs the server's address: --peer-address or CLUSTER_DOCTOR_PEER_ADDRESS")
    ctx.peer = a.peer_node
    rank = ROLES.index(a.role)
    baselines = Baselines.load(a.baselines)
    gpus = _gpu_count(ctx)
    if not ctx.check_gpu_count(len(gpus), source="CUDA" if not ctx.cpu else "CPU mode"):
        return
    key, model = model_for_node(ctx, baselines, gpus)
    expect = expectations(baselines, key if not ctx.cpu else None, a)
    ports = ib_ports.scan(a.sysfs_root)
    selected, how = ib_ports.select(ports, a.ib_hca)
    exp = ib_hcas.expected_set(a.ib_hca, baselines.model(key).get("expect", {}).get("hca_ports"), expect)
    ctx.environment.update(gpu_model=model, gpu_count=len(gpus), baseline=key, expectations=expect.as_environment(),
                           peer_role=a.role, peer_address=a.peer_address, peer_port=a.peer_port,
                           ib_rails=[p.name for p in selected], ib_selection=how)
    expected_rails = [("ib_write_bw", f"rail{i}") for i in range(expect.get("hcas") or len(selected) or 1)]
    try:
        store = rendezvous(ctx, a.role, a.peer_address, a.peer_port, a.peer_timeout)
        peer = exchange(store, a.role, {"node": a.node, "rails": [p.device for p in selected],
                                        "gpu_model": model, "device": a.device})
    except PeerUnreachable as exc:
        checks = [("ib_hca_count", None)] + ([] if ctx.cpu else expected_rails) + [(n, None) for n in ALLREDUCE_CHECKS]
        if ctx.cpu:
            checks.insert(1, ("ib_write_bw", None))
        not_run(ctx, checks, str(exc), "PEER_UNREACHABLE")
        raise SuiteError(str(exc), code="PEER_UNREACHABLE") from None
    peer_name = a.peer_node or peer.get("node") or "the peer"
    ctx.peer = peer_name
    if a.peer_node and peer.get("node") and peer["node"] != a.peer_node:
        ctx.warn(f"the peer says it is {peer['node']!r}, CLUSTER_DOCTOR_PEER_NODE says {a.peer_node!r}")
    if peer.get("device") != a.device:
        ctx.warn(f"the peer runs in {peer.get('device')} mode, this side in {a.device} mode")
    ctx.environment["peer_reported"] = {k: peer.get(k) for k in ("node", "rails", "gpu_model", "device")}
    try:
        ib_phase(ctx, store, a.role, (selected, how, ports, exp), list(peer.get("rails") or []), expect, baselines,
                 peer_name)
    except SuiteError as exc:  # the peer went silent during the rails: what was not judged stays visible
        rails = [(n, d) for n, d in [("ib_hca_count", None)] + expected_rails if not _recorded(ctx, n, d)]
        not_run(ctx, rails + [(n, None) for n in ALLREDUCE_CHECKS], str(exc), exc.code or "PEER_UNREACHABLE")
        raise
    allreduce_phase(ctx, store, rank, baselines, key, expect, peer_name)
    _goodbye(store, a.role)


def _recorded(ctx: Context, name: str, device: str | None) -> bool:  # noqa: ARG001 - a rail's HCA is not known here
    """A check of that name is already in (rails: any, they are recorded together after the runs)."""
    return any(c.name == name for c in ctx.checks)


def _gpu_count(ctx: Context) -> list[str]:
    """The GPU names this pod sees (CUDA); none in CPU mode unless GPUs are expected."""
    if ctx.cpu and not ctx.expected_gpus:
        return []
    try:
        import torch

        if torch.cuda.is_available():
            return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as exc:  # noqa: BLE001 - a broken CUDA shows up as no GPU
        ctx.log(f"torch/CUDA unavailable: {exc}")
    return []


def _goodbye(store, role: str) -> None:
    """The server hosts the store: it stays up until the client has read what it needs."""
    store.set(f"bye/{role}", "1")
    if role == "server":
        try:
            store.wait(["bye/client"], datetime.timedelta(seconds=30))
        except Exception:  # noqa: BLE001 - the client is gone: nothing left to serve
            pass


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
