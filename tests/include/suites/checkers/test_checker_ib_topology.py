"""checkers/ib_topology: the compute rails from the PCIe topology (an HCA under a GPU's PCIe switch), on
the DGX H100 tree conftest builds (fixtures/SOURCES.md) and on hostile trees."""

from __future__ import annotations

import os

import pytest
from cluster_doctor_suites.checkers import ib_topology

GPUS = [{"index": i, "pci_bus_id": f"00000000:{b}:00.0"}
        for i, b in enumerate(("1B", "43", "52", "61", "9D", "C3", "D1", "DF"))]
IB = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]


@pytest.mark.parametrize("text, want", [
    ("00000000:1B:00.0", "0000:1b:00.0"),  # NVML / nvidia-smi
    ("0000:1b:00.0", "0000:1b:00.0"),  # sysfs
    ("1b:00.0", "0000:1b:00.0"),  # lspci
    ("00000001:9D:00.1", "0001:9d:00.1"),  # another domain, a second function
    ("", None), (None, None), ("GPU-8c1f", None), ("1b:00.8", None), ("../../etc:00.0", None),
])
def test_bus_ids_in_every_tool_spelling_are_one_sysfs_name(text, want):
    assert ib_topology.bdf(text) == want


def test_the_dgx_h100_tree_pairs_each_gpu_with_its_hca(tmp_path, h):
    root = h.h100_ib_tree(tmp_path)
    devices = h.h100_pci(root)
    topo = ib_topology.read(str(root), str(devices), GPUS, IB + ["mlx5_bond_0"])
    assert topo.known, topo.why
    assert {d: g for d, g in topo.rails.items()} == {**{d: [i] for i, d in enumerate(IB)}, "mlx5_bond_0": []}
    assert topo.lonely() == []


def test_a_gpu_whose_rail_is_gone_is_the_one_left_alone(tmp_path, h):
    root = h.h100_ib_tree(tmp_path)
    devices = h.h100_pci(root)
    topo = ib_topology.read(str(root), str(devices), GPUS, [d for d in IB if d != "mlx5_6"])
    assert topo.known and topo.lonely() == [(4, "0000:9d:00.0")]


def test_hostile_trees_are_unknown_never_a_guess(tmp_path, h):
    root = h.h100_ib_tree(tmp_path)
    devices = h.h100_pci(root)
    # a device link that loops on itself, and one into a non-PCI place (a virtual device)
    h.place_hca(root, "mlx5_0", None)
    (root / "mlx5_0" / "device").symlink_to(root / "mlx5_0" / "device")
    topo = ib_topology.read(str(root), str(devices), GPUS, IB)
    assert not topo.known and "mlx5_0 has no PCI device link" in topo.why
    (root / "mlx5_0" / "device").unlink()
    (tmp_path / "virtual" / "net").mkdir(parents=True)
    (root / "mlx5_0" / "device").symlink_to(tmp_path / "virtual" / "net")
    assert "mlx5_0 has no PCI device link" in ib_topology.read(str(root), str(devices), GPUS, IB).why
    # a bus id NVML never prints, and a GPU sysfs does not list
    assert "not recognised" in ib_topology.read(str(root), str(devices), [{"index": 0, "pci_bus_id": "x"}], IB).why
    os.unlink(devices / "0000:d1:00.0")
    topo = ib_topology.read(str(root), str(devices), GPUS, IB)
    assert not topo.known and "GPU 6 (0000:d1:00.0) not a PCI device" in topo.why
    assert ib_topology.read(str(root), str(devices), [], IB).why.startswith("no GPU bus ids")


def test_a_gpu_straight_on_a_root_port_has_no_switch_to_share(tmp_path):
    """A PCIe card in a CPU slot: host bridge, root port, GPU; an HCA in the next slot is not its rail
    by switch, so the topology cannot say which HCA is a compute rail."""
    gpu = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:01:00.0"
    nic = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:02.0" / "0000:02:00.0"
    gpu.mkdir(parents=True)
    nic.mkdir(parents=True)
    devices = tmp_path / "pci"
    devices.mkdir()
    (devices / "0000:01:00.0").symlink_to(gpu)
    (tmp_path / "ib" / "mlx5_0").mkdir(parents=True)
    (tmp_path / "ib" / "mlx5_0" / "device").symlink_to(nic)
    topo = ib_topology.read(str(tmp_path / "ib"), str(devices), [{"index": 0, "pci_bus_id": "00000000:01:00.0"}],
                            ["mlx5_0"])
    assert not topo.known and "no PCIe switch above GPU 0" in topo.why


def test_two_devices_under_one_root_port_but_different_switch_ports_still_share_it():
    a = ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0")
    b = ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:03.0", "0000:1b:00.0")
    other = ("pci0000:15", "0000:15:02.0", "0000:20:00.0", "0000:21:00.0", "0000:22:00.0")
    assert ib_topology.shares_switch(a, b) and not ib_topology.shares_switch(a, other)
    assert not ib_topology.shares_switch(("pci0000:00", "0000:00:04.0"), ("pci0000:00", "0000:00:05.0"))
