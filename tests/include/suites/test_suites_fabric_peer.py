"""fabric_peer, the peer test between two nodes: a real two-process run (gloo over TCP on 127.0.0.1),
a peer that never comes, and the rail phase on GPU-mode nodes through a fake ib_write_bw that replays
genuine perftest outputs with perftest's exit codes (fixtures/perftest, SOURCES.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cluster_doctor_suites import fabric_peer, parsers
from cluster_doctor_suites.checkers import ib_write_bw
from cluster_doctor_suites.baselines import Baselines

from tests.support.fault_hooks import rank1_wrong_value

PERFTEST = Path(__file__).resolve().parent / "fixtures" / "perftest"
NCCL = Path(__file__).resolve().parent / "fixtures" / "nccl"
HEALTHY = "ib_write_bw_a_report_gbits_100g_roce_client_cloud-native-docs.txt"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load(out: Path, node: str) -> dict:
    (path,) = sorted((out / "fabric_peer" / node).glob("fabric_peer_*.json"))
    return json.loads(path.read_text())


def _by(result: dict, name: str) -> list[dict]:
    return [c for c in result["checks"] if c["name"] == name]


def _two_processes(tmp_path: Path, h, extra_env: dict | None = None) -> dict[str, tuple]:
    """The pod contract: the environment variables only, `python -m`, two processes on 127.0.0.1."""
    port = _port()
    procs = {}
    for role, node, peer in (("server", "node-a", "node-b"), ("client", "node-b", "node-a")):
        env = h.env({"CLUSTER_DOCTOR_PEER_ROLE": role, "CLUSTER_DOCTOR_PEER_NODE": peer,
                     "CLUSTER_DOCTOR_PEER_ADDRESS": "127.0.0.1", "CLUSTER_DOCTOR_PEER_PORT": str(port),
                     "CLUSTER_DOCTOR_PEER_TIMEOUT": "60", "NODE_NAME": node,
                     "CLUSTER_DOCTOR_OUTPUT_DIR": str(tmp_path / "out"),
                     "CLUSTER_DOCTOR_TERMINATION_LOG": str(tmp_path / f"term-{node}"), **(extra_env or {})})
        procs[node] = subprocess.Popen([sys.executable, "-m", "cluster_doctor_suites.fabric_peer", "--device", "cpu"],
                                       env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    for node, p in procs.items():
        stdout, stderr = p.communicate(timeout=90)
        summary = json.loads((tmp_path / f"term-{node}").read_text())
        h.summary_validator().validate(summary)
        result = _load(tmp_path / "out", node)
        h.result_validator().validate(result)
        out[node] = (p.returncode, summary, result, stdout[-2000:] + stderr[-2000:])
    return out


def test_two_processes_on_localhost_each_get_a_result_with_its_peer(tmp_path, h):
    for node, (rc, summary, result, tail) in _two_processes(tmp_path, h).items():
        peer = {"node-a": "node-b", "node-b": "node-a"}[node]
        assert rc == 0, tail
        assert result["peer"] == summary["peer"] == peer and result["node"] == node
        assert result["status"] == "pass" and result["incomplete"] is True  # CPU mode: never a clean pass
        ib = _by(result, "ib_write_bw")[0]
        assert ib["status"] == "skip" and "no InfiniBand HCA" in ib["message"]
        values = _by(result, "allreduce_values")[0]
        assert values["status"] == "pass" and "bit-exactly on both nodes" in values["message"]
        assert _by(result, "allreduce_busbw")[0]["status"] == "pass"


def test_a_peer_that_never_comes_is_an_error_with_every_check_not_run(run_inproc, h):
    ns = run_inproc(fabric_peer, "--device", "cpu", "--role", "client", "--peer-address", "127.0.0.1",
                    "--peer-port", str(_port()), "--peer-timeout", "1", "--peer-node", "node-b")
    h.check_artifacts(ns, status="error", suite="fabric_peer")
    assert ns.summary["code"] == "PEER_UNREACHABLE" and ns.summary["action"] == "retest"
    assert ns.result["peer"] == "node-b" and "no peer at 127.0.0.1:" in ns.summary["reason"]
    names = {c["name"] for c in ns.result["checks"] if c["status"] == "skip" and c["code"] == "PEER_UNREACHABLE"}
    assert names == {"ib_hca_count", "ib_write_bw", "allreduce_transport", "allreduce_values", "allreduce_busbw"}
    assert not [c for c in ns.result["checks"] if c["status"] == "pass" and c["name"] != "gpu_count"]


def test_wrong_values_on_one_node_fail_both(tmp_path, h):
    """CPU-mode fault hook: the collective hands the client (rank 1) one wrong element; the server's
    own values are right, and it fails too, naming the node that saw it."""
    hook = rank1_wrong_value(tmp_path, "cd_peer_fault", index=77)
    runs = _two_processes(tmp_path, h, {"CLUSTER_DOCTOR_CPU_FAULT_HOOK": hook,
                                        "PYTHONPATH": str(tmp_path)})
    for node, (rc, summary, result, tail) in runs.items():
        bad = [c for c in _by(result, "allreduce_values") if c["status"] == "fail"]
        assert rc == 1 and bad, (node, tail)
        assert bad[0]["code"] == "PEER_NCCL_WRONG_RESULT" and bad[0]["device"] == "node-b", node
        assert "first at index 77" in bad[0]["message"] or node == "node-a"
        assert summary["code"] == "PEER_NCCL_WRONG_RESULT" and summary["action"] == "drain_and_service"


# ------------------------------------------------------------------------------------ GPU-mode rails
def _pair(tmp_path: Path, server_args: list[str], client_args: list[str]) -> dict[str, dict]:
    """Both sides in this process (threads), so monkeypatched fakes apply to both."""
    port, out = _port(), tmp_path / "out"
    rcs = {}

    def side(role, node, peer, extra):
        rcs[node] = fabric_peer.main(["--node", node, "--output-dir", str(out), "--termination-log", "",
                                      "--role", role, "--peer-node", peer, "--peer-address", "127.0.0.1",
                                      "--peer-port", str(port), "--peer-timeout", "30", *extra])

    threads = [threading.Thread(target=side, args=("server", "node-a", "node-b", server_args)),
               threading.Thread(target=side, args=("client", "node-b", "node-a", client_args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return {node: _load(out, node) for node in ("node-a", "node-b")}


@pytest.fixture
def gpu_nodes(monkeypatch, tmp_path, fake_tool, h):
    """Two 'H100' nodes with gpud's HGX H100 sysfs tree (8 NDR ports), a fake ib_write_bw and an
    all-reduce that returns NCCL's genuine NET/IB channel lines (NVIDIA/nccl#707)."""
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    tool = fake_tool("ib_write_bw", (
        'dev=""; prev=""; last=""\n'
        'for a in "$@"; do [ "$prev" = "-d" ] && dev="$a"; prev="$a"; last="$a"; done\n'
        'role=server; case "$last" in 127.0.0.1) role=client;; esac\n'
        f'f="{fakes}/$role.$dev"; [ -f "$f.txt" ] || f="{fakes}/default"\n'
        'cat "$f.txt"; exit "$(cat "$f.rc")"'))
    (fakes / "default.txt").write_text((PERFTEST / HEALTHY).read_text())
    (fakes / "default.rc").write_text("0")
    monkeypatch.setattr(fabric_peer, "_gpu_count", lambda ctx: ["NVIDIA H100 80GB HBM3"])
    nccl = (NCCL / "nccl_channels_net_ib_gdrdma_nccl707.txt").read_text()
    rows = [{"size": 268435456, "time_us": 5600.0, "algbw": 47.9, "busbw": 47.9, "wrong": 0}]
    monkeypatch.setattr(fabric_peer, "allreduce", lambda ctx, store, rank, sizes, iters, scratch: (rows, nccl))

    def args(tree, *extra):
        # one H100 of the SKU's 8: this rig's node pool says it has one (--expect gpus=1), merged with
        # a test's own --expect (a second --expect would replace the first)
        extra, pool = list(extra), ["gpus=1"]
        while "--expect" in extra:
            i = extra.index("--expect")
            pool.append(extra[i + 1])
            del extra[i:i + 2]
        return ["--device", "cuda", "--expected-gpus", "1", "--expect", ",".join(pool),
                "--gpu-model", "NVIDIA-H100-80GB-HBM3", "--sysfs-root", str(tree), "--ib-write-bw", str(tool), *extra]

    def replay(role: str, dev: str, fixture: str, rc: int, text: str | None = None):
        (fakes / f"{role}.{dev}.txt").write_text(text if text is not None else (PERFTEST / fixture).read_text())
        (fakes / f"{role}.{dev}.rc").write_text(str(rc))

    a, b = h.h100_ib_tree(tmp_path / "a"), h.h100_ib_tree(tmp_path / "b")
    return type("G", (), {"args": staticmethod(args), "replay": staticmethod(replay), "a": a, "b": b, "rows": rows})


