"""Property tests of the pod-report boundary: arbitrary termination messages and pod final states.

Whatever a pod prints and however it ends (exit codes, reasons, deletion, OOMKilled, Evicted,
DeadlineExceeded, lying clocks), the boundary never raises, gives exactly one attempt per try, never
says ``pass`` without exit 0 and a schema-valid pass summary, and every attempt it gives is stored by
the real ``validation_history``, with ``validation_latest`` equal to an independent computation.
"""

import datetime as dt
import functools
import json
import uuid

import jsonschema
from cluster_doctor.domain import results
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.status import EXECUTED, Status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NODES = ("gpu-001", "gpu-002")
TEST = "nccl_loopback"
NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


@functools.lru_cache(maxsize=1)
def summary_schema():
    """The contract, read straight from the schema file (not through the code under test)."""
    schema = json.loads(results.schema_path().read_text())
    return jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/summary"})


# ------------------------------------------------------------------ strategies
hostile_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=60) | st.sampled_from(
    ["\x00", "a\x00b", "\x1b[31mred\x1b[0m", "\u202eevil", "\ud800", "line1\nline2", "", " " * 5000])
scalars = (st.none() | st.booleans() | hostile_text
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.integers(min_value=-(10**30), max_value=10**30)
           | st.sampled_from([2**63, -(2**63) - 1, 10**300, 10**400]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(hostile_text, inner, max_size=3), max_leaves=8)


def valid_summary(node, status):
    return {"schema_version": "1", "suite": TEST, "node": node, "status": status, "reason": f"{status}: bus bw",
            "started_at": "2026-11-22T11:50:00Z", "finished_at": "2026-11-22T11:55:00Z", "duration_s": 300.0,
            "suite_version": "sha256:0123456789abcdef", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8,
            "metrics": {"nccl_busbw_gbps": 480.5}, "checks": [{"name": "nccl_busbw", "status": "pass"}],
            "check_counts": {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0}, "truncated": False,
            "log_path": f"/data/continuous_validation/{TEST}/{node}/x.log", "result_path": None}


metric_names = st.from_regex(r"[A-Za-z0-9_.:-]{1,20}", fullmatch=True)


@st.composite
def summaries(draw, node, plausible=False):
    """A summary of this pair; plausible ones keep the contract's shape but carry hostile values
    where the schema allows them (NaN, huge integers, control characters in text)."""
    if plausible:
        body = valid_summary(node, draw(st.sampled_from(["pass", "pass", "fail", "error"])))
        body["reason"] = draw(st.sampled_from([body["reason"], "a\x00b", "\x1b[2J\u202eok", "x" * 5000]))
        body["metrics"] = draw(st.dictionaries(metric_names, scalars, max_size=4))
        body["duration_s"] = draw(st.sampled_from([300.0, 0, float("nan"), float("inf"), 10**400, 10**30, 8e5]))
        return body
    body = valid_summary(draw(st.sampled_from([node, node, "gpu-999", "GPU\x00"])),
                         draw(st.sampled_from(["pass", "pass", "fail", "error", "skip", "PASS"])))
    for key in draw(st.lists(st.sampled_from(sorted(body) + ["extra"]), max_size=4, unique=True)):
        body[key] = draw(json_values)
    if draw(st.booleans()):
        body["metrics"] = draw(st.dictionaries(hostile_text, scalars, max_size=4))
    return body


@st.composite
def messages(draw, node, plausible=False):
    kind = "summary" if plausible else draw(st.sampled_from(["summary", "summary", "prefixed", "text", "deep", "none"]))
    if kind == "text":
        return draw(hostile_text)
    if kind == "deep":
        return draw(st.sampled_from(["[", "{\"a\":"])) * draw(st.integers(1, 5000))
    if kind == "none":
        return None
    text = json.dumps(draw(summaries(node, plausible)), allow_nan=True, ensure_ascii=draw(st.booleans()))
    return f"some output\n{results.RESULT_PREFIX}{text}" if kind == "prefixed" else text


timestamps = (st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                           timezones=st.just(dt.UTC)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ"))
              | st.sampled_from(["2026-11-22T11:50:00Z", "2026-11-22T11:55:00Z", "2026-11-23T11:55:00Z",
                                 "garbage", "", None]))
plausible_times = st.sampled_from(["2026-11-22T11:49:00Z", "2026-11-22T11:50:00Z", "2026-11-22T11:55:00Z",
                                   "2026-11-22T12:03:00Z", "2026-11-23T11:55:00Z"])


@st.composite
def pods(draw, node):
    """A pod dict as sanitize_for_serialization returns it, or None (gone). Half of them are plausible
    (the kubelet's shapes, a suite's summary with hostile values), half anything."""
    if draw(st.integers(0, 20)) == 0:
        return None
    if draw(st.booleans()):
        terminated = {"exitCode": draw(st.sampled_from([0, 0, 1, 2, 137])),
                      "reason": draw(st.sampled_from(["Completed", "Error", "OOMKilled"])),
                      "startedAt": draw(plausible_times), "finishedAt": draw(plausible_times),
                      "message": draw(messages(node, plausible=True))}
        return {"metadata": {"name": f"cv-x-{node}", "creationTimestamp": "2026-11-22T11:48:00Z"},
                "status": {"phase": "Succeeded", "containerStatuses": [{"name": "base", "state": {"terminated": terminated}}]}}
    exit_code = draw(st.sampled_from([0, 0, 1, 2, 137, 143, 139, 255, -1, None]) | st.integers(-(2**40), 2**40))
    terminated = {"exitCode": exit_code,
                  "reason": draw(st.sampled_from(["Completed", "Error", "OOMKilled", "ContainerCannotRun"])
                                 | hostile_text),
                  "startedAt": draw(timestamps), "finishedAt": draw(timestamps), "message": draw(messages(node))}
    status = {"phase": draw(st.sampled_from(["Succeeded", "Failed", "Running", "Unknown"])),
              "startTime": draw(timestamps)}
    if draw(st.booleans()):
        status["containerStatuses"] = [{"name": "base", "state": {"terminated": terminated}}]
    elif draw(st.booleans()):
        status["containerStatuses"] = [{"name": "base", "state": {}, "lastState": {"terminated": terminated}}]
    pod_reason = draw(st.sampled_from([None, None, "Evicted", "DeadlineExceeded"]) | hostile_text)
    if pod_reason is not None:
        status["reason"] = pod_reason
        status["message"] = draw(hostile_text)
    if draw(st.booleans()):
        status["conditions"] = [{"type": "DisruptionTarget", "status": draw(st.sampled_from(["True", "False"])),
                                 "reason": draw(hostile_text), "message": draw(hostile_text)}]
    metadata = {"name": f"cv-nccl-loopback-{node}-x", "creationTimestamp": draw(timestamps)}
    if draw(st.booleans()):
        metadata["deletionTimestamp"] = "2026-11-22T11:56:00Z"
    return {"metadata": metadata, "status": status}


@st.composite
def tries(draw, node):
    pod = draw(pods(node))
    tail = draw(st.lists(hostile_text | messages(node).map(lambda m: m or ""), max_size=3))
    return pod, tail


# ------------------------------------------------------------------ an independent reading of the pod
def _candidates(pod, tail):
    terminated = None
    for cs in (pod or {}).get("status", {}).get("containerStatuses") or []:
        terminated = cs.get("state", {}).get("terminated") or cs.get("lastState", {}).get("terminated")
    texts = [(terminated or {}).get("message") or "", "\n".join(tail)]
    for text in texts:
        yield text.strip()
        yield from (line[len(results.RESULT_PREFIX):] for line in text.splitlines()
                    if line.startswith(results.RESULT_PREFIX))


def supports_pass(pod, tail, node) -> bool:
    """exit 0, no disruption, and a message or log line holding a schema-valid pass summary of this pair."""
    if pod is None:
        return False
    status = pod["status"]
    if status.get("reason") in ("Evicted", "DeadlineExceeded"):
        return False
    if any(c["type"] == "DisruptionTarget" and c["status"] == "True" for c in status.get("conditions", [])):
        return False
    statuses = status.get("containerStatuses") or []
    if not statuses:
        return False
    terminated = statuses[0].get("state", {}).get("terminated") or statuses[0].get("lastState", {}).get("terminated")
    if terminated["exitCode"] != 0 or terminated["reason"] == "OOMKilled":
        return False
    for candidate in _candidates(pod, tail):
        try:
            data = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict) and "status" in data and "suite" in data:
            return (summary_schema().is_valid(data) and data["status"] == "pass" and data["node"] == node
                    and data["suite"] == TEST)
    return False


