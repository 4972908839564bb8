"""ib_health against fake sysfs trees built from genuine values (fixtures/SOURCES.md): an HGX H100
node's /sys/class/infiniband as leptonai/gpud recorded it, and an H100 RoCE node's ibstat output
written as the files the kernel shows for it; counters judged across two runs, as in production."""

from __future__ import annotations

import datetime as dt
import json
import os
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


def test_h100_node_first_run_judges_the_counters_against_the_thresholds(run_cli, tmp_path, boot, h):
    """gpud's tree as published: every port's port_rcv_errors 14 and excessive_buffer_overrun_errors 15
    (>= infiniband-diags' 10), mlx5_1's link_downed 255 (>= 10): a first sample is judged, never waved
    through to the next run."""
    ns = ib(run_cli, h.h100_ib_tree(tmp_path), boot)
    h.check_artifacts(ns, status="fail", suite="ib_health")
    count = by(ns, "ib_hca_count")[None]
    assert count["status"] == "pass" and count["value"] == 8 and "mlx5_bond_0" not in count["message"]
    assert set(by(ns, "ib_port_state")) == {f"{d}:1" for d in IB_PORTS}
    assert {c["status"] for c in by(ns, "ib_port_rate").values()} == {"pass"}
    assert {c["value"] for c in by(ns, "ib_port_width").values()} == {4}
    counters = by(ns, "ib_counters")
    assert counters["mlx5_1:1"]["code"] == "IB_LINK_FLAPPED" and "link_downed=255 (threshold 10" in counters["mlx5_1:1"]["message"]
    assert {c["code"] for d, c in counters.items() if d != "mlx5_1:1"} == {"IB_LINK_ERRORS"}
    assert "port_rcv_errors=14 (threshold 10)" in counters["mlx5_0:1"]["message"]
    assert "excessive_buffer_overrun_errors=15 (threshold 10; the counter's maximum" in counters["mlx5_0:1"]["message"]
    sample = ns.result["environment"]["ib_counters"]
    assert sample["boot_id"].startswith("8a1f5a0e") and sample["ports"]["mlx5_1:1"]["values"]["link_downed"] == 255
    assert set(sample["flaps"]) == {"mlx5_1:1"} and sample["flap_window_hours"] == 6
    judged = [p for p in ns.result["environment"]["ib_ports"] if p["judged"]]
    assert len(judged) == 8


def test_a_clean_first_sample_passes_complete_and_says_growth_is_judged_next(run_cli, tmp_path, boot, h):
    ns = ib(run_cli, h.h100_ib_tree(tmp_path, cleared=True), boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    assert ns.result["incomplete"] is False
    c = by(ns, "ib_counters")["mlx5_0:1"]
    assert c["status"] == "pass" and "since the counters were last cleared" in c["message"]
    assert "growth is judged from the next run" in c["message"]


def test_saturated_counters_cannot_show_growth_and_say_so(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path)
    ib(run_cli, root, boot)
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="fail", suite="ib_health")
    counters = by(ns, "ib_counters")
    # the first sample's port_rcv_errors 14 failed every port: carried for the link-error window, the
    # saturated counters said beside it
    assert {c["code"] for d, c in counters.items() if d != "mlx5_1:1"} == {"IB_LINK_ERRORS"}
    c = counters["mlx5_0:1"]
    assert "excessive_buffer_overrun_errors=15" in c["message"] and "inside the 24 h link-error window" in c["message"]
    past = ib(run_cli, root, boot, "--link-error-window-hours", "0")
    counters = by(past, "ib_counters")
    assert {c["code"] for d, c in counters.items() if d != "mlx5_1:1"} == {"IB_COUNTER_SATURATED"}
    assert "excessive_buffer_overrun_errors=15" in counters["mlx5_0:1"]["message"]
    # mlx5_1's link_downed (255) was a flap on the first run: it stays failing inside the window
    assert counters["mlx5_1:1"]["code"] == "IB_LINK_FLAPPED" and "inside the 6 h flap window" in counters["mlx5_1:1"]["message"]


