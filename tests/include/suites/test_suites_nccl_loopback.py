"""nccl_loopback: a real gloo all-reduce in CPU mode; the GPU code path (nccl-tests) driven through a
fake all_reduce_perf that prints public all_reduce_perf / NCCL outputs (fixtures/SOURCES.md) with the
tool's exit codes, on a faked 8x H100 inventory."""

from __future__ import annotations

import pytest
from cluster_doctor_suites import nccl_loopback, nccl_worker, parsers
from cluster_doctor_suites.harness.checks import SuiteError

from tests.support.fault_hooks import rank1_wrong_value

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

    def make(fixture: str, rc: int = 0, hang: bool = False):
        return fake_tool(
            "all_reduce_perf",
            f"""echo "$@" > "{tmp_path}/argv"
env | grep '^NCCL_' | sort > "{tmp_path}/nccl_env"
cat "{h.FIXTURES / "nccl" / fixture}"
{"exec sleep 600" if hang else ""}
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
    ns = run_cli("nccl_loopback", "--device", "cpu", timeout=120)
    h.check_artifacts(ns, status="pass", suite="nccl_loopback")
    checks = {c["name"]: c for c in ns.result["checks"]}
    assert checks["allreduce_values"]["status"] == "pass" and checks["allreduce_values"]["value"] == 0
    assert checks["transport"]["status"] == "skip"
    assert checks["busbw"]["status"] == "pass" and ns.summary["metrics"]["nccl_busbw_gbps"] > 0
    assert ns.summary["metrics"]["nccl_ranks"] == 2
    assert "[rank1]" in ns.log, "the ranks' own output is part of the log"


def test_table_without_nccl_info_lines_cannot_prove_the_transport(run_inproc, monkeypatch, arp, h, tmp_path):
    """A3 Mega's complete 16 x H100 table, printed without NCCL_DEBUG=INFO: values and bandwidth are
    judged, but a run that does not say which transport it used is never a pass."""
    ns = run_gpu(
        run_inproc, monkeypatch, arp("all_reduce_perf_16xH100_2nodes_a3mega.txt"), "--ib-hca", "=mlx5_0:1"
    )
    h.check_artifacts(ns, status="error", suite="nccl_loopback")
    checks = {c["name"]: c for c in ns.result["checks"]}
    transport = checks["transport"]
    assert transport["status"] == "error" and "could not determine the transport" in transport["message"]
    assert transport["code"] == "NCCL_TRANSPORT_UNKNOWN"
    assert checks["allreduce_values"]["status"] == "pass" and "all 31 sizes" in checks["allreduce_values"]["message"]
    assert checks["busbw"]["status"] == "pass" and checks["busbw"]["value"] == pytest.approx(338.82)
    assert ns.result["metrics"]["nccl_busbw_gbps.1M"] == pytest.approx(9.68)
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


@pytest.mark.parametrize(
    "fixture, rc, hang, extra",
    [
        # NCCL 2.16.5 without libibverbs; the full run ended with wrong values (exit 1)
        ("all_reduce_perf_socket_p2p_disabled_nccl2.16.5_head.txt", 1, False, ""),
        # NCCL 2.21.5: `NET/IB : No device found.`, sockets, then the run hangs
        ("all_reduce_perf_ib_no_device_socket_nccl2.21.5.txt", 0, True, " (NET/IB: no device found)"),
    ],
)
def test_socket_fallback_fails_although_the_run_broke(
    run_inproc, monkeypatch, arp, h, fixture, rc, hang, extra
):
    args = ["--run-timeout", "2"] if hang else []
    ns = run_gpu(run_inproc, monkeypatch, arp(fixture, rc=rc, hang=hang), *args)
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    t = h.failing(ns, "transport")
    assert t and t[0]["value"] == "NET/Socket" and t[0]["code"] == "NCCL_SOCKET_FALLBACK"
    assert t[0]["message"].endswith("networks: Socket" + extra)
    assert ns.summary["reason"].startswith("transport: NCCL fell back to socket transport")
    assert any(w.startswith("run did not complete: all_reduce_perf") for w in ns.result["warnings"])
    if hang:
        assert "hung" in " ".join(ns.result["warnings"]) and "Using network Socket" in ns.log


@pytest.mark.parametrize(
    "fixture, ib_hca, status",
    [
        # one node, P2P/SHM disabled, NCCL chose IB over RoCE; the excerpt ends before the channel lines
        ("all_reduce_perf_2xA100_p2p_shm_disabled_roce_nccl2.7.8_head.txt", None, "warn"),
        ("nccl_channels_net_ib_gdrdma_nccl707.txt", None, "pass"),  # every channel via NET/IB/GDRDMA
        ("nccl_ibext_sharp_and_p2p_cumem_2x8xH100_nccl1357.txt", "IB", "fail"),  # P2P inside the node
        ("nccl_ring_lines_p2p_ipc_net_socket_nccl398.txt", None, "fail"),  # NCCL 2.4 over sockets
        ("all_reduce_perf_socket_p2p_disabled_nccl2.16.5_head.txt", None, "fail"),
    ],
)
def test_transport_judged_on_genuine_nccl_logs(h, fixture, ib_hca, status):
    class Ctx:
        checks = []
        environment = {}

        def check(self, name, st, **kw):
            self.checks.append((name, st, kw.get("message", "")))

        def metric(self, *a, **k):
            pass

    ctx = Ctx()
    ctx.checks = []
    info = parsers.parse_nccl_log(h.fx("nccl", fixture))
    nccl_loopback.judge_transport(ctx, info, "ib", "^IB", 8)
    got = {name: (st, msg) for name, st, msg in ctx.checks}
    assert status in {got[n][0] for n in got if n.startswith("transport")}, got
    if status == "pass":
        assert got["transport"][1].startswith("12 channel(s) via NET/IB (12 with GPUDirect RDMA)")


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
    """testInternalError (1) with a clean table: the tool failed, nothing proves the node either way."""
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_ok_nccl-tests252.txt", rc=1))
    h.check_artifacts(ns, status="error", suite="nccl_loopback")
    assert "all_reduce_perf exited 1 (testInternalError), results printed" in ns.summary["reason"]


@pytest.mark.parametrize("rc", [1, 7])
def test_wrong_values_fail_whatever_the_exit_code(run_inproc, monkeypatch, arp, h, rc):
    """nccl-tests before 2.17.3 exit(EXIT_FAILURE) = 1 on wrong values; since then main returns
    testNumResults = 7 (src/common.h testResult_t): the table decides, not the number."""
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_wrong_values_derived.txt", rc=rc))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    assert ns.summary["code"] == "NCCL_WRONG_VALUES" and ns.summary["action"] == "drain_and_service"


def test_exit_7_with_a_clean_table_is_a_failure_not_a_pass(run_inproc, monkeypatch, arp, h):
    """testNumResults without wrong values in the table (e.g. below NCCL_TESTS_MIN_BW): not a pass."""
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_ok_nccl-tests252.txt", rc=7))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    assert h.failing(ns, "nccl_tests_result")[0]["code"] == "NCCL_TESTS_FAILED"


def test_wrong_value_seen_only_by_rank_1_fails(run_inproc, monkeypatch, h, tmp_path):
    """CPU-mode fault hook: the collective hands rank 1 (only) one wrong element, as a flaky link or
    HCA would; rank 0's values are right, so judging rank 0 alone would pass."""
    hook = rank1_wrong_value(tmp_path, "cd_fault_rank1")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CLUSTER_DOCTOR_CPU_FAULT_HOOK", hook)
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
    assert ns.result["metrics"]["nccl_hcas_expected"] == 1


def test_a_prefix_selector_keeps_the_nodes_floor(run_inproc, monkeypatch, arp, h):
    """NCCL_IB_HCA=mlx5 takes every mlx5 HCA (NCCL's prefix): on an 8-HCA H100 node the floor stays
    the 8-NIC one, never one NIC shared by 8 GPUs (5.006 GB/s)."""
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_ok_nccl-tests252.txt"), "--ib-hca", "mlx5",
                 "--sysfs-root", str(h.FIXTURES / "missing-sysfs"))
    busbw = {c["name"]: c for c in ns.result["checks"]}["busbw"]
    assert busbw["threshold"] == ">= 40.05" and ns.result["metrics"]["nccl_hcas_expected"] == 8


