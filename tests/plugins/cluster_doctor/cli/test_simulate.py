"""``cluster-doctor simulate``: its options, its errors (one line, exit 2) and what it prints."""

from __future__ import annotations

import json

import pytest
from cluster_doctor.cli import main as cli
from cluster_doctor.cli import simulate as cli_simulate


def test_cli_target_staleness(capsys):
    code = cli.main(["simulate", "--nodes", "150", "--days", "10", "--occupancy", "0.3", "--job-hours", "2",
                     "--max-job-hours", "6", "--target-staleness", "4d", "--staleness", "3d"])
    out = capsys.readouterr().out
    assert code == 0, out
    line = out.strip().splitlines()[-1]
    assert line.startswith("min_slots=") and "target_staleness=4.0d nodes=150" in line
    assert int(line.split()[0].split("=")[1]) >= 1


def test_cli_says_when_no_slot_count_is_enough(capsys):
    code = cli.main(["simulate", "--nodes", "60", "--days", "10", "--occupancy", "0.95", "--job-hours", "48",
                     "--max-job-hours", "200", "--target-staleness", "3d", "--staleness", "1d"])
    out = capsys.readouterr().out
    assert code == 1
    assert "no number of slots keeps the worst staleness within 3.0d without reservation, nor with" in out
    assert out.strip().splitlines()[-1].startswith("min_slots=none")