def test_a_counter_lower_than_before_was_cleared_and_what_it_shows_is_new(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    h.ib_counter(root, "mlx5_0", "port_rcv_errors", 9)  # below the threshold: a clean first sample
    first = ib(run_cli, root, boot)
    h.check_artifacts(first, status="pass", suite="ib_health")
    h.ib_counter(root, "mlx5_0", "port_rcv_errors", 3)  # cleared (perfquery -R) since, and 3 new errors
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="fail", suite="ib_health")
    c = by(ns, "ib_counters")["mlx5_0:1"]
    assert (c["status"], c["code"], c["value"]) == ("fail", "IB_LINK_ERRORS", 3)
    assert "port_rcv_errors 3 new (cleared since, now 3)" in c["message"]
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
    h.ib_counter(root, "mlx5_6", "link_downed", 1)  # the link came up once more during the boot
    boot.write_text("0d1e2f3a-0000-4000-8000-000000000001\n")
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    c = by(ns, "ib_counters")["mlx5_6:1"]
    assert c["status"] == "pass" and "rebooted" in c["message"] and "at or above its threshold" in c["message"]


def test_a_flap_fails_for_the_window_not_only_the_run_that_saw_it(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    ib(run_cli, root, boot)
    h.ib_counter(root, "mlx5_6", "link_downed", 1)
    saw = ib(run_cli, root, boot)
    h.check_artifacts(saw, status="fail", suite="ib_health")
    later = ib(run_cli, root, boot)  # no growth since: the flap is 0 h old, inside the 6 h window
    h.check_artifacts(later, status="fail", suite="ib_health")
    c = by(later, "ib_counters")["mlx5_6:1"]
    assert c["code"] == "IB_LINK_FLAPPED" and "link_downed +1 (0 -> 1)" in c["message"]
    assert {d for d, x in by(later, "ib_counters").items() if x["status"] != "pass"} == {"mlx5_6:1"}
    assert later.result["metrics"]["ib_counter_growth"] == 0  # nothing new, the old flap still counts
    # the window is a setting: at 0 h the same history no longer fails
    gone = ib(run_cli, root, boot, "--flap-window-hours", "0")
    h.check_artifacts(gone, status="pass", suite="ib_health")
    assert gone.result["environment"]["ib_counters"]["flaps"] == {}


def test_a_flap_older_than_the_window_passes_and_survives_a_reboot_while_inside(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    ib(run_cli, root, boot)
    h.ib_counter(root, "mlx5_6", "link_downed", 2)
    saw = ib(run_cli, root, boot)
    boot.write_text("0d1e2f3a-0000-4000-8000-000000000001\n")  # a reboot does not repair a cable
    h.ib_counter(root, "mlx5_6", "link_downed", 0)
    rebooted = ib(run_cli, root, boot)
    assert by(rebooted, "ib_counters")["mlx5_6:1"]["code"] == "IB_LINK_FLAPPED"
    path = Path(rebooted.summary["result_path"])
    data = json.loads(path.read_text())
    data["environment"]["ib_counters"]["flaps"]["mlx5_6:1"]["at"] = "2020-01-01T00:00:00Z"  # long ago
    path.write_text(json.dumps(data))
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    assert saw.summary["code"] == "IB_LINK_FLAPPED"


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


# ------------------------------------------------------------------------ the expected set of HCAs
def _storage_hca_instead_of(root: Path, missing: str, storage: str = "mlx5_2", h=None) -> None:
    """A storage HCA in InfiniBand mode (a copy of mlx5_0's files: ConnectX-7 at NDR) on a node whose
    compute HCA `missing` is gone: still 8 InfiniBand ports. With `h` (a tree placed on the DGX H100
    topology) the storage HCA sits where the DGX's storage slot has its ConnectX-7 (no GPU there)."""
    shutil.copytree(root / "mlx5_0", root / storage, symlinks=True)
    shutil.rmtree(root / missing)
    if h is not None:
        h.place_hca(root, storage, f"0000:{h.DGX_H100_STORAGE[0]}:00.0")


def _topology_run(run_cli, root: Path, boot: Path, h, fake_tool, *args: str):
    """ib_health on a node whose GPUs NVML / nvidia-smi report (the DGX H100's eight) and whose PCI
    tree is the fake one beside `root`."""
    path = f"{h.h100_nvidia_smi(fake_tool)}:{os.environ['PATH']}"
    return run_cli("ib_health", "--sysfs-root", str(root), "--boot-id-file", str(boot), "--gpu-model", H100,
                   "--pci-root", str(root.parent / "sys" / "bus" / "pci" / "devices"), *args, env={"PATH": path})


def test_a_storage_hca_in_a_missing_rails_place_fails_the_gpu_left_without_one(run_cli, tmp_path, boot, h, fake_tool):
    """8 InfiniBand ports, 8 expected, but mlx5_6 (GPU 4's rail) is gone and a storage HCA is there
    instead: by count "8 of 8"; by the PCIe topology (as NCCL pairs a GPU with the HCA under its
    switch) GPU 4 has no rail, and the storage HCA is no compute rail."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    h.h100_pci(root)
    _storage_hca_instead_of(root, "mlx5_6", h=h)
    ns = _topology_run(run_cli, root, boot, h, fake_tool)
    h.check_artifacts(ns, status="fail", suite="ib_health")
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["code"], c["value"], c["threshold"]) == ("fail", "IB_HCAS_NOT_PRESENT", 7, "== 8")
    assert "GPU 4 (0000:9d:00.0) has no InfiniBand HCA under its PCIe switch" in c["message"]
    assert "not compute rails: mlx5_2:1 (no GPU under its PCIe switch)" in c["message"], c["message"]
    assert c["message"].count("has no InfiniBand HCA") == 1
    topo = ns.result["environment"]["ib_topology"]
    assert topo["known"] is True and topo["hcas"]["mlx5_2"]["gpus"] == [] and topo["hcas"]["mlx5_7"]["gpus"] == [5]


def test_the_healthy_eight_rails_and_a_storage_hca_pass_by_topology(run_cli, tmp_path, boot, h, fake_tool):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    h.h100_pci(root)
    shutil.copytree(root / "mlx5_0", root / "mlx5_2", symlinks=True)
    h.place_hca(root, "mlx5_2", f"0000:{h.DGX_H100_STORAGE[0]}:00.0")
    ns = _topology_run(run_cli, root, boot, h, fake_tool)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["value"]) == ("pass", 8) and c["code"] is None
    assert "8 compute rail(s), 8 expected" in c["message"] and "mlx5_6:1 (GPU 4)" in c["message"]
    assert "mlx5_2:1 (no GPU under its PCIe switch)" in c["message"] and "topology unknown" not in c["message"]


def test_a_gpu_sysfs_does_not_show_falls_back_to_the_count_which_still_fails(run_cli, tmp_path, boot, h, fake_tool):
    """NVML reports GPU 4 but /sys/bus/pci/devices has no entry for it, and its HCA is gone: the
    topology cannot be read, so by count, and 7 of the SKU's 8 still fails."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    h.h100_pci(root)
    (root.parent / "sys" / "bus" / "pci" / "devices" / "0000:9d:00.0").unlink()
    shutil.rmtree(root / "mlx5_6")
    ns = _topology_run(run_cli, root, boot, h, fake_tool)
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["code"], c["value"]) == ("fail", "IB_HCAS_NOT_PRESENT", 7)
    assert "topology unknown" in c["message"] and "0000:9d:00.0" in c["message"]


@pytest.mark.parametrize("tree", ["no_device_links", "flat_vm", "no_gpus"])
def test_where_sysfs_does_not_show_the_topology_the_count_says_so(run_cli, tmp_path, boot, h, fake_tool, tree):
    """No `device` links, a flat PCI tree (a VM: every function straight on the host bridge) or no GPU
    bus ids: by count as before, and the message says the topology is unknown, never a silent pass."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    h.h100_pci(root)
    if tree == "no_device_links":
        for dev in root.iterdir():
            h.place_hca(root, dev.name, None)
    if tree == "flat_vm":
        flat = tmp_path / "sys" / "devices" / "pci0000:00"
        devices = tmp_path / "sys" / "bus" / "pci" / "devices"
        for n, link in enumerate(sorted(devices.iterdir())):
            link.unlink()
            (flat / f"0000:00:{n + 4:02x}.0").mkdir(parents=True)
            link.symlink_to(flat / f"0000:00:{n + 4:02x}.0")
        for n, dev in enumerate(IB_PORTS):
            (flat / f"0000:00:{n + 20:02x}.0").mkdir()
            (root / dev / "device").unlink()
            (root / dev / "device").symlink_to(flat / f"0000:00:{n + 20:02x}.0")
    if tree == "no_gpus":
        ns = ib(run_cli, root, boot, "--pci-root", str(tmp_path / "sys" / "bus" / "pci" / "devices"))
    else:
        ns = _topology_run(run_cli, root, boot, h, fake_tool)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["value"]) == ("pass", 8) and "PCIe topology unknown" in c["message"]
    why = {"no_device_links": "mlx5_0 has no PCI device link", "flat_vm": "no PCIe switch above GPU 0",
           "no_gpus": "no GPU bus ids"}[tree]
    assert why in c["message"] and "by count" in c["message"]
    assert ns.result["environment"]["ib_topology"]["known"] is False


def test_by_count_a_storage_hca_hides_a_missing_compute_one_only_until_they_are_named(run_cli, tmp_path, boot, h):
    """Without the PCIe topology (this tree has no `device` links, no GPU is reported) the count cannot
    see the missing rail; it used to pass silently, it now says the topology is unknown; named, the
    missing HCA fails by name."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    _storage_hca_instead_of(root, "mlx5_6")
    by_count = ib(run_cli, root, boot)  # 8 InfiniBand ports, 8 expected: a count cannot see it
    c = by(by_count, "ib_hca_count")[None]
    assert c["status"] == "pass" and "PCIe topology unknown" in c["message"]
    named = "=mlx5_0,mlx5_1,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_9"  # the node pool's NCCL_IB_HCA
    ns = ib(run_cli, root, boot, "--ib-hca", named)
    h.check_artifacts(ns, status="fail", suite="ib_health")
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["code"], c["value"]) == ("fail", "IB_HCAS_NOT_PRESENT", 7)
    assert "missing: mlx5_6 (not in sysfs)" in c["message"] and "mlx5_2" not in c["message"]