def test_an_exclusion_or_prefix_selects_from_the_nodes_ports(tmp_path, h):
    """With sysfs (gpud's HGX H100: 8 compute HCAs and mlx5_bond_0), `^mlx5_bond` leaves NCCL the 8
    compute ports, by name; `mlx5` leaves every port in, so the bar is never below the node's 8."""
    from types import SimpleNamespace

    from cluster_doctor_suites.baselines import Expectations
    from cluster_doctor_suites.checkers import ib_ports

    ports = ib_ports.scan(str(h.h100_ib_tree(tmp_path)))
    sku = Expectations({"hcas": 8}, {"hcas": "HGX"})
    bar = nccl_loopback.expected_hcas(SimpleNamespace(expected_hcas=None, ib_hca="^mlx5_bond"), sku, ports)
    assert bar.count == 8 and bar.names == ("mlx5_0:1", "mlx5_1:1", "mlx5_4:1", "mlx5_5:1", "mlx5_6:1", "mlx5_7:1",
                                            "mlx5_8:1", "mlx5_9:1")
    every = nccl_loopback.expected_hcas(SimpleNamespace(expected_hcas=None, ib_hca="mlx5"), sku, ports)
    assert (every.count, every.layer) == (8, "IB")  # the RoCE bond it also takes is no rail
    info = parsers.parse_nccl_log("NCCL INFO NET/IB : Using " + " ".join(
        f"[{i}]{p.name}/{'IB' if p.link_layer == 'InfiniBand' else 'RoCE'}" for i, p in enumerate(ports)
        if p.device != "mlx5_6") + "; OOB eth0:10.0.0.1<0>\n")
    ctx = _Ctx()  # mlx5_6 gone: 7 InfiniBand rails and the bond are 8 ports, not 8 rails
    nccl_loopback.judge_hcas(ctx, info, every)
    assert (ctx.checks[0][1], ctx.checks[0][2]["value"]) == ("fail", 7)


