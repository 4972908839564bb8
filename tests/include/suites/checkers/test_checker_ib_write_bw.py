"""checkers/ib_write_bw: perftest's table and failure messages, as published, judged per rail."""

from __future__ import annotations

from pathlib import Path

from cluster_doctor_suites.checkers import ib_write_bw

PERFTEST = Path(__file__).resolve().parents[1] / "fixtures" / "perftest"
HEALTHY = (PERFTEST / "ib_write_bw_a_report_gbits_100g_roce_client_cloud-native-docs.txt").read_text()


def test_the_table_is_read_row_by_row_and_the_largest_message_decides():
    p = ib_write_bw.parse(HEALTHY)
    assert p["unit"] == "Gb/sec" and len(p["rows"]) == 23 and p["failures"] == []
    assert p["rows"][0] == {"bytes": 2, "iterations": 5000, "bw_peak": 0.11, "bw_average": 0.11,
                            "msg_rate_mpps": 6.897101}
    c = ib_write_bw.judge(0, "mlx5_0", "node-b mlx5_0", 0, HEALTHY, 90.0, "100 Gb/s ports")
    assert (c.status, c.value, c.device, c.threshold) == ("pass", 92.39, "mlx5_0", ">= 90")


def test_a_rail_below_the_floor_of_its_expected_rate_fails_named_by_its_hca():
    """The genuine 100 GbE figure on a node whose HCAs should run NDR 400 (floor 380)."""
    c = ib_write_bw.judge(3, "mlx5_4", "node-b mlx5_4", 0, HEALTHY, 380.0, "400 Gb/s ports: NHC 380")
    assert (c.status, c.code, c.device, c.action) == ("fail", "PEER_IB_BW_LOW", "mlx5_4", "check_fabric")
    assert "rail 3 mlx5_4 <-> node-b mlx5_4: BW average 92.39 Gb/s < 380 Gb/s" in c.message


def test_perftest_failures_exit_1_and_fail_the_rail():
    text = (PERFTEST / "ib_write_bw_client_modify_qp_rts_failed_perftest132.txt").read_text()
    c = ib_write_bw.judge(1, "mlx5_1", "node-b mlx5_1", 1, text, 380.0, "")
    assert (c.status, c.code, c.value) == ("fail", "IB_WRITE_BW_FAILED", 1)
    assert "exited 1 (FAILURE): Failed to modify QP to RTS / Unable to Connect the HCA's through the link" in c.message
    server = (PERFTEST / "ib_write_bw_server_read_keys_failed_perftest132.txt").read_text()
    assert ib_write_bw.judge(1, "mlx5_1", "x", 1, server, 380.0, "").code == "IB_WRITE_BW_FAILED"


def test_no_server_listening_is_not_a_verdict_on_the_link():
    """perftest#228: the TCP side channel never connected, nothing crossed the fabric: an error."""
    text = (PERFTEST / "ib_write_bw_client_couldnt_connect_perftest228.txt").read_text()
    c = ib_write_bw.judge(0, "mlx5_0", "node-b mlx5_0", 1, text, 380.0, "")
    assert (c.status, c.code) == ("error", "PEER_UNREACHABLE")
    assert "Couldn't connect to 192.168.125.211:18515" in c.message


def test_exit_0_without_a_table_and_no_baseline_are_never_a_pass():
    assert ib_write_bw.judge(0, "mlx5_0", "x", 0, "garbage\n", 380.0, "").status == "error"
    c = ib_write_bw.judge(0, "mlx5_0", "x", 0, HEALTHY, None, "no expected port rate")
    assert (c.status, c.code, c.value) == ("skip", "BASELINE_MISSING", 92.39)