def test_every_rail_measured_and_a_slow_one_named_by_its_hca(tmp_path, gpu_nodes, h):
    """100 Gb/s expectation (the fixture is a genuine 100 GbE run): seven rails at 92.39 Gb/s pass,
    mlx5_6 replays the same run with its 8 MiB row halved (derived, SOURCES.md) and fails on both
    sides; the NCCL lines prove NET/IB."""
    slow = (PERFTEST / HEALTHY).read_text().replace(
        "8388608    5000             92.39              92.39", "8388608    5000             46.20              46.19")
    for role in ("server", "client"):
        gpu_nodes.replay(role, "mlx5_6", HEALTHY, 0, slow)
    exp = ["--expect", "ib_rate_gbps=100"]
    results = _pair(tmp_path, gpu_nodes.args(gpu_nodes.a, *exp), gpu_nodes.args(gpu_nodes.b, *exp))
    for node, peer in (("node-a", "node-b"), ("node-b", "node-a")):
        r = results[node]
        h.result_validator().validate(r)
        rails = _by(r, "ib_write_bw")
        assert len(rails) == 8 and r["peer"] == peer
        bad = [c for c in rails if c["status"] != "pass"]
        assert [(c["device"], c["status"], c["code"], c["value"]) for c in bad] == [
            ("mlx5_6", "fail", "PEER_IB_BW_LOW", 46.19)]
        assert f"rail 4 mlx5_6 <-> {peer} mlx5_6" in bad[0]["message"] and "< 90 Gb/s" in bad[0]["message"]
        assert _by(r, "allreduce_transport")[0]["status"] == "pass"
        assert r["status"] == "fail" and r["code"] == "PEER_IB_BW_LOW" and r["action"] == "check_fabric"