class _Ctx:
    environment: dict = {}

    def __init__(self):
        self.checks = []

    def check(self, name, st, **kw):
        self.checks.append((name, st, kw))

    def metric(self, *a, **k):
        pass


def test_a_missing_rail_is_named_though_nccl_found_as_many(h):
    """nccl#1357's node: NCCL uses mlx5_0, mlx5_1, mlx5_4, mlx5_5. Told to use mlx5_3 in place of
    mlx5_4, four found is not four expected: mlx5_3 is named, never counted as `>= 4`."""
    info = parsers.parse_nccl_log(h.fx("nccl", "nccl_ibext_sharp_and_p2p_cumem_2x8xH100_nccl1357.txt"))
    ctx = _Ctx()
    names = ("mlx5_0:1", "mlx5_1:1", "mlx5_3:1", "mlx5_5:1")
    nccl_loopback.judge_hcas(ctx, info, nccl_loopback.HcaBar(4, "=mlx5_0:1,... names 4", names))
    (name, st, kw), = ctx.checks
    assert (st, kw["code"], kw["value"], kw["threshold"]) == ("fail", "IB_HCAS_MISSING", 3, "== 4 named")
    assert "missing: mlx5_3:1" in kw["message"]
    ok = _Ctx()
    nccl_loopback.judge_hcas(ok, info, nccl_loopback.HcaBar(4, "names 4", ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5")))
    assert ok.checks[0][1] == "pass"
    more = _Ctx()  # by count, NCCL taking more ports than the node's rails is not a pass
    nccl_loopback.judge_hcas(more, info, nccl_loopback.HcaBar(3, "expected 3"))
    assert (more.checks[0][1], more.checks[0][2]["code"]) == ("warn", "IB_HCAS_EXTRA")


def test_expected_hcas_come_from_the_node_never_from_what_nccl_found():
    from types import SimpleNamespace

    from cluster_doctor_suites.baselines import Expectations

    sku = Expectations({"hcas": 8}, {"hcas": "baselines.yaml h100-sxm: HGX"})
    args = SimpleNamespace(expected_hcas=None, ib_hca=None)
    assert nccl_loopback.expected_hcas(args, sku) == nccl_loopback.HcaBar(8, "expected 8: baselines.yaml h100-sxm: HGX")
    assert nccl_loopback.expected_hcas(SimpleNamespace(expected_hcas=None, ib_hca="^mlx5_0"), sku).count == 8
    exact = nccl_loopback.expected_hcas(SimpleNamespace(expected_hcas=None, ib_hca="=mlx5_0:1,mlx5_1:1"), sku)
    assert (exact.count, exact.names) == (2, ("mlx5_0:1", "mlx5_1:1"))
    assert nccl_loopback.expected_hcas(SimpleNamespace(expected_hcas=4, ib_hca=None), sku).count == 4
    # a prefix names no device: NCCL takes every HCA starting with it, so the node's 8 stay the bar
    assert nccl_loopback.expected_hcas(SimpleNamespace(expected_hcas=None, ib_hca="mlx5"), sku).count == 8


def test_fewer_hcas_than_the_node_has_fail_and_the_floor_stays_the_nodes(run_inproc, monkeypatch, arp, h):
    """NCCL sees one HCA (nccl-tests#128's line) on an 8-GPU H100 node that has eight: ib_hcas fails,
    and the bus-bandwidth floor is the 8-NIC one (40 GB/s), not one scaled down to the single HCA."""
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_one_hca_of_8_derived.txt"))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    hcas = h.failing(ns, "ib_hcas")[0]
    assert hcas["value"] == 1 and hcas["threshold"] == "== 8" and hcas["code"] == "IB_HCAS_MISSING"
    assert hcas["action"] == "check_fabric"
    busbw = {c["name"]: c for c in ns.result["checks"]}["busbw"]
    assert busbw["threshold"] == ">= 40.05"


def test_low_bus_bandwidth_fails_with_the_number(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_slow_8G_derived.txt"))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    bad = h.failing(ns, "busbw")
    assert bad and bad[0]["value"] == pytest.approx(25.36) and bad[0]["device"] == "8GB"
    assert "25.36 GB/s < 40.05 GB/s" in bad[0]["message"] and "8 ranks" in bad[0]["message"]
    assert bad[0]["code"] == "NCCL_BUSBW_LOW" and ns.summary["code"] == "NCCL_BUSBW_LOW"


@pytest.mark.parametrize(
    "fixture, text",
    [
        ("all_reduce_perf_ib_completion_status12_nccl1698.txt", "with status=12 opcode=129"),
        ("all_reduce_perf_ib_completion_error4_nccl-tests24.txt", "Got completion with error 4"),
    ],
)
def test_ib_completion_error_is_a_node_failure(run_inproc, monkeypatch, arp, h, fixture, text):
    """nccl-tests returns testNcclError (3) from main when NCCL fails."""
    ns = run_gpu(run_inproc, monkeypatch, arp(fixture, rc=3))
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    bad = h.failing(ns, "ib_errors")
    assert bad and text in bad[0]["message"] and bad[0]["code"] == "IB_COMPLETION_ERROR"


def test_tool_crash_without_results_is_an_error(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(run_inproc, monkeypatch, arp("all_reduce_perf_missing_libnccl_nccl-tests85.txt", rc=127))
    h.check_artifacts(ns, status="error", suite="nccl_loopback")
    assert "all_reduce_perf exited 127 (not a testResult_t (the loader?)), no usable results" in ns.summary["reason"]
    assert ns.summary["code"] == "TOOL_MISSING"
    assert "libnccl.so.2: cannot open shared object file" in ns.summary["reason"]


def test_old_nccl_tests_error_column_is_not_read_as_wrong_values(run_inproc, monkeypatch, arp, h):
    """nccl#1244: the older `error` column holds max errors like 4e-07, within the tool's tolerance for
    a float sum: the values pass (the table alone cannot prove the transport)."""
    # the excerpt stops at 512 B: a floor any size meets keeps the bandwidth out of this test
    fake = arp("all_reduce_perf_old_error_column_nccl1244.txt")
    ns = run_gpu(run_inproc, monkeypatch, fake, "--min-busbw", "0.01")
    h.check_artifacts(ns, status="error", suite="nccl_loopback")
    checks = {c["name"]: c for c in ns.result["checks"]}
    assert checks["allreduce_values"]["status"] == "pass" and checks["allreduce_values"]["value"] == 0
    assert checks["transport"]["status"] == "error" and not h.failing(ns)


def test_unknown_model_warns_and_never_false_fails(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(
        run_inproc, monkeypatch, arp("all_reduce_perf_slow_8G_derived.txt"), name="NVIDIA Z900 Prototype"
    )
    h.check_artifacts(ns, status="error", suite="nccl_loopback")  # the table does not name the transport
    assert not h.failing(ns)
    assert {c["name"]: c["status"] for c in ns.result["checks"]}["busbw"] == "skip"
    assert any("unknown GPU model 'NVIDIA Z900 Prototype'" in w for w in ns.result["warnings"])


def test_overrides_min_busbw_and_expected_hcas(run_inproc, monkeypatch, arp, h):
    ns = run_gpu(
        run_inproc,
        monkeypatch,
        arp("all_reduce_perf_ok_nccl-tests252.txt"),
        "--min-busbw",
        "100",
        "--expected-hcas",
        "8",
    )
    h.check_artifacts(ns, status="fail", suite="nccl_loopback")
    assert h.failing(ns, "busbw")[0]["threshold"] == ">= 100" and h.failing(ns, "busbw")[0]["value"] == 95.10
    # the table alone has no NCCL INFO lines: the HCAs cannot be counted, which is said, not passed
    hcas = {c["name"]: c for c in ns.result["checks"]}["ib_hcas"]
    assert hcas["status"] == "skip" and hcas["code"] == "NCCL_TRANSPORT_UNKNOWN"


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
    "mode, families, check, status, code",
    [
        ("nvlink", {"P2P": 16}, "transport", "pass", None),
        ("nvlink", {"NVLS": 16, "P2P": 2}, "transport", "pass", None),
        ("nvlink", {"NET/IB": 16}, "transport", "fail", "NCCL_NVLINK_UNAVAILABLE"),
        ("ib", {"P2P": 16}, "transport_isolation", "fail", "NCCL_P2P_SHM_USED"),
        ("ib", {"SHM": 16}, "transport_isolation", "fail", "NCCL_P2P_SHM_USED"),
        # P2P inside and sockets outside: each condition its own finding, the most specific code each
        ("ib", {"P2P": 8, "NET/Socket": 8}, "transport_isolation", "fail", "NCCL_P2P_SHM_USED"),
        ("ib", {"P2P": 8, "NET/Socket": 8}, "transport", "fail", "NCCL_SOCKET_FALLBACK"),
        ("ib", {"NET/IBext_v8": 16}, "transport", "pass", None),
        ("ib", {"NET/AWS Libfabric": 16}, "transport", "fail", "NCCL_NET_UNEXPECTED"),
        ("ib", {}, "transport", "error", "NCCL_TRANSPORT_UNKNOWN"),
    ],
)
def test_judge_transport(mode, families, check, status, code):
    class Ctx:
        checks = []
        environment = {}

        def check(self, name, st, **kw):
            self.checks.append((name, st, kw.get("code")))

        def metric(self, *a, **k):
            pass

    ctx = Ctx()
    ctx.checks = []
    nccl_loopback.judge_transport(ctx, _info(**families), mode, "^IB", 8)
    got = {name: (st, c) for name, st, c in ctx.checks}
    assert got[check] == (status, code)


def test_no_ib_device_at_all_is_a_failed_node():
    info = {**_info(), "ib_no_device": True}

    class Ctx:
        environment = {}

        def __init__(self):
            self.checks = []

        def check(self, name, st, **kw):
            self.checks.append((name, st, kw.get("code")))

        def metric(self, *a, **k):
            pass

    ctx = Ctx()
    nccl_loopback.judge_transport(ctx, info, "ib", "^IB", 8)
    nccl_loopback.judge_hcas(ctx, info, 8, "expected 8")
    assert ("transport", "fail", "NCCL_IB_NO_DEVICE") in ctx.checks and ("ib_hcas", "fail", "NCCL_IB_NO_DEVICE") in ctx.checks


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


@pytest.mark.parametrize(
    "fixture, n",
    [("all_reduce_perf_16xH100_2nodes_a3mega.txt", 16), ("all_reduce_perf_ok_nccl-tests252.txt", 8),
     ("all_reduce_perf_slow_8G_derived.txt", 8)],
)
def test_parsed_fixture_busbw_matches_the_formula(h, fixture, n):
    """busbw = algbw * 2(n-1)/n, as nccl-tests defines it (rows large enough for 2 decimals to hold)."""
    rows = [r for r in parsers.parse_nccl_tests(h.fx("nccl", fixture))["rows"] if r["oop_algbw"] >= 1]
    assert rows
    for r in rows:
        assert r["oop_busbw"] == pytest.approx(r["oop_algbw"] * 2 * (n - 1) / n, rel=0.01)
        assert r["size"] / r["oop_time_us"] / 1e3 == pytest.approx(r["oop_algbw"], rel=0.01)
