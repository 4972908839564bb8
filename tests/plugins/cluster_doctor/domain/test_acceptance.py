"""cluster_doctor.domain.acceptance: the gate's policy — what a bad setting says, which nodes it gates within
the limit and the breaker, and where a gated node stands."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from cluster_doctor.domain import acceptance as gate
from cluster_doctor.domain.acceptance import AcceptancePolicy, InvalidAcceptancePolicy
from cluster_doctor.domain.status import PairState

NOW = dt.datetime(2030, 1, 1, 12, tzinfo=dt.UTC)  # pure: every time is given
SINCE = NOW - dt.timedelta(hours=1)
TESTS = ["gpu_health", "dl_unit"]
POLICY = AcceptancePolicy(enabled=True, max_nodes=2, breaker_nodes=3, max_hold_hours=4)


@pytest.mark.parametrize("values, message", [
    ({"enabled": "yes"}, "acceptance.enabled: expected true or false"),
    ({"taint_key": "no spaces/allowed here"}, "acceptance.taint_key: not a Kubernetes taint key"),
    ({"changes": ["new", "reimage"]}, "acceptance.changes: a list of new, reboot, uncordoned"),
    ({"changes": "new"}, "acceptance.changes: a list of"),
    ({"max_nodes": 0}, "acceptance.max_nodes: must be an integer >= 1"),
    ({"breaker_nodes": True}, "acceptance.breaker_nodes: must be an integer >= 1"),
    ({"max_hold_hours": float("inf")}, "acceptance.max_hold_hours: must be a number > 0"),
    ({"maxnodes": 3}, "acceptance: unknown key(s) maxnodes"),
])
def test_a_bad_setting_names_the_key(values, message):
    with pytest.raises(InvalidAcceptancePolicy, match=re.escape(message)):
        AcceptancePolicy.from_mapping(values)


def test_the_gate_taint_and_its_toleration_follow_the_key():
    policy = AcceptancePolicy.from_mapping({"taint_key": "example.com/unvalidated", "changes": ["new", "new"]})
    assert policy.taint == {"key": "example.com/unvalidated", "value": "validation", "effect": "NoSchedule"}
    assert policy.toleration == {"key": "example.com/unvalidated", "operator": "Exists", "effect": "NoSchedule"}
    assert policy.changes == ("new",)


def test_within_the_limit_and_past_the_breaker_none():
    assert gate.choose(["gpu-3", "gpu-1"], gated=1, policy=POLICY) == gate.Choice(["gpu-1"], ["gpu-3"])
    assert gate.choose(["gpu-1"], gated=2, policy=POLICY) == gate.Choice([], ["gpu-1"])
    mass = gate.choose([f"gpu-{i}" for i in range(4)], gated=0, policy=POLICY)
    assert mass.breaker_open and mass.gate == [] and len(mass.waiting) == 4
    assert "4 node(s) joined, rebooted or came back at once, more than acceptance.breaker_nodes (3)" in mass.breaker_reason


def state(status, at):
    return PairState(status=status, finished_at=at, last_attempt_at=at, last_attempt_status=status)


@pytest.mark.parametrize("states, at, verdict", [
    ({}, NOW, gate.WAITING),
    ({"gpu_health": state("pass", NOW)}, NOW, gate.WAITING),  # one suite is not the bundle
    ({"gpu_health": state("pass", NOW), "dl_unit": state("pass", NOW)}, NOW, gate.PASSED),
    ({"gpu_health": state("pass", NOW), "dl_unit": state("pass", SINCE - dt.timedelta(days=1))}, NOW, gate.WAITING),
    ({"gpu_health": state("fail", NOW)}, NOW, gate.FAILED),
    ({"gpu_health": state("error", NOW), "dl_unit": state("pass", NOW)}, NOW, gate.FAILED),
    ({"gpu_health": state("fail", SINCE - dt.timedelta(days=1))}, NOW, gate.WAITING),  # before the gate
    ({}, SINCE + dt.timedelta(hours=4), gate.MAX_HOLD),
    ({"gpu_health": state("fail", NOW)}, SINCE + dt.timedelta(hours=9), gate.FAILED),  # a failure stays out
])
def test_where_a_gated_node_stands(states, at, verdict):
    assert gate.judge(states, TESTS, since=SINCE, now=at, policy=POLICY) == verdict