def test_a_node_with_fewer_hcas_than_expected_fails_and_its_peer_says_why_not_run(tmp_path, gpu_nodes, h):
    shutil.rmtree(gpu_nodes.a / "mlx5_9")  # the server has 7 of the 8 HCAs an HGX H100 has
    gpu_nodes.replay("client", "mlx5_1", "ib_write_bw_client_modify_qp_rts_failed_perftest132.txt", 1)
    gpu_nodes.replay("server", "mlx5_1", "ib_write_bw_server_read_keys_failed_perftest132.txt", 1)
    exp = ["--expect", "ib_rate_gbps=100"]
    results = _pair(tmp_path, gpu_nodes.args(gpu_nodes.a, *exp), gpu_nodes.args(gpu_nodes.b, *exp))
    a, b = results["node-a"], results["node-b"]
    assert _by(a, "ib_hca_count")[0]["code"] == "IB_HCAS_NOT_PRESENT" and a["status"] == "fail"
    missing = [c for c in _by(a, "ib_write_bw") if c["device"] == "rail7"]
    assert missing and missing[0]["status"] == "fail" and missing[0]["code"] == "IB_HCAS_NOT_PRESENT"
    peer_side = [c for c in _by(b, "ib_write_bw") if c["device"] == "mlx5_9"]
    assert peer_side[0]["status"] == "skip" and peer_side[0]["code"] == "PEER_RAIL_MISSING"
    for r in (a, b):  # perftest exit 1 on rail 1, both sides, with its own words
        qp = [c for c in _by(r, "ib_write_bw") if c["device"] == "mlx5_1"][0]
        assert (qp["status"], qp["code"]) == ("fail", "IB_WRITE_BW_FAILED") and "exited 1 (FAILURE)" in qp["message"]
        assert len(_by(r, "ib_write_bw")) == 8


def test_allreduce_below_the_per_rail_floor_fails_on_the_expected_rate(tmp_path, gpu_nodes, h):
    """NDR 400 expected (the model's): 46 GB/s per rail -10 % = 41.4 GB/s for the one rail a
    one-GPU rank drives; 20 GB/s fails on both nodes. The genuine 92 Gb/s rails fail as well there."""
    gpu_nodes.rows[0]["busbw"] = 20.0
    results = _pair(tmp_path, gpu_nodes.args(gpu_nodes.a), gpu_nodes.args(gpu_nodes.b))
    for r in results.values():
        (bw,) = _by(r, "allreduce_busbw")
        assert (bw["status"], bw["code"], bw["threshold"]) == ("fail", "PEER_NCCL_BW_LOW", ">= 41.4")
        assert "nccl-tests#290" in bw["message"] and "expected HCAs 8" in bw["message"]
        assert {c["code"] for c in _by(r, "ib_write_bw")} == {"PEER_IB_BW_LOW"}  # 92 Gb/s < 380 on NDR