def test_more_ports_than_expected_by_count_is_a_warning_asking_for_names(run_cli, tmp_path, boot, h):
    root = h.h100_ib_tree(tmp_path, cleared=True)
    shutil.copytree(root / "mlx5_0", root / "mlx5_2")
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["code"], c["value"]) == ("warn", "IB_HCAS_EXTRA", 9) and "name the compute HCAs" in c["message"]


def test_a_listed_device_that_cannot_be_read_fails_and_is_never_dropped(run_cli, tmp_path, boot, h):
    """gpud#752: ibstat panics with `stat of IB device 'mlx5_8' failed: No such file or directory`:
    /sys/class/infiniband lists mlx5_8, its link leads nowhere (the PCI function went away)."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    shutil.rmtree(root / "mlx5_8")
    (root / "mlx5_8").symlink_to(tmp_path / "devices" / "pci0000:00" / "0000:e1:00.0" / "infiniband" / "mlx5_8")
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="fail", suite="ib_health")
    dead = by(ns, "ib_port_state")["mlx5_8"]
    assert (dead["status"], dead["code"], dead["action"]) == ("fail", "IB_DEVICE_UNREADABLE", "drain_and_service")
    assert "No such file or directory" in dead["message"]
    count = by(ns, "ib_hca_count")[None]
    assert count["code"] == "IB_HCAS_NOT_PRESENT" and "mlx5_8 (listed, unreadable)" in count["message"]
    assert [p["unreadable"] for p in ns.result["environment"]["ib_ports"] if p["port"] == "mlx5_8"][0]


def test_a_port_whose_state_cannot_be_read_fails(tmp_path, h):
    from cluster_doctor_suites.checkers import ib_ports

    root = h.h100_ib_tree(tmp_path, cleared=True)
    state = root / "mlx5_4" / "ports" / "1" / "state"
    state.unlink()
    state.mkdir()  # reading it fails (EISDIR), as a driver answering an error would
    (p,) = [x for x in ib_ports.scan(str(root)) if x.device == "mlx5_4"]
    assert p.device_error and ib_ports.port_checks(p, None, None, None)[0].code == "IB_DEVICE_UNREADABLE"


def test_the_model_can_name_its_hcas_like_nhc_check_hw_ib(tmp_path, h):
    from cluster_doctor_suites.baselines import Expectations
    from cluster_doctor_suites.checkers import ib_hcas, ib_ports

    root = h.h100_ib_tree(tmp_path, cleared=True)
    ports = ib_ports.scan(str(root))
    selected, how = ib_ports.select(ports, None)
    exp = ib_hcas.expected_set(None, [f"mlx5_ib{i}:1" for i in range(8)], Expectations({"hcas": 8}, {}))
    c = ib_hcas.judge(ports, selected, exp, how, False)
    assert (c.status, c.code, c.value) == ("fail", "IB_HCAS_NOT_PRESENT", 0) and "expect.hca_ports" in c.message
    prefix = ib_hcas.expected_set("mlx5_1", None, Expectations({}, {}))  # NCCL's prefix takes mlx5_1x too
    roce = ib_ports.scan(str(h.roce_ib_tree(tmp_path)))
    sel, how = ib_ports.select(roce, "mlx5_1")
    assert [p.name for p in sel] == ["mlx5_1:1", "mlx5_10:1", "mlx5_11:1"]
    assert ib_hcas.judge(roce, sel, prefix, how, False, spec="mlx5_1").code == "IB_HCAS_EXTRA"


@pytest.mark.parametrize("selector, status, code", [
    ("^mlx5_bond", "pass", None),  # every port but the front-end bond: the node's 8
    ("^=mlx5_bond_0", "pass", None),
    ("mlx5", "warn", "IB_HCAS_EXTRA"),  # NCCL's prefix also takes the bond: 9 for 8 rails, never "0 of 1"
])
def test_a_selector_that_names_no_device_is_read_as_nccl_reads_it(run_cli, tmp_path, boot, h, selector, status, code):
    ns = ib(run_cli, h.h100_ib_tree(tmp_path, cleared=True), boot, "--ib-hca", selector)
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["code"]) == (status, code)
    assert "missing:" not in c["message"]


@pytest.mark.parametrize("selector", ["^mlx5_bond", "mlx5"])
def test_a_prefix_selector_still_finds_a_missing_hca(run_cli, tmp_path, boot, h, selector):
    """`mlx5` also takes the Ethernet bond: 7 InfiniBand rails and the bond are 8 ports, not 8 rails."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    shutil.rmtree(root / "mlx5_6")
    ns = ib(run_cli, root, boot, "--ib-hca", selector)
    h.check_artifacts(ns, status="fail", suite="ib_health")
    c = by(ns, "ib_hca_count")[None]
    assert (c["status"], c["code"], c["value"]) == ("fail", "IB_HCAS_NOT_PRESENT", 7)


