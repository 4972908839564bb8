"""ib_health against fake sysfs trees built from genuine values (fixtures/SOURCES.md): an HGX H100
node's /sys/class/infiniband as leptonai/gpud recorded it, and an H100 RoCE node's ibstat output
written as the files the kernel shows for it; counters judged across two runs, as in production."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

H100 = "NVIDIA-H100-80GB-HBM3"
IB_PORTS = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
ROCE_400G = "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"  # the 8 ConnectX-7 (MT4129)


@pytest.fixture
def boot(tmp_path):
    p = tmp_path / "boot_id"
    p.write_text("8a1f5a0e-2f1c-4c55-9a8e-0c1f7f4a2b11\n")
    return p


def ib(run_cli, root: Path, boot: Path, *args: str):
    return run_cli("ib_health", "--sysfs-root", str(root), "--boot-id-file", str(boot), "--gpu-model", H100, *args)


def by(ns, name: str) -> dict:
    return {c["device"]: c for c in ns.result["checks"] if c["name"] == name}


def test_h100_node_first_run_records_counters_and_says_growth_is_judged_next(run_cli, tmp_path, boot, h):
    ns = ib(run_cli, h.h100_ib_tree(tmp_path), boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    count = by(ns, "ib_hca_count")[None]
    assert count["status"] == "pass" and count["value"] == 8 and "mlx5_bond_0" not in count["message"]
    assert set(by(ns, "ib_port_state")) == {f"{d}:1" for d in IB_PORTS}
    assert {c["status"] for c in by(ns, "ib_port_rate").values()} == {"pass"}
    assert {c["value"] for c in by(ns, "ib_port_width").values()} == {4}
    assert {c["code"] for c in by(ns, "ib_counters").values()} == {"IB_COUNTERS_NO_BASELINE"}
    sample = ns.result["environment"]["ib_counters"]
    assert sample["boot_id"].startswith("8a1f5a0e") and sample["ports"]["mlx5_1:1"]["values"]["link_downed"] == 255
    judged = [p for p in ns.result["environment"]["ib_ports"] if p["judged"]]
    assert len(judged) == 8 and ns.summary["incomplete"] is True


def test_saturated_counters_cannot_show_growth_and_say_so(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path)
    ib(run_cli, root, boot)
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    counters = by(ns, "ib_counters")
    assert {c["code"] for c in counters.values()} == {"IB_COUNTER_SATURATED"}
    assert "link_downed=255" in counters["mlx5_1:1"]["message"]
    assert "excessive_buffer_overrun_errors=15" in counters["mlx5_0:1"]["message"]


def test_cleared_counters_that_did_not_grow_pass_complete(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    first = ib(run_cli, root, boot)
    h.ib_counter(root, "mlx5_0", "port_rcv_errors", 3)  # lower than before (14): cleared, a new baseline
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    assert ns.result["incomplete"] is False
    c = by(ns, "ib_counters")["mlx5_0:1"]
    assert c["status"] == "pass" and "reset since: port_rcv_errors" in c["message"]
    assert ns.result["environment"]["ib_counters_previous"] == first.summary["result_path"]


@pytest.mark.parametrize("name, value, code, status", [
    ("link_downed", 2, "IB_LINK_FLAPPED", "fail"),
    ("symbol_error", 40, "IB_LINK_ERRORS", "fail"),
    ("port_xmit_discards", 120, "IB_DISCARDS_GROWING", "warn"),
])
def test_a_counter_that_grew_since_the_previous_run_is_a_finding(run_cli, tmp_path, boot, h, name, value, code, status):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    ib(run_cli, root, boot)
    h.ib_counter(root, "mlx5_6", name, value)
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass" if status == "warn" else "fail", suite="ib_health")
    c = by(ns, "ib_counters")["mlx5_6:1"]
    assert (c["status"], c["code"]) == (status, code) and f"{name} +{value} (0 -> {value})" in c["message"]
    assert {d for d, x in by(ns, "ib_counters").items() if x["status"] != "pass"} == {"mlx5_6:1"}
    assert ns.result["metrics"]["ib_counter_growth"] == value


def test_a_reboot_is_a_new_baseline_not_a_finding(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    ib(run_cli, root, boot)
    h.ib_counter(root, "mlx5_6", "link_downed", 1)
    boot.write_text("0d1e2f3a-0000-4000-8000-000000000001\n")
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    assert {c["code"] for c in by(ns, "ib_counters").values()} == {"IB_COUNTERS_NO_BASELINE"}
    assert "rebooted" in by(ns, "ib_counters")["mlx5_6:1"]["message"]


def test_previous_given_explicitly(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    first = ib(run_cli, root, boot, "--node", "gpu-a")
    h.ib_counter(root, "mlx5_0", "link_error_recovery", 1)
    ns = run_cli("ib_health", "--sysfs-root", str(root), "--boot-id-file", str(boot), "--gpu-model", H100,
                 "--previous", first.summary["result_path"], node="gpu-a", output_dir=tmp_path / "elsewhere")
    h.check_artifacts(ns, status="fail", suite="ib_health")
    assert by(ns, "ib_counters")["mlx5_0:1"]["code"] == "IB_LINK_ERRORS"


def test_missing_hca_and_down_slow_and_narrow_ports(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    shutil.rmtree(root / "mlx5_9")
    (root / "mlx5_7" / "ports" / "1" / "state").write_text("1: DOWN\n")
    (root / "mlx5_7" / "ports" / "1" / "phys_state").write_text("3: Disabled\n")
    (root / "mlx5_5" / "ports" / "1" / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (root / "mlx5_4" / "ports" / "1" / "rate").write_text("200 Gb/sec (2X NDR)\n")
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="fail", suite="ib_health")
    fails = {(c["name"], c["device"]): c["code"] for c in h.failing(ns)}
    assert fails == {("ib_hca_count", None): "IB_HCAS_NOT_PRESENT", ("ib_port_state", "mlx5_7:1"): "IB_PORT_DOWN",
                     ("ib_port_rate", "mlx5_5:1"): "IB_PORT_RATE_LOW", ("ib_port_rate", "mlx5_4:1"): "IB_PORT_RATE_LOW",
                     ("ib_port_width", "mlx5_4:1"): "IB_PORT_WIDTH_DEGRADED"}
    assert "7 of 8 expected HCA port(s) present" in by(ns, "ib_hca_count")[None]["message"]
    assert "mlx5_7:1" not in by(ns, "ib_port_rate")  # a down port's rate is not judged


def test_a_node_pool_override_and_an_unknown_model(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    ns = run_cli("ib_health", "--sysfs-root", str(root), "--boot-id-file", str(boot), "--expect", "hcas=9")
    h.check_artifacts(ns, status="fail", suite="ib_health")
    assert by(ns, "ib_hca_count")[None]["code"] == "IB_HCAS_NOT_PRESENT"
    unknown = run_cli("ib_health", "--sysfs-root", str(root), "--boot-id-file", str(boot))
    h.check_artifacts(unknown, status="pass", suite="ib_health")
    assert by(unknown, "ib_hca_count")[None]["code"] == "EXPECTATION_MISSING"
    assert "the node's fastest port" in by(unknown, "ib_port_rate")["mlx5_0:1"]["message"]


def _ethtool(fake_tool, h, tmp_path, symbol_err: int = 0) -> str:
    stats = tmp_path / "ethtool.txt"
    stats.write_text(h.fx("ib", "ethtool-S_mlx5_connectx4_ethq8_excerpt.txt").replace(
        "symbol_err: 0", f"symbol_err: {symbol_err}"))
    return str(fake_tool("ethtool", f'[ "$1" = "-S" ] || exit 1\ncat "{stats}"'))


def test_roce_node_ports_down_and_ethtool_counters_across_runs(run_cli, fake_tool, tmp_path, boot, h):
    root = h.roce_ib_tree(tmp_path)
    ethtool = _ethtool(fake_tool, h, tmp_path)
    first = ib(run_cli, root, boot, "--ib-hca", ROCE_400G, "--ethtool", ethtool)
    h.check_artifacts(first, status="fail", suite="ib_health")
    assert {c["device"]: c["code"] for c in h.failing(first)} == {"mlx5_5:1": "IB_PORT_DOWN", "mlx5_11:1": "IB_PORT_DOWN"}
    assert by(first, "ib_hca_count")[None]["status"] == "pass"  # present, but down
    assert first.result["environment"]["ib_counters"]["ports"]["mlx5_0:1"]["source"] == "ethtool"
    _ethtool(fake_tool, h, tmp_path, symbol_err=3)
    ns = ib(run_cli, root, boot, "--ib-hca", ROCE_400G, "--ethtool", ethtool)
    c = by(ns, "ib_counters")["mlx5_3:1"]
    assert (c["status"], c["code"]) == ("fail", "IB_LINK_ERRORS") and "symbol_err +3 (0 -> 3)" in c["message"]


def test_roce_port_without_a_visible_netdev_is_a_visible_not_run(run_cli, tmp_path, boot, h):
    root = h.roce_ib_tree(tmp_path)
    shutil.rmtree(root / "mlx5_0" / "ports" / "1" / "gid_attrs")
    ns = ib(run_cli, root, boot, "--ib-hca", "=mlx5_0", "--expect", "hcas=1", "--ethtool", "ethtool-not-installed")
    h.check_artifacts(ns, status="pass", suite="ib_health")
    assert by(ns, "ib_counters")["mlx5_0:1"]["code"] == "IB_COUNTERS_UNAVAILABLE"


def test_nccl_ib_hca_selection_syntax(tmp_path, h):
    from cluster_doctor_suites.checkers import ib_ports

    ports = ib_ports.scan(str(h.roce_ib_tree(tmp_path)))
    assert len(ports) == 12
    pick = lambda spec: [p.name for p in ib_ports.select(ports, spec)[0]]  # noqa: E731
    assert pick("=mlx5_1") == ["mlx5_1:1"]
    assert pick("mlx5_1") == ["mlx5_1:1", "mlx5_10:1", "mlx5_11:1"]  # a prefix, as NCCL reads it
    assert len(pick("^=mlx5_1,mlx5_2")) == 10 and pick("=mlx5_0:2") == []
    assert ib_ports.select(ports, None)[0] == []  # no InfiniBand port: a RoCE fabric must be named


def test_cpu_mode_is_incomplete_never_failed(run_cli, tmp_path, boot, h):
    root = h.roce_ib_tree(tmp_path)  # two ports down: CPU mode does not judge them
    ns = run_cli("ib_health", "--device", "cpu", "--sysfs-root", str(root), "--ib-hca", ROCE_400G)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    assert ns.summary["incomplete"] is True and by(ns, "ib_ports")[None]["code"] == "IB_NOT_APPLICABLE"


def test_the_sample_is_kept_in_the_result_the_next_run_reads(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    ns = ib(run_cli, root, boot)
    stored = json.loads(Path(ns.summary["result_path"]).read_text())["environment"]["ib_counters"]
    assert set(stored["ports"]) == {f"{d}:1" for d in IB_PORTS}
    assert stored["ports"]["mlx5_0:1"]["values"]["symbol_error"] == 0 and stored["taken_at"].endswith("Z")


def test_a_roce_node_whose_fabric_nobody_named_is_not_judged_never_failed(run_cli, tmp_path, boot, h):
    ns = ib(run_cli, h.roce_ib_tree(tmp_path), boot)  # H100 expects 8 HCAs; all 12 RDMA ports are Ethernet
    h.check_artifacts(ns, status="error", suite="ib_health")
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["code"]) == ("skip", "IB_FABRIC_UNNAMED") and "NCCL_IB_HCA" in c["message"]