BROADCOM = "ib_write_bw_D10_q3_report_gbits_400g_roce_bnxt_re0_scc24.txt"


def _broadcom_roce_tree(root: Path) -> Path:
    """One Broadcom 400 Gb/s RoCE rail as the kernel shows it (the SCC24 nodes' `bnxt_re0`, `Link
    type : Ethernet`; drivers/infiniband/core/sysfs.c formats)."""
    port = root / "bnxt_re0" / "ports" / "1"
    port.mkdir(parents=True)
    for name, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "400 Gb/sec (4X NDR)"),
                        ("link_layer", "Ethernet")):
        (port / name).write_text(value + "\n")
    return root


def test_a_400g_roce_rail_is_judged_by_roce_floor_never_infiniband_ndr(tmp_path, gpu_nodes, h):
    """SCC24's Broadcom 400 Gb/s RoCE rail at 363.47 Gb/s (91 % of line rate, healthy per its
    source) failed InfiniBand NDR's GPUDirect floor (380); its own link type's floor passes it."""
    for role in ("server", "client"):
        gpu_nodes.replay(role, "bnxt_re0", BROADCOM, 0)
    exp = ["--ib-hca", "=bnxt_re0", "--expect", "hcas=1,ib_rate_gbps=400"]
    a, b = _broadcom_roce_tree(tmp_path / "ra"), _broadcom_roce_tree(tmp_path / "rb")
    results = _pair(tmp_path, gpu_nodes.args(a, *exp), gpu_nodes.args(b, *exp))
    for r in results.values():
        (rail,) = _by(r, "ib_write_bw")
        assert (rail["status"], rail["value"], rail["threshold"]) == ("pass", 363.47, ">= 340"), rail
        assert "Ethernet 400 Gb/s, NIC /^bnxt_re/" in rail["message"] and "SuperCompUCSD" in rail["message"]
    nic = ib_write_bw.floor_for(ib_write_bw.floors(_floors()), "InfiniBand", 400, "mlx5_0 MT4129")
    assert nic[0] == pytest.approx(380)  # InfiniBand NDR keeps NHC's GPUDirect floor


def test_a_peer_gone_silent_during_the_rails_leaves_every_later_check_visibly_not_run(tmp_path, gpu_nodes, h,
                                                                                    monkeypatch):
    def silent(*args, **kwargs):
        raise fabric_peer.SuiteError("the server never started its ib_write_bw rails: timeout", code="PEER_UNREACHABLE")

    monkeypatch.setattr(fabric_peer, "run_rails", silent)
    results = _pair(tmp_path, gpu_nodes.args(gpu_nodes.a), gpu_nodes.args(gpu_nodes.b))
    for r in results.values():
        h.result_validator().validate(r)
        assert r["status"] == "error" and r["code"] == "PEER_UNREACHABLE"
        rails = _by(r, "ib_write_bw")
        assert len(rails) == 8 and {(c["status"], c["code"]) for c in rails} == {("skip", "PEER_UNREACHABLE")}
        for name in fabric_peer.ALLREDUCE_CHECKS:
            assert [c["status"] for c in _by(r, name)] == ["skip"], name


def _floors():
    return Baselines.load(str(Path(fabric_peer.__file__).with_name("baselines.yaml"))).section(
        "fabric_peer")["ib_write_bw_gbps"]


def test_every_floor_has_a_source_and_a_link_without_one_is_not_run():
    table = ib_write_bw.floors(_floors())
    assert table and all(f.source for f in table)
    assert {(f.link_layer, f.rate_gbps) for f in table} >= {("InfiniBand", 400), ("Ethernet", 400), ("Ethernet", 100)}
    assert ib_write_bw.floor_for(table, "Ethernet", 800, "bnxt_re0")[0] is None  # no floor: BASELINE_MISSING
    assert ib_write_bw.floor_for(table, "Ethernet", 400, "mlx5_3 MT4129")[1].startswith("Ethernet 400 Gb/s: ")
    with pytest.raises(ValueError):
        ib_write_bw.floors([{"link_layer": "Ethernet", "rate_gbps": 400}])


