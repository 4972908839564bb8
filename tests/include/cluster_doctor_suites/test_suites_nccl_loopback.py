"""nccl_loopback: a real gloo all-reduce in CPU mode; the GPU code path (nccl-tests) driven through a
fake all_reduce_perf that prints recorded NCCL output, with a faked 8x H100 node."""

from __future__ import annotations

import time

import pytest
from cluster_doctor_suites import nccl_loopback, nccl_worker, parsers
from cluster_doctor_suites.common import SuiteError

H100 = "NVIDIA H100 80GB HBM3"


def gpus(name: str = H100, n: int = 8):
    def visible(ctx):
        inv = [
            {"index": i, "name": name, "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0"}
            for i in range(n)
        ]
        return n, inv, "CUDA"

    return visible


@pytest.fixture
def arp(fake_tool, h, tmp_path):
    """Fake all_reduce_perf: records its argv and NCCL environment, prints a fixture."""

    def make(fixture: str, rc: int = 0):
        return fake_tool(
            "all_reduce_perf",
            f"""echo "$@" > "{tmp_path}/argv"
env | grep '^NCCL_' | sort > "{tmp_path}/nccl_env"
cat "{h.FIXTURES / "nccl" / fixture}"
exit {rc}""",
        )

    return make


def run_gpu(run_inproc, monkeypatch, binary, *args, name=H100, n=8):
    monkeypatch.setattr(nccl_loopback, "visible_gpus", gpus(name, n))
    return run_inproc(
        nccl_loopback,
        "--device",
        "cuda",
        "--expected-gpus",
        str(n),
        "--impl",
        "nccl-tests",
        "--all-reduce-perf",
        str(binary),
        *args,
    )


def test_cpu_mode_gloo_all_reduce_passes(run_cli, h):
    t0 = time.monotonic()
    ns = run_cli("nccl_loopback", "--device", "cpu", timeout=120)
    h.check_artifacts(ns, status="pass", suite="nccl_loopback")
    assert time.monotonic() - t0 < 30
    checks = {c["name"]: c for c in ns.result["checks"]}
    assert checks["allreduce_values"]["status"] == "pass" and checks["allreduce_values"]["value"] == 0
    assert checks["transport"]["status"] == "skip"
    assert checks["busbw"]["status"] == "pass" and ns.summary["metrics"]["nccl_busbw_gbps"] > 0
    assert ns.summary["metrics"]["nccl_ranks"] == 2
    assert "[rank1]" in ns.log, "the ranks' own output is part of the log"


def test_ib_loopback_passes_and_proves_the_transport(run_inproc, monkeypatch, arp, h, tmp_path):
    ns = run_gpu(
        run_inproc, monkeypatch, arp("all_reduce_perf_8xH100_ib_loopback.txt"), "--ib-hca", "=mlx5_0:1"
    )
    h.check_artifacts(ns, status="pass", suite="nccl_loopback")
    checks = {c["name"]: c for c in ns.result["checks"]}
    assert checks["transport"]["status"] == "pass" and "NET/IB" in checks["transport"]["message"]
    assert "32 with GPUDirect RDMA" in checks["transport"]["message"]
    assert checks["busbw"]["value"] == pytest.approx(46.1) and checks["busbw"]["threshold"] == ">= 40.05"
    assert ns.summary["metrics"]["nccl_busbw_gbps"] == pytest.approx(46.1)
    assert ns.result["metrics"]["nccl_busbw_gbps.1M"] == pytest.approx(8.51)
    env = ns.result["environment"]
    assert (
        env["nccl"] == "2.21.5+cuda12.4"
        and env["baseline"] == "h100-sxm"
        and len(env["nccl_ib_devices"]) == 8
    )
    argv = (tmp_path / "argv").read_text().split()
    assert argv[argv.index("-g") + 1] == "8" and argv[argv.index("-c") + 1] == "1"
    assert argv[argv.index("-b") + 1] == str(1 << 20) and argv[argv.index("-e") + 1] == str(4 << 30)
    nccl_env = (tmp_path / "nccl_env").read_text().split()
    assert {
        "NCCL_P2P_DISABLE=1",
        "NCCL_SHM_DISABLE=1",
        "NCCL_NVLS_ENABLE=0",
        "NCCL_DEBUG=INFO",
        "NCCL_IB_HCA==mlx5_0:1",
    } <= set(nccl_env)


