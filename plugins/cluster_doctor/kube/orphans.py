"""Validation pods whose task died: found, their result recorded, removed.

Peer tests' pods too (``kube.peers``: they carry the same identity labels, and each side's result names
its peer): a peer pod whose deletion failed goes with the next run like any other validation pod.

A validation task deletes its pod as soon as the pod ends (``on_finish_action="delete_pod"``) and
``on_kill`` deletes it when the task is stopped. A task process killed hard (OOM, SIGKILL) runs
neither: its pod runs on to its end and stays, its result is lost (the run records the pair
``skipped``, "did not report"), and while it runs it holds every GPU of its node. Each run, before it
plans, looks at the validation pods of the namespace (by label) and handles those no live task owns:

* **ended** (Succeeded/Failed): the attempt is built from the pod exactly as the operator builds it
  (``results.attempt_from_pod``: the termination message and the pod status through the one
  sanitising boundary; the same run id, map index, try number, node and test, from the pod's labels
  and annotations), written, and only then the pod is deleted (UID precondition: never a newer pod of
  the same name). The run's "did not report" placeholder of that pair becomes this attempt
  (``ResultStore.record_over_placeholder``); a stored verdict is never overwritten.
* **past its deadline** (created + activeDeadlineSeconds + grace) in any other phase, or still
  Pending after its DagRun ended: deleted, recorded ``skipped`` with the reason (never a pass).
* a pod still **Running** after its DagRun ended is left to finish: Kubernetes kills it at its
  deadline, and the next run records its real result.

The results database says when a task is done with its pod, whatever Airflow can tell: its try has a
row. A task writes it after its provider's cleanup deleted the pod, so a pod still there is one whose
deletion failed (the API was unreachable, refused, throttled): deleted whatever its phase — an ended
one recorded first if its row is only a placeholder, never a second row. The exception is a row
``NOT_JUDGED``: the task could not read the pod's result in time and kept the pod on purpose (see
``airflow/operator.py``): once the pod ended, its result replaces that row and the pod is deleted;
while it runs it is left to end (or to its deadline); a Pending one never ran the suite and is deleted.

Who owns a pod: the task of its DagRun, whose state Airflow gives (``run_state``). Pods of a queued
or running DagRun are never touched, unless older than the DagRun timeout plus grace (Airflow stops a
run at its timeout, and a stopped task deletes its pod). When the state cannot be read, timing alone
decides: a live task deletes its ended pod within seconds, so one still there ``grace`` after it ended
has no owner. The grace is ``task_margin_s``, the time a task is given after its pod's deadline to
drain the log, record and delete.

Deleting a Pending or Running pod frees its node for the next run's discovery (this run's discovery
has already seen the node busy). Ended pods hold no resources: their nodes are free already.

Pure: no Airflow imports. The Kubernetes client, the results store and ``run_state`` are passed in.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

from cluster_doctor.domain import results, timestamps
from cluster_doctor.domain.attempts import UNREPORTED, Attempt, is_not_judged, validate_test_name
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.payloads import OrphanReport
from cluster_doctor.domain.status import Status
from cluster_doctor.kube import api_errors, discovery, podspec, retry
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store import fail_slow as stored_fail_slow
from cluster_doctor.store import verdicts
from cluster_doctor.store.history import ResultStore

log = logging.getLogger(__name__)

SELECTOR = "app.kubernetes.io/name=cluster-doctor,app.kubernetes.io/component=validation"
ENDED_PHASES = ("Succeeded", "Failed")
LIVE_RUN_STATES = ("queued", "running")
ENDED_RUN_STATES = ("success", "failed")
LOG_TAIL_LINES = 200  # as many as the operator keeps for the verdict

RECORD_AND_DELETE, DELETE, KEEP = "record-and-delete", "delete", "keep"
PEER_LABEL = f"{podspec.LABEL_PREFIX}/peer"  # kube.peers.PEER_LABEL: a peer test's pod, naming its peer

RunState = Callable[[str, str], Any]
# (dag_id, run_id, node_name, test_name, try_number) -> the stored row's (status, reason)
TriesRecorded = Callable[[list[tuple[str, str, str, str, int]]], Mapping[tuple, tuple[str, str | None]]]


@dataclasses.dataclass(frozen=True)
class Owner:
    """Which try of which task created the pod (the provider's labels, our annotations)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    node_name: str
    test_name: str

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        """Its try's identity in validation_history."""
        return (self.dag_id, self.run_id, self.node_name, self.test_name, self.try_number)


@dataclasses.dataclass(frozen=True)
class Decision:
    action: str  # record-and-delete | delete | keep
    why: str


@dataclasses.dataclass
class Orphan:
    pod: dict[str, Any]
    owner: Owner
    decision: Decision

    @property
    def name(self) -> str:
        return self.pod["metadata"]["name"]


# What reap() did: the reap_orphans task's XCom payload (to_xcom), built up as the pods are handled.
Report = OrphanReport


# ---------------------------------------------------------------------------- reading a pod (pure)
def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def owner_of(pod: Mapping[str, Any]) -> Owner:
    """The try that created ``pod``; ValueError (one line) when the pod does not say."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    # a validation task's pod (the provider's labels) or a peer test's (kube.peers.owner_labels)
    if (labels.get("kubernetes_pod_operator") != "True" and PEER_LABEL not in labels) or not labels.get("dag_id"):
        raise ValueError("not created by the validation task (no KubernetesPodOperator or peer-test labels)")
    # Labels are cut to 63 characters and hashed: the full node name and run id are annotations.
    node = annotations.get(f"{podspec.LABEL_PREFIX}/node") or labels.get(f"{podspec.LABEL_PREFIX}/node")
    test = labels.get(f"{podspec.LABEL_PREFIX}/test")
    run_id = annotations.get(f"{podspec.LABEL_PREFIX}/run-id")
    if not run_id:
        raise ValueError("no run-id annotation")
    try:
        validate_node_name(node)
        validate_test_name(test)
    except ValueError as exc:
        raise ValueError(f"unreadable identity: {results.clean_text(str(exc), 200)}") from None
    return Owner(dag_id=labels["dag_id"], run_id=run_id, task_id=labels.get("task_id", ""),
                 map_index=_int(labels.get("map_index"), -1), try_number=_int(labels.get("try_number"), 1),
                 node_name=node, test_name=test)


def ended_at(pod: Mapping[str, Any]) -> dt.datetime | None:
    """When the pod's containers finished (None when the pod does not say)."""
    status = pod.get("status") or {}
    finished = [timestamps.parse(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                for cs in status.get("containerStatuses") or [] if isinstance(cs, Mapping)]
    finished = [f for f in finished if f is not None]
    if finished:
        return max(finished)
    for condition in status.get("conditions") or []:  # no container ever ran: when it stopped being ready
        if isinstance(condition, Mapping) and (condition.get("type"), condition.get("status")) == ("Ready", "False"):
            return timestamps.parse(condition.get("lastTransitionTime"))
    return None


def deadline_s(pod: Mapping[str, Any], settings: Settings, test_name: str) -> int:
    value = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return settings.pod_deadline_s(test_name)


def _ago(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def decide(pod: Mapping[str, Any], owner: Owner, *, now: dt.datetime, settings: Settings,
           run_state: str | None, recorded: tuple[str, str | None] | None = None) -> Decision:
    """What to do with one validation pod (see the module doc). ``run_state``: its DagRun's state,
    None when unknown; ``recorded``: the (status, reason) its try's row holds, None when it has none."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    phase = status.get("phase")
    if meta.get("deletionTimestamp"):
        return Decision(KEEP, "already being deleted")
    created = timestamps.parse(meta.get("creationTimestamp"))
    if created is None:
        return Decision(KEEP, "no creation time")
    if recorded is not None:
        return _decide_recorded(pod, owner, phase, recorded, now=now, settings=settings, created=created)
    grace = dt.timedelta(seconds=settings.task_margin_s)
    run_live = run_state in LIVE_RUN_STATES
    if run_live and now <= created + dt.timedelta(seconds=settings.dagrun_timeout_s) + grace:
        return Decision(KEEP, f"its DagRun is {run_state}")
    # From here no live task can own the pod, or nobody can say (run_state None).
    run_over = run_state in ENDED_RUN_STATES or run_live  # live means: past the DagRun timeout
    if phase in ENDED_PHASES:
        if run_over:
            how = f"ended ({run_state})" if not run_live else "outlived its timeout"
            return Decision(RECORD_AND_DELETE, f"{phase}, and its DagRun {how}")
        finished = ended_at(pod)
        if finished is not None and now - finished > grace:
            return Decision(RECORD_AND_DELETE, f"{phase} {_ago((now - finished).total_seconds())} ago and still "
                                               "there (a live task deletes its pod at once)")
        return Decision(KEEP, f"{phase} recently; its task may still be handling it")
    past = _past_deadline(pod, owner, phase, now=now, settings=settings, created=created)
    if past is not None:
        return past
    if run_over and phase == "Pending":
        return Decision(DELETE, "still Pending after its DagRun ended")
    if run_over:
        return Decision(KEEP, f"{phase} although its DagRun ended: left to finish, recorded once it ends")
    return Decision(KEEP, f"{phase} within its deadline")


def _past_deadline(pod: Mapping[str, Any], owner: Owner, phase: str | None, *, now: dt.datetime,
                   settings: Settings, created: dt.datetime) -> Decision | None:
    deadline = deadline_s(pod, settings, owner.test_name)
    if now > created + dt.timedelta(seconds=deadline + settings.task_margin_s):
        return Decision(DELETE, f"{phase or 'no phase'} past its deadline (activeDeadlineSeconds {deadline} s "
                                f"since {created.isoformat()}) with no live task")
    return None


def _decide_recorded(pod: Mapping[str, Any], owner: Owner, phase: str | None, recorded: tuple[str, str | None],
                     *, now: dt.datetime, settings: Settings, created: dt.datetime) -> Decision:
    """A pod whose task recorded its try: done with it (see the module doc)."""
    status, reason = recorded
    if not is_not_judged(status, reason):
        if phase in ENDED_PHASES:
            return Decision(RECORD_AND_DELETE, f"{phase}, its task recorded try {owner.try_number} ({status}) but "
                                               "could not delete it")
        return Decision(DELETE, f"{phase or 'no phase'}, its task recorded try {owner.try_number} ({status}) but "
                                "could not delete it")
    if phase in ENDED_PHASES:
        return Decision(RECORD_AND_DELETE, f"{phase}, kept by its task, which could not read its result (not judged)")
    if phase == "Pending":
        return Decision(DELETE, "still Pending, kept by its task, which lost sight of it (not judged): the suite "
                                "never ran")
    past = _past_deadline(pod, owner, phase, now=now, settings=settings, created=created)
    return past or Decision(KEEP, f"{phase}, kept by its task (not judged): recorded once it ends")


# ---------------------------------------------------------------------------- the attempt of an orphan
def _gpu_count(pod: Mapping[str, Any], resource: str) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == "base":
            limits = (container.get("resources") or {}).get("limits") or {}
            if resource in limits:
                return _int(limits[resource], None)  # type: ignore[arg-type]
    return None


def _env(pod: Mapping[str, Any], name: str) -> str | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == "base":
            for env in container.get("env") or []:
                if env.get("name") == name and isinstance(env.get("value"), str):
                    return env["value"]
    return None


def _identity(pod: Mapping[str, Any], owner: Owner, settings: Settings) -> dict[str, Any]:
    """What the operator passes to ``to_attempt`` for its try, read back from the pod it built."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    peer = annotations.get(PEER_LABEL)  # a peer test's side names its peer, as its task records it
    return dict(
        node_name=owner.node_name, test_name=owner.test_name,
        gpu_count=_gpu_count(pod, settings.gpu_resource), gpu_model=_env(pod, "CLUSTER_DOCTOR_GPU_MODEL"),
        suite_version=annotations.get(f"{podspec.LABEL_PREFIX}/suite-version"),
        pod_name=(pod.get("metadata") or {}).get("name"), dag_id=owner.dag_id, run_id=owner.run_id,
        map_index=owner.map_index, try_number=owner.try_number, **({"peer": peer} if peer else {}))


def _message(pod: Mapping[str, Any]) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(cs, Mapping) and cs.get("name") == "base":
            message = ((cs.get("state") or {}).get("terminated") or {}).get("message")
            return message if isinstance(message, str) else None
    return None


def attempt_of(orphan: Orphan, settings: Settings, *, log_tail: list[str] | None = None,
               now: dt.datetime | None = None) -> Attempt:
    """The orphan's attempt: its result when it ended, else ``skipped`` with why it was removed."""
    identity = _identity(orphan.pod, orphan.owner, settings)
    now = now or dt.datetime.now(dt.UTC)
    if orphan.decision.action == RECORD_AND_DELETE:
        return results.attempt_from_pod(orphan.pod, log_tail=log_tail or (),
                                        run_budget_s=settings.suite_timeout(orphan.owner.test_name), now=now,
                                        **identity)
    reason = (f"orphaned: the validation task died and its pod was {orphan.decision.why}; pod deleted, "
              "no result")
    return results.to_attempt(results.PodOutcome(Status.SKIPPED, reason), now=now, **identity)


# ---------------------------------------------------------------------------- the cluster
def find(core_v1: CoreV1, settings: Settings, *, run_state: RunState | None = None,
         now: dt.datetime | None = None, report: Report | None = None,
         tries: TriesRecorded | None = None) -> list[Orphan]:
    """Validation pods of the namespace no live task owns. Pods left alone go to ``report.kept``.
    ``tries``: the stored rows of the pods' tries (``ResultStore.recorded_tries``; None: not asked)."""
    now = now or dt.datetime.now(dt.UTC)
    report = report if report is not None else Report()
    state_of = _run_states(run_state)
    owned = []
    pods = discovery.paginate(core_v1.list_namespaced_pod, [0], namespace=settings.namespace,
                              label_selector=SELECTOR)
    for pod in pods:
        report.examined += 1
        try:
            owned.append((pod, owner_of(pod)))
        except ValueError as exc:
            report.kept.append(f"{(pod.get('metadata') or {}).get('name', '?')}: {exc}")
    recorded = _recorded(tries, [owner for _, owner in owned])
    orphans = []
    for pod, owner in owned:
        decision = decide(pod, owner, now=now, settings=settings, run_state=state_of(owner),
                          recorded=recorded.get(owner.key))
        if decision.action == KEEP:
            report.kept.append(f"{pod['metadata'].get('name', '?')}: {decision.why}")
        else:
            orphans.append(Orphan(pod, owner, decision))
    return orphans


def _run_states(run_state: RunState | None) -> Callable[[Owner], str | None]:
    """Each DagRun's state, asked once (None: unknown, timing alone decides)."""
    states: dict[tuple[str, str], str | None] = {}

    def state_of(owner: Owner) -> str | None:
        key = (owner.dag_id, owner.run_id)
        if key not in states:
            states[key] = None
            if run_state is not None:
                try:
                    value = run_state(*key)
                    states[key] = str(getattr(value, "value", value)) if value is not None else None
                except Exception as exc:  # unknown: timing alone decides
                    log.warning("could not read the state of DagRun %s/%s: %s", *key, api_errors.describe(exc))
        return states[key]

    return state_of


def _recorded(tries: TriesRecorded | None, owners: list[Owner]) -> Mapping[tuple, tuple[str, str | None]]:
    """The stored rows of these pods' tries; none when the database cannot say (then Airflow's state
    and timing decide, as before it was asked)."""
    if tries is None or not owners:
        return {}
    try:
        return tries([owner.key for owner in owners])
    except Exception as exc:
        log.warning("could not read which tries were recorded: %s", api_errors.describe(exc))
        return {}


def _log_tail(core_v1: CoreV1, pod: Mapping[str, Any]) -> list[str]:
    """The pod's last log lines, only needed when its termination message holds no result (best effort:
    pods/log is proxied to a kubelet that may be gone)."""
    if results.parse_summary(_message(pod)) is not None:
        return []
    meta = pod["metadata"]
    try:  # best effort, briefly: one orphan's unreachable kubelet must not hold up the reaping of the rest
        text = retry.with_policy(core_v1, retry.BEST_EFFORT_POLICY).read_namespaced_pod_log(
            meta["name"], meta["namespace"], container="base", tail_lines=LOG_TAIL_LINES)
    except Exception as exc:
        log.warning("could not read the log of %s: %s", meta["name"], api_errors.describe(exc))
        return []
    return text.splitlines() if isinstance(text, str) else []


def _delete(core_v1: CoreV1, pod: Mapping[str, Any]) -> bool:
    """Delete exactly this pod (UID precondition); False when it was already gone."""
    from kubernetes.client import V1DeleteOptions, V1Preconditions
    from kubernetes.client.exceptions import ApiException

    meta = pod["metadata"]
    try:
        core_v1.delete_namespaced_pod(meta["name"], meta["namespace"],
                                      body=V1DeleteOptions(preconditions=V1Preconditions(uid=meta["uid"])))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def dispose(core_v1: CoreV1, store: ResultStore, settings: Settings, orphans: list[Orphan], report: Report) -> Report:
    """Record each orphan's attempt, then delete it. One pod's failure never stops the others; an ended
    pod whose attempt could not be written is kept (it holds the only copy of the result)."""
    judged = []
    for orphan in orphans:
        owner, ended = orphan.owner, orphan.decision.action == RECORD_AND_DELETE
        what = f"{orphan.name} ({owner.node_name} · {owner.test_name}, run {owner.run_id}, try {owner.try_number})"
        try:
            attempt = attempt_of(orphan, settings, log_tail=_log_tail(core_v1, orphan.pod) if ended else None)
            outcome = store.record_over_placeholder(attempt, placeholder_reason=UNREPORTED)
            report.recorded.append(f"{what}: {attempt.status} ({outcome}) {attempt.reason or ''}".rstrip())
            if ended and attempt.executed and outcome in ("superseded", "inserted"):
                judged.append(attempt.to_dict())
        except Exception as exc:
            report.errors.append(f"recording {what}: {api_errors.describe(exc)}")
            if ended:
                continue
        try:
            gone = _delete(core_v1, orphan.pod)
        except Exception as exc:
            report.errors.append(f"deleting {what}: {api_errors.describe(exc)}")
            continue
        report.deleted.append(f"{what}: {orphan.decision.why}" + ("" if gone else " (already gone)"))
        if (orphan.pod.get("spec") or {}).get("nodeName") and not ended:
            report.freed_nodes.append(owner.node_name)  # it held the node's GPUs
    if judged:
        try:  # the straggler/drift verdicts the record task gives its attempts
            verdicts.judge_recorded(store.connect, judged,
                                          settings.fleet_verdicts)
        except Exception as exc:
            report.errors.append(f"fleet verdicts of the recorded orphans: {api_errors.describe(exc)}")
        try:  # a flagged speed probe makes its node a suspect, as the record task's probes do
            stored_fail_slow.record_probe_suspects(
                store.connect, judged, now=dt.datetime.now(dt.UTC),
                window=dt.timedelta(hours=settings.slow_signal_window_hours),
                spacing=dt.timedelta(hours=settings.slow_confirm_spacing_hours))
        except Exception as exc:
            report.errors.append(f"speed probe suspects of the recorded orphans: {api_errors.describe(exc)}")
    return report


def reap(core_v1: CoreV1, store: ResultStore, settings: Settings, *, run_state: RunState | None = None,
         now: dt.datetime | None = None) -> Report:
    """Find the orphaned validation pods, record and delete them. Never raises: every problem is one
    line in the report's errors, and the report is logged."""
    report = Report()
    try:
        orphans = find(core_v1, settings, run_state=run_state, now=now, report=report,
                       tries=getattr(store, "recorded_tries", None))
    except Exception as exc:
        report.errors.append(f"listing the validation pods of {settings.namespace}: {api_errors.describe(exc)}")
        orphans = []
    dispose(core_v1, store, settings, orphans, report)
    (log.error if report.errors else log.info)("%s", report.describe())
    return report