# ------------------------------------------------------------------------- pure judging, no network
def test_busbw_floor_comes_from_the_expected_hca_count_never_the_found_one():
    spec = Baselines.load(str(Path(fabric_peer.__file__).with_name("baselines.yaml"))).section(
        "fabric_peer")["nccl_busbw_per_rail_gbps"][400]
    full = fabric_peer.busbw_floor(spec, expected_hcas=8, gpus_per_node=8)
    assert full.floor == pytest.approx(46 * 8 * 0.9) and "expected HCAs 8" in full.source
    assert fabric_peer.busbw_floor(spec, expected_hcas=8, gpus_per_node=1).floor == pytest.approx(41.4)
    assert fabric_peer.busbw_floor(spec, expected_hcas=None, gpus_per_node=8) is None  # never a guess
    # a node whose NCCL found one HCA keeps the bar of its eight
    assert fabric_peer.busbw_floor(spec, 8, 8).floor > fabric_peer.busbw_floor(spec, 1, 8).floor


@pytest.mark.parametrize("fixture,status,code", [
    ("nccl_channels_net_ib_gdrdma_nccl707.txt", "pass", None),
    ("nccl_ibext_sharp_and_p2p_cumem_2x8xH100_nccl1357.txt", "fail", "PEER_NCCL_NOT_NETWORK"),
    ("all_reduce_perf_ib_no_device_socket_nccl2.21.5.txt", "fail", "NCCL_SOCKET_FALLBACK"),
])
def test_the_transport_is_proven_from_nccl_own_lines(fixture, status, code):
    from types import SimpleNamespace

    from cluster_doctor_suites.harness.context import Context

    ctx = Context("fabric_peer", SimpleNamespace(node="n", device="cuda"))
    fabric_peer.judge_transport(ctx, parsers.parse_nccl_log((NCCL / fixture).read_text()), "^IB")
    (c,) = ctx.checks
    assert (c.name, c.status, c.code) == ("allreduce_transport", status, code)


def test_the_rendezvous_contract_is_read_from_the_environment(monkeypatch):
    for k, v in {"CLUSTER_DOCTOR_PEER_ROLE": "client", "CLUSTER_DOCTOR_PEER_NODE": "gpu-17",
                 "CLUSTER_DOCTOR_PEER_ADDRESS": "10.0.0.5", "CLUSTER_DOCTOR_PEER_PORT": "31000",
                 "CLUSTER_DOCTOR_PEER_TIMEOUT": "42"}.items():
        monkeypatch.setenv(k, v)
    from cluster_doctor_suites.harness.cli import make_parser

    p = make_parser("fabric_peer", "")
    fabric_peer.add_arguments(p)
    a = p.parse_args([])
    assert (a.role, a.peer_node, a.peer_address, a.peer_port, a.peer_timeout) == ("client", "gpu-17", "10.0.0.5",
                                                                                  31000, 42.0)
    monkeypatch.delenv("CLUSTER_DOCTOR_PEER_PORT")
    monkeypatch.delenv("CLUSTER_DOCTOR_PEER_TIMEOUT")
    p = make_parser("fabric_peer", "")
    fabric_peer.add_arguments(p)
    a = p.parse_args([])
    assert (a.peer_port, a.peer_timeout) == (29500, 300.0)
    assert os.environ["CLUSTER_DOCTOR_PEER_ROLE"] == "client"


def test_a_rail_type_without_a_floor_is_an_error_never_a_pass(tmp_path, gpu_nodes, h):
    """The same healthy Broadcom RoCE pair (SCC24) on a node pool that runs it at 200 Gb/s: baselines.yaml
    has no floor for a 200 GbE RoCE rail, so the suite's key measurement is not judged: an error with
    the no-baseline code (a configuration finding), never `pass (incomplete)` for a link at any rate."""
    for role in ("server", "client"):
        gpu_nodes.replay(role, "bnxt_re0", BROADCOM, 0)
    exp = ["--ib-hca", "=bnxt_re0", "--expect", "hcas=1,ib_rate_gbps=200"]
    a, b = _broadcom_roce_tree(tmp_path / "ra"), _broadcom_roce_tree(tmp_path / "rb")
    results = _pair(tmp_path, gpu_nodes.args(a, *exp), gpu_nodes.args(b, *exp))
    for r in results.values():
        h.result_validator().validate(r)
        (rail,) = _by(r, "ib_write_bw")
        assert (rail["status"], rail["code"]) == ("skip", "BASELINE_MISSING"), rail
        assert r["status"] == "error" and r["code"] == "BASELINE_MISSING", (r["status"], r["code"], r["reason"])
