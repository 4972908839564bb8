"""One node's suites in one run: which earlier step stops the rest, when the next step's
queue time starts, when the run is done with the node."""

import datetime as dt

from cluster_doctor.domain.planning import steps
from cluster_doctor.domain.attempts import Attempt

T = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)


def attempt(test, status, reason=None, minutes=0):
    return Attempt(node_name="gpu-001", test_name=test, status=status, reason=reason,
                   finished_at=T + dt.timedelta(minutes=minutes))


def test_a_failing_health_check_stops_the_rest_with_its_reason():
    cause = steps.stop_cause([attempt("gpu_health", "fail", "xid: Xid 79 on GPU 3")])
    assert cause == "stopped by gpu_health failing on this node (xid: Xid 79 on GPU 3)"
    # an erroring health suite could not judge: the other suites still can
    assert steps.stop_cause([attempt("gpu_health", "error", "crashed")]) is None


def test_executed_steps_let_the_next_run_and_unplanned_ones_are_ignored():
    assert steps.stop_cause([]) is None
    assert steps.stop_cause([attempt("gpu_health", "pass"), None, attempt("dl_unit", "fail", "gemm")]) is None


def test_a_step_that_could_not_run_stops_the_rest_and_the_cause_is_carried():
    taken = attempt("gpu_health", "preempted", "a user pod claimed the node while ours was Pending: ml/x")
    first = steps.stop_cause([taken])
    assert first == ("stopped by gpu_health: preempted, a user pod claimed the node while ours was Pending: ml/x")
    # the next step was recorded skipped with that cause; the one after carries the same cause
    assert steps.stop_cause([taken, attempt("dl_unit", "skipped", f"{first}; no pod created")]) == first
    timeout = attempt("gpu_health", "timeout", "the pod was still Pending after 1200 s")
    assert steps.stop_cause([timeout]).startswith("stopped by gpu_health: timeout, the pod was still Pending")


def test_the_queue_time_of_a_step_counts_from_the_end_of_the_one_before():
    planned = T - dt.timedelta(minutes=40)
    assert steps.ready_at(planned, []) == planned
    assert steps.ready_at(planned, [attempt("gpu_health", "pass", minutes=-30), None,
                                      attempt("dl_unit", "pass", minutes=-2)]) == T - dt.timedelta(minutes=2)


def test_done_with_the_node_when_every_suite_ran_or_health_failed_or_a_user_took_it():
    planned = ["gpu_health", "dl_unit"]
    assert steps.done_with_node(planned, [attempt("gpu_health", "pass"), attempt("dl_unit", "fail")])
    assert steps.done_with_node(planned, [attempt("gpu_health", "fail"), attempt("dl_unit", "skipped", "stopped")])
    assert steps.done_with_node(planned, [attempt("gpu_health", "preempted", "evicted")])
    assert steps.done_with_node(planned, [attempt("gpu_health", "skipped", f"{steps.NODE_TAKEN} (ml/x)")])
    # time or queue ran out, or a step never reported: a reserved node stays reserved for the next run
    assert not steps.done_with_node(planned, [attempt("gpu_health", "pass"), attempt("dl_unit", "skipped",
                                                                                       "the decision is 31 min old")])
    assert not steps.done_with_node(planned, [attempt("gpu_health", "pass"), None])
    assert not steps.done_with_node(planned, [attempt("gpu_health", "timeout", "Pending")])
