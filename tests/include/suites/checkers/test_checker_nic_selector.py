"""checkers/nic_selector: NCCL_IB_HCA as NCCL reads it (docs: NCCL_IB_HCA; src/misc/utils.cc
parseStringList / matchIfList, src/transport/net_ib.cc: `^` then `=`), the one parser ib_health,
nccl_loopback and fabric_peer select HCAs with."""

from __future__ import annotations

import pytest
from cluster_doctor_suites.checkers import nic_selector

# the gpud HGX H100 node's RDMA devices (fixtures/ib/sys-class-infiniband-h100_gpud), one port each,
# with the mlx5_1x devices a 12-HCA DGX names (NCCL's documentation warns about `mlx5_1` taking them)
NODE = [(d, 1) for d in ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
                         "mlx5_10", "mlx5_11", "mlx5_bond_0")]


def picked(text: str) -> list[str]:
    return [d for d, _ in nic_selector.parse(text).select(NODE)]


@pytest.mark.parametrize("text, want", [
    ("mlx5", [d for d, _ in NODE]),  # a prefix: every device starting with mlx5
    ("mlx5_1", ["mlx5_1", "mlx5_10", "mlx5_11"]),  # still a prefix, as the documentation warns
    ("=mlx5_1", ["mlx5_1"]),  # exact
    ("=mlx5_0:1,mlx5_1:1", ["mlx5_0", "mlx5_1"]),  # exact with ports
    ("mlx5_0:2", []),  # a port the device does not have
    ("^mlx5_1", ["mlx5_0", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0"]),
    ("^=mlx5_1,mlx5_bond_0", ["mlx5_0", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_10",
                               "mlx5_11"]),
    ("=^mlx5_1", ["mlx5_1"]),  # `=` then `^`: parseStringList skips the `^`, the list stays exact, inclusive
    ("", [d for d, _ in NODE]),  # an empty list: NCCL uses everything
    ("^", []),  # and excludes everything
    ("mlx5_0:x", []),  # atoi("x") is port 0: no port matches
    (" mlx5_0", []),  # NCCL strips no whitespace
])
def test_selection_is_nccls(text, want):
    assert picked(text) == want


def test_exact_lists_name_each_device_and_prefixes_do_not():
    sel = nic_selector.parse("=mlx5_0:1,mlx5_3")
    assert sel.names_each and [str(i) for i in sel.items] == ["mlx5_0:1", "mlx5_3"]
    assert not nic_selector.parse("mlx5").names_each and not nic_selector.parse("^=mlx5_3").names_each
    assert nic_selector.parse(None) is None


def test_a_device_whose_ports_cannot_be_read_matches_by_name():
    sel = nic_selector.parse("=mlx5_8:1")
    assert sel.selects("mlx5_8", 0) and sel.selects("mlx5_8", None) and not sel.selects("mlx5_9", 0)