def test_socket_fallback_fails_even_with_good_numbers(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_8xH100_socket_fallback.txt"))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    t = h.failing(ns, "transport")
    assert t and t[0]["value"] == "NET/Socket" and "fell back to socket transport" in t[0]["message"]
    assert "NET/IB: no device found" in t[0]["message"]
    assert {c["name"]: c["status"] for c in ns.result["checks"]}["busbw"] == "pass"
    assert ns.summary["reason"].startswith("transport: NCCL fell back to socket transport")


def test_wrong_reduced_values_fail_although_the_tool_exits_1(run_inproc, monkeypatch, arp, h):
    """all_reduce_perf exits 1 (EXIT_FAILURE) whenever it counted wrong values: a verdict, not a crash."""
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_wrong_values_derived.txt", rc=1))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    bad = h.failing(ns, "allreduce_values")
    assert bad and bad[0]["value"] == 4096 and "4096 wrong element(s) at 1GB" in bad[0]["message"]
    assert bad[0]["code"] == "NCCL_WRONG_VALUES" and ns.summary["code"] == "NCCL_WRONG_VALUES"
    oob = h.failing(ns, "nccl_tests_oob")
    assert oob and oob[0]["value"] == 4096 and "4096 FAILED" in oob[0]["message"]


def test_nonzero_exit_without_wrong_values_stays_an_error(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_ok_nccl-tests252.txt", rc=1))
    h.check_artifacts(ns, status="error", suite="nccl_loopback")
    assert "all_reduce_perf exited with code 1" in ns.summary["reason"]


def test_wrong_value_seen_only_by_rank_1_fails(run_inproc, monkeypatch, h, tmp_path):
    """CPU-mode fault hook: the collective hands rank 1 (only) one wrong element, as a flaky link or
    HCA would; rank 0's values are right, so judging rank 0 alone would pass."""
    (tmp_path / "cd_fault_rank1.py").write_text(
        "import torch.distributed as dist\n"
        "def install(rank, world):\n"
        "    if rank != 1:\n"
        "        return\n"
        "    orig = dist.all_reduce\n"
        "    def corrupt(t, *a, **kw):\n"
        "        out = orig(t, *a, **kw)\n"
        "        if t.numel() > 1000:\n"
        "            t.view(-1)[123] += 1.0\n"
        "        return out\n"
        "    dist.all_reduce = corrupt\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CLUSTER_DOCTOR_CPU_FAULT_HOOK", "cd_fault_rank1:install")
    ns = run_inproc(nccl_loopback, "--device", "cpu", "--cpu-ranks", "2")
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    bad = h.failing(ns, "allreduce_values")
    assert bad and bad[0]["device"] == "cpu-rank1" and bad[0]["code"] == "NCCL_WRONG_VALUES"
    assert "seen by cpu-rank1" in bad[0]["message"] and "first at index 123" in bad[0]["message"]


def test_busbw_floor_follows_the_hcas_nccl_used(run_inproc, monkeypatch, arp, h):
    """--ib-hca restricting NCCL to one HCA: 8 GPUs share it, the floor is 1/8 of the per-NIC one."""
    ns = run_gpu(
        run_inproc, monkeypatch, arp("all_reduce_perf_ok_nccl-tests252.txt"), "--ib-hca", "=mlx5_0:1"
    )
    busbw = {c["name"]: c for c in ns.result["checks"]}["busbw"]
    assert busbw["threshold"] == ">= 5.006" and "scaled x0.125 for 8 GPU(s)" in busbw["message"]
    assert ns.result["metrics"]["nccl_nics_used"] == 1
    assert nccl_loopback.nics_in_use(None, "^mlx5_0") is None
    assert nccl_loopback.nics_in_use({"ib_devices": {"mlx5_0:1": "IB", "mlx5_1:1": "IB"}}, None) == 2


def test_low_bus_bandwidth_fails_with_the_number(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_8xH100_ib_slow.txt"))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    bad = h.failing(ns, "busbw")
    assert bad and bad[0]["value"] == pytest.approx(25.36) and bad[0]["device"] == "4GB"
    assert "25.36 GB/s < 40.05 GB/s" in bad[0]["message"] and "8 ranks" in bad[0]["message"]


def test_ib_completion_error_is_a_node_failure(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_8xH100_ib_completion_error.txt", rc=3))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    bad = h.failing(ns, "ib_errors")
    assert bad and "status=12" in bad[0]["message"]


def test_tool_crash_without_results_is_an_error(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_missing_libnccl.txt", rc=127))
    h.check_artifacts(ns, status="error", suite="nccl_loopback")
    assert "all_reduce_perf exited 127 without usable results" in ns.summary["reason"]


def test_old_nccl_tests_format(run_inproc, monkeypatch, arp, h):
    h.check_artifacts(
        run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_old_format_8xH100.txt")),
        status="pass",
        suite="nccl_loopback",
    )


def test_unknown_model_warns_and_never_false_fails(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(
        run_inproc, monkeypatch, arp("all_reduce_perf_8xH100_ib_slow.txt"), name="NVIDIA Z900 Prototype"
    )
    h.check_artifacts(ns, status="pass", suite="nccl_loopback")
    assert {c["name"]: c["status"] for c in ns.result["checks"]}["busbw"] == "skip"
    assert any("unknown GPU model 'NVIDIA Z900 Prototype'" in w for w in ns.result["warnings"])


def test_overrides_min_busbw_and_expected_hcas(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(
        run_inproc,
        monkeypatch,
        arp("all_reduce_perf_8xH100_ib_loopback.txt"),
        "--min-busbw",
        "48",
        "--expected-hcas",
        "9",
    )
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    assert h.failing(ns, "busbw")[0]["threshold"] == ">= 48"
    assert h.failing(ns, "ib_hcas")[0]["value"] == 8


def test_no_gpu_visible_with_expected_8_fails(run_inproc, h):
    ns = run_inproc(nccl_loopback, "--device", "cuda", "--expected-gpus", "8")  # this machine has no GPU
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    assert "expected 8 GPUs, found 0" in ns.summary["reason"]


def _info(**families):
    return {
        "transport_families": families,
        "networks": {},
        "ib_devices": {},
        "gdr_channels": 0,
        "channel_count": sum(families.values()),
        "ib_no_device": False,
        "ib_errors": [],
        "warnings": [],
    }


@pytest.mark.parametrize(
    "mode, families, status",
    [
        ("nvlink", {"P2P": 16}, "pass"),
        ("nvlink", {"NVLS": 16, "P2P": 2}, "pass"),
        ("nvlink", {"NET/IB": 16}, "fail"),
        ("ib", {"P2P": 16}, "fail"),
        ("ib", {"SHM": 16}, "fail"),
        ("ib", {"NET/IBext_v8": 16}, "pass"),
        ("ib", {"NET/AWS Libfabric": 16}, "fail"),
        ("ib", {}, "error"),
    ],
)
def test_judge_transport(mode, families, status):
    class Ctx:
        checks = []
        environment = {}

        def check(self, name, st, **kw):
            self.checks.append((name, st))

        def metric(self, *a, **k):
            pass

    ctx = Ctx()
    nccl_loopback.judge_transport(ctx, _info(**families), mode, "^IB", 8, None)
    assert dict(ctx.checks)["transport"] == status


def test_nccl_env():
    env = nccl_loopback.nccl_env("ib", "mlx5_0,mlx5_3")
    assert env["NCCL_P2P_DISABLE"] == env["NCCL_SHM_DISABLE"] == "1" and env["NCCL_NVLS_ENABLE"] == "0"
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_3" and env["NCCL_DEBUG"] == "INFO"
    nv = nccl_loopback.nccl_env("nvlink", None)
    assert "NCCL_P2P_DISABLE" not in nv and "NCCL_SHM_DISABLE" not in nv


@pytest.mark.parametrize("world", [2, 3, 8])
def test_worker_pattern_sums_to_the_expected_values(world):
    import torch

    total = sum(nccl_worker._pattern(torch, 1000, r, "cpu") for r in range(world))
    assert torch.equal(total, nccl_worker._expected(torch, 1000, world, "cpu"))
    assert len(set(nccl_worker._pattern(torch, 251, 0, "cpu").tolist())) == 251, (
        "chunks must be distinguishable"
    )


def test_sweep_and_sizes():
    assert nccl_loopback.sweep(1 << 20, 4 << 20, 2) == [1 << 20, 2 << 20, 4 << 20]
    assert nccl_loopback._bytes("4G") == 4 << 30 and nccl_loopback._bytes("512K") == 512 << 10
    with pytest.raises(SuiteError, match="bad size sweep"):
        nccl_loopback.sweep(0, 10, 2)


def test_parsed_fixture_busbw_matches_the_formula(h):
    """busbw = algbw * 2(n-1)/n, as nccl-tests defines it."""
    d = parsers.parse_nccl_tests(h.fx("nccl", "all_reduce_perf_8xH100_ib_loopback.txt"))
    for r in d["rows"]:
        assert r["oop_busbw"] == pytest.approx(r["oop_algbw"] * 2 * 7 / 8, rel=0.01)