def _link_errors_failed(run_cli, tmp_path, boot, h):
    """Two runs: the first records, then mlx5_6's symbol_error grows by 40 under load: IB_LINK_ERRORS."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    ib(run_cli, root, boot)
    h.ib_counter(root, "mlx5_6", "symbol_error", 40)
    failed = ib(run_cli, root, boot)
    assert by(failed, "ib_counters")["mlx5_6:1"]["code"] == "IB_LINK_ERRORS"
    return root, failed


def test_a_link_error_failure_fails_the_quiet_retest_and_a_reboot_inside_its_window(run_cli, tmp_path, boot, h):
    root, failed = _link_errors_failed(run_cli, tmp_path, boot, h)
    rec = failed.result["environment"]["ib_counters"]["link_errors"]["mlx5_6:1"]
    assert rec["count"] == 40 and rec["flap_values"] == {"link_downed": 0}
    retest = ib(run_cli, root, boot)  # the drained node, quiet: no growth since the failed run's sample
    h.check_artifacts(retest, status="fail", suite="ib_health")
    c = by(retest, "ib_counters")["mlx5_6:1"]
    assert c["status"] == "fail" and c["code"] == "IB_LINK_ERRORS" and "symbol_error +40 (0 -> 40)" in c["message"]
    assert "inside the 24 h link-error window" in c["message"] and retest.result["metrics"]["ib_counter_growth"] == 0
    # a reboot and a counter clear repair no cable: still failing, the record carried on
    boot.write_text("0d1e2f3a-0000-4000-8000-000000000001\n")
    h.ib_counter(root, "mlx5_6", "symbol_error", 0)
    rebooted = ib(run_cli, root, boot)
    assert by(rebooted, "ib_counters")["mlx5_6:1"]["code"] == "IB_LINK_ERRORS"
    assert rebooted.result["environment"]["ib_counters"]["link_errors"]["mlx5_6:1"]["at"] == rec["at"]
    # the window is a setting
    gone = ib(run_cli, root, boot, "--link-error-window-hours", "0")
    h.check_artifacts(gone, status="pass", suite="ib_health")
    assert gone.result["environment"]["ib_counters"]["link_errors"] == {}


def test_a_link_error_failure_older_than_its_window_is_judged_by_growth_again(run_cli, tmp_path, boot, h):
    root, failed = _link_errors_failed(run_cli, tmp_path, boot, h)
    path = Path(failed.summary["result_path"])
    data = json.loads(path.read_text())
    seen = dt.datetime.fromisoformat(data["environment"]["ib_counters"]["taken_at"].replace("Z", "+00:00"))
    data["environment"]["ib_counters"]["link_errors"]["mlx5_6:1"]["at"] = (
        seen - dt.timedelta(hours=25)).isoformat(timespec="seconds")
    path.write_text(json.dumps(data))
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")


def test_a_port_reset_since_the_link_errors_ends_the_carry_and_its_flap_is_judged(run_cli, tmp_path, boot, h):
    """The cable reseated (or the port reset) in the same boot: link_downed 0 -> 1 since the failure.
    The link errors are no longer carried; the link-up is a flap, failing for its own window."""
    root, _ = _link_errors_failed(run_cli, tmp_path, boot, h)
    h.ib_counter(root, "mlx5_6", "link_downed", 1)
    ns = ib(run_cli, root, boot)
    c = by(ns, "ib_counters")["mlx5_6:1"]
    assert c["code"] == "IB_LINK_FLAPPED" and ns.result["environment"]["ib_counters"]["link_errors"] == {}
    assert "not carried: the port went down and came back since (link_downed 0 -> 1" in c["message"]
    flap_over = ib(run_cli, root, boot, "--flap-window-hours", "0")
    h.check_artifacts(flap_over, status="pass", suite="ib_health")


def test_a_replaced_hca_does_not_inherit_the_link_errors_of_the_old_one(run_cli, tmp_path, boot, h):
    root, failed = _link_errors_failed(run_cli, tmp_path, boot, h)
    assert failed.result["environment"]["ib_counters"]["link_errors"]["mlx5_6:1"]["guid"] is None  # fixture has none
    (root / "mlx5_6" / "node_guid").write_text("946d:ae03:00f2:1a3c\n")
    first = ib(run_cli, root, boot)  # GUID None -> known: not proof of a new HCA, still failing
    assert by(first, "ib_counters")["mlx5_6:1"]["code"] == "IB_LINK_ERRORS"
    (root / "mlx5_6" / "node_guid").write_text("946d:ae03:00f2:77e1\n")  # the HCA swapped, its counters new
    h.ib_counter(root, "mlx5_6", "symbol_error", 0)
    ns = ib(run_cli, root, boot)
    h.check_artifacts(ns, status="pass", suite="ib_health")
    assert "another HCA since (GUID 946d:ae03:00f2:1a3c -> 946d:ae03:00f2:77e1)" in by(ns, "ib_counters")["mlx5_6:1"]["message"]
