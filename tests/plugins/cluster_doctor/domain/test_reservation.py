"""Reservation of overdue nodes, the policy: who may be reserved, how many, the breaker."""

import datetime as dt

import pytest
from cluster_doctor.domain import reservation
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.config import InvalidSettings, Settings
from cluster_doctor.domain.reservation import Overdue, ReservationPolicy

NOW = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)
TESTS = ["gpu_health", "dl_unit"]
DUE = due.Policy(staleness=dt.timedelta(days=5.5))
POLICY = ReservationPolicy(enabled=True, target_days=7, lead_hours=30)


def passed(days):
    at = NOW - dt.timedelta(days=days)
    return due.PairState("pass", at, at, "pass")


def test_only_busy_nodes_with_a_due_pair_reaching_the_target_within_the_lead():
    latest = {
        # 6 days old: due (5.5 d) and within 30 h of the 7-day target
        ("n1", "gpu_health"): passed(6), ("n1", "dl_unit"): passed(1),
        # 5.7 days: due, but 31 h from the target
        ("n2", "gpu_health"): passed(5.7), ("n2", "dl_unit"): passed(5.7),
        # fresh: never reserved, however close the target (not overdue)
        ("n3", "gpu_health"): passed(1), ("n3", "dl_unit"): passed(2),
        # n4 was never validated at all: infinitely old
    }
    found = reservation.overdue(["n1", "n2", "n3", "n4"], TESTS, latest, now=NOW, due_policy=DUE, policy=POLICY)
    assert [(o.node_name, o.oldest) for o in found] == [("n4", None), ("n1", NOW - dt.timedelta(days=6))]
    # a target below the threshold still needs a due pair: nothing is reserved before it is due
    early = ReservationPolicy(enabled=True, target_days=5, lead_hours=30)
    assert [o.node_name for o in reservation.overdue(["n2", "n3"], TESTS, latest, now=NOW, due_policy=DUE,
                                                     policy=early)] == ["n2"]


def test_the_limit_keeps_the_stalest_and_the_breaker_reserves_none():
    candidates = [Overdue(f"n{i}", NOW - dt.timedelta(days=7 - i / 10)) for i in range(5)]
    capped = ReservationPolicy(enabled=True, max_nodes=3, breaker_share=0.5)
    choice = reservation.choose(candidates, reserved=1, overdue_reserved=1, gpu_nodes=100, policy=capped)
    assert [o.node_name for o in choice.reserve] == ["n0", "n1"] and [o.node_name for o in choice.waiting] == \
        ["n2", "n3", "n4"]
    assert not choice.breaker_open
    tripped = reservation.choose(candidates, reserved=3, overdue_reserved=3, gpu_nodes=20,
                                 policy=ReservationPolicy(enabled=True, breaker_share=0.3))
    assert tripped.breaker_open and tripped.reserve == [] and len(tripped.waiting) == 5
    assert "8 busy node(s) are overdue at once, more than 30% of 20 GPU nodes (6)" in tripped.breaker_reason


def test_limits_and_costs():
    policy = ReservationPolicy(max_nodes=200, max_share=0.2)
    assert policy.limit(10) == 2 and policy.limit(1) == 1 and policy.limit(5000) == 200
    assert policy.reserve_after(dt.timedelta(days=7)) == dt.timedelta(hours=168 - 30)
    assert reservation.idle_gpu_hours(8, NOW - dt.timedelta(minutes=45), NOW) == pytest.approx(6.0)
    assert reservation.idle_gpu_hours(8, None, NOW) == 0.0  # never seen free: it cost nothing


@pytest.mark.parametrize("value, message", [
    ({"enabled": "yes"}, "reservation.enabled: expected true or false"),
    ({"lead_hours": 0}, "reservation.lead_hours: must be a number > 0"),
    ({"max_nodes": 0}, "reservation.max_nodes: must be an integer >= 1"),
    ({"breaker_share": 2}, "reservation.breaker_share: must be a share in (0, 1]"),
    ({"lead": 3}, "reservation: unknown key(s) lead"),
])
def test_a_bad_policy_is_one_line_naming_the_key(value, message):
    with pytest.raises(InvalidSettings) as raised:
        Settings(reservation=value)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_enabled_the_validation_pods_tolerate_the_reservation_taint():
    assert reservation.TOLERATION not in Settings().tolerations
    on = Settings(reservation={"enabled": True})
    assert reservation.TOLERATION in on.tolerations
    assert Settings(**on.to_dict()).tolerations == on.tolerations  # read back from XCom: not added twice