def test_cli_target_staleness_answers_with_reservation_and_its_cost(capsys):
    code = cli.main(["simulate", "--nodes", "120", "--days", "10", "--target-staleness", "7d", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["reachable"] and data["staleness_threshold_h"] == 132
    assert data["without_reservation"]["min_slots"] is None  # bundling alone: the occupancy floor
    assert data["without_reservation"]["occupancy_floor_h"] > 168
    found = data["with_reservation"]
    assert found["min_slots"] >= 1
    best = found["at_min_slots"]
    assert best["slots"] == found["min_slots"] and best["worst_staleness_h"] <= 168
    assert best["within_target_share"] == 1.0 and best["reserved_share"] <= 0.01


def test_cli_json(capsys):
    assert cli.main(["simulate", "--nodes", "40", "--days", "3", "--reserve", "--no-gap", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["nodes"] == 40 and data["config"]["no_gap"] and data["config"]["reserve"]
    for key in ("worst_staleness_h", "within_target_share", "reserved_gpu_hours", "reserved_share"):
        assert isinstance(data[key], float), key


def test_cli_faults_json_holds_the_time_to_detect_the_jobs_on_broken_nodes_and_the_validation_share(capsys):
    """--faults adds time_to_detect_h {median, p90, max} and jobs_on_broken_node {mean, p90};
    validation_share is always there; --no-sweep and --no-signals turn the sweep and the signals off."""
    argv = ["simulate", "--nodes", "200", "--days", "7", "--slots", "6", "--reserve", "--faults", "30",
            "--format", "json"]
    assert cli.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["time_to_detect_h"]) == {"median", "p90", "max"} and data["faults"] > 10
    assert set(data["jobs_on_broken_node"]) == {"mean", "p90"}
    assert 0 < data["validation_share"] < 0.05 and data["swept"] > 0
    assert data["config"]["sweep_interval_hours"] == 1 and data["config"]["signals"] is True
    assert data["config"]["fault_kinds"] == {"gpu": 0.5935, "hbm": 0.2323, "network": 0.1355, "silent": 0.0194,
                                            "thermal": 0.0194}
    assert cli.main([*argv, "--no-sweep", "--no-signals"]) == 0
    today = json.loads(capsys.readouterr().out)
    assert today["config"]["sweep_interval_hours"] == 0 and today["config"]["signals"] is False
    assert today["swept"] == 0 and today["suspect_taints"] == 0
    assert today["time_to_detect_h"]["median"] > data["time_to_detect_h"]["median"]
    assert cli.main(["simulate", "--nodes", "200", "--days", "7", "--slots", "6", "--faults", "30"]) == 0
    out = capsys.readouterr().out
    assert "health sweep every 1 h:" in out and "% of the fleet's GPU-hours" in out
    assert "signals on: time to detect median" in out and "user jobs on a broken node mean" in out


def test_cli_acceptance_json_reports_the_user_jobs_on_nodes_that_joined_or_returned_broken(capsys):
    """--joins, --reboots and --bad-repair bring nodes in, some broken on arrival;
    --format json says how many and how many user jobs started on them, with and without --acceptance."""
    argv = ["simulate", "--nodes", "200", "--days", "7", "--slots", "6", "--reserve", "--faults", "30",
            "--joins", "40", "--reboots", "2", "--broken-on-join", "0.3", "--broken-on-reboot", "0.1",
            "--bad-repair", "0.3", "--no-signals", "--format", "json"]
    assert cli.main(argv) == 0
    open_door = json.loads(capsys.readouterr().out)
    assert cli.main([*argv, "--acceptance"]) == 0
    gated = json.loads(capsys.readouterr().out)
    for data in (open_door, gated):
        assert set(data["arrivals"]) == {"new", "reboot", "repair"}
        assert all(set(a) == {"nodes", "broken", "jobs_on_broken"} for a in data["arrivals"].values())
        assert data["returned_broken"] >= 10 and data["config"]["joins"] == 40
        assert data["config"]["broken_on_join"] == 0.3 and data["config"]["broken_on_reboot"] == 0.1
    assert open_door["jobs_on_returned_broken"] > open_door["returned_broken"] and open_door["gated"] == 0
    assert gated["jobs_on_returned_broken"] <= 0.1 * open_door["jobs_on_returned_broken"] and gated["gated"] > 100
    assert cli.main([*argv[:-2], "--acceptance"]) == 0
    assert "nodes that joined or returned: " in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--faults", "-1"], "faults: must be a number >= 0"),
    (["--joins", "-2"], "joins: must be an integer >= 0"),
    (["--broken-on-join", "2"], "broken_on_join: must be a share in [0, 1]"),
    (["--crash-probability", "1.5"], "crash_probability: must be a share in [0, 1]"),
    (["--bad-repair", "-0.1"], "bad_repair: must be a share in [0, 1]"),
    (["--fault-kinds", "gpu=1,psu=1"], "fault_kinds: shares > 0 of gpu, hbm, network, silent, thermal"),
    (["--nodes", "0"], "nodes: must be an integer > 0"),
    (["--confirm-spacing", "-1"], "confirm_spacing_hours: must be a number >= 0"),
    (["--occupancy", "1.2"], "occupancy: must be a share in [0, 1)"),
    (["--target-staleness", "soon"], "--target-staleness: expected a duration like 7d"),
    (["--target-staleness", "7d", "--staleness", "7d"], "--staleness (7d) must be below --target-staleness (7d)"),
    (["--suite-minutes", "dl_unit=abc"], "--suite-minutes: 'dl_unit=abc' is not name=number"),
    (["--suite-minutes", "dl_unit=0"], "suite_minutes: every suite needs a duration > 0"),
])
def test_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert cli.main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_goal_prints_the_fail_slow_table_with_todays_rule_beside_the_new_one(capsys):
    argv = ["simulate", "--nodes", "40", "--days", "2", "--slots", "2", "--slow-faults", "200", "--goal",
            "--seeds", "7,1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "| figure | today | new | goal |" in out and "mean over seeds 7, 1" in out
    for label, *_ in cli_simulate.GOAL_ROWS:
        assert f"| {label} |" in out
    assert cli.main([*argv, "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["rules"]["today"]["per_seed"][0]["seed"] == 7 and "slow_job_node_hours_fewer" in found


def test_cli_slow_faults_print_what_the_rule_found(capsys):
    assert cli.main(["simulate", "--nodes", "40", "--days", "2", "--slow-faults", "200"]) == 0
    assert "fail-slow (the speed probe in the sweep" in capsys.readouterr().out
    assert cli.main(["simulate", "--nodes", "40", "--days", "2", "--slow-faults", "200", "--no-probe"]) == 0
    assert "fail-slow (today's rule" in capsys.readouterr().out


def test_the_help_prints_every_option_the_slow_kinds_percentages_included(capsys):
    assert cli.main(["simulate", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--confirm-spacing HOURS" in out and "a passive signal 90% of jobs" in " ".join(out.split())


def test_the_confirm_spacing_reaches_the_simulation():
    args = cli.build_parser().parse_args(["simulate", "--confirm-spacing", "5"])
    assert cli_simulate._config(args)[0].confirm_spacing_hours == 5.0
    default = cli_simulate._config(cli.build_parser().parse_args(["simulate"]))[0]
    assert default.confirm_spacing_hours == 3.0  # the setting's default