def strings(value):
    """Every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from strings(v)


def check_attempt(attempt, pod, tail, node, try_number):
    assert isinstance(attempt, Attempt)
    assert (attempt.node_name, attempt.test_name, attempt.try_number) == (node, TEST, try_number)
    assert attempt.status in set(Status)
    if attempt.status == "pass":
        assert supports_pass(pod, tail, node), "pass without exit 0 and a schema-valid pass summary"
    assert attempt.finished_at <= NOW + results.CLOCK_SKEW, "an attempt further ahead would pin its pair"
    assert attempt.started_at is None or attempt.started_at <= attempt.finished_at
    assert attempt.duration_s is None or 0 <= attempt.duration_s
    assert attempt.reason is None or len(attempt.reason) <= results.MAX_REASON
    # Postgres refuses a NUL in text and the escape \u0000 in jsonb: both come only from a real NUL in a
    # string (quoting a log line that shows the six characters \u0000 is fine, they are text)
    for value in (attempt.reason, attempt.metrics, attempt.checks):
        assert not any("\x00" in s for s in strings(value))
    assert Attempt.from_dict(json.loads(json.dumps(attempt.to_dict()))) == attempt  # XCom round trip


def boundary(pod, tail, node, run_id, try_number):
    return results.attempt_from_pod(pod, node_name=node, test_name=TEST, log_tail=tail, now=NOW,
                                    run_budget_s=600, gpu_count=8, dag_id="continuous_validation",
                                    run_id=run_id, map_index=0, try_number=try_number)


# ------------------------------------------------------------------ the properties
@settings(max_examples=400, deadline=None)
@given(tries("gpu-001"))
def test_the_boundary_never_raises_and_never_passes_without_support(one_try):
    pod, tail = one_try
    attempt = boundary(pod, tail, "gpu-001", "manual__1", 1)
    check_attempt(attempt, pod, tail, "gpu-001", 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(NODES).flatmap(lambda n: st.tuples(st.just(n), tries(n))),
                          st.integers(0, 3600 * 24).map(lambda s: NOW - dt.timedelta(seconds=s))),
                min_size=1, max_size=8))
def test_every_attempt_is_stored_once_and_the_latest_view_matches(store, batch):
    """Each example is one DagRun of tries written to the real database; the view is then compared
    with the latest attempt per pair computed here from validation_history alone."""
    run_id = f"prop__{uuid.uuid4().hex}"
    attempts = []
    for try_number, ((node, (pod, tail)), observed) in enumerate(batch, start=1):
        attempt = results.attempt_from_pod(pod, node_name=node, test_name=TEST, log_tail=tail, now=observed,
                                           gpu_count=8, dag_id="continuous_validation", run_id=run_id,
                                           map_index=0, try_number=try_number)
        assert attempt.finished_at <= observed + results.CLOCK_SKEW
        attempts.append(attempt)
    assert store.record(attempts).inserted == len(attempts)
    assert store.record(attempts).duplicates == len(attempts)  # a retried write adds nothing
    stored = store.attempts_for_run("continuous_validation", run_id)
    assert sorted(r["try_number"] for r in stored) == list(range(1, len(attempts) + 1))  # exactly one row per try

    with store.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT id, node_name, test_name, status, finished_at FROM validation_history")
        history = cur.fetchall()
        cur.execute("SELECT node_name, test_name, status, finished_at, history_id, last_attempt_at, "
                    "last_attempt_status FROM validation_latest")
        view = {(r[0], r[1]): r[2:] for r in cur.fetchall()}
    expected = {}
    for pair in {(h[1], h[2]) for h in history}:
        rows = sorted((h for h in history if (h[1], h[2]) == pair), key=lambda h: (h[4], h[0]))
        executed = [h for h in rows if h[3] in EXECUTED]
        last_executed = executed[-1] if executed else None
        expected[pair] = (last_executed[3] if last_executed else None, last_executed[4] if last_executed else None,
                          last_executed[0] if last_executed else None, rows[-1][4], rows[-1][3])
    assert view == expected
