"""NodeValidationPodOperator: one validation pod pinned to one node, and the truth about how it ended.

A subclass of the provider's KubernetesPodOperator (sync mode) whose lifecycle runs unchanged: the
provider creates the pod, waits for it (schedule/startup timeouts, events logged), streams its log
into the task log, reattaches after a worker restart, labels it already-checked and deletes it on
every path (``on_finish_action="delete_pod"``, ``on_kill``). This class adds what validation needs
through the provider's extension points: ``build_pod_request_obj`` (the pod spec), ``log_formatter``
(the log tail), a ``KubernetesPodOperatorCallback`` (pod started, pod completed) and two small
overrides that call ``super()`` (``await_pod_start``: the availability watch; ``cleanup``: the final
pod state). The phases it adds are the ones every validation pod goes through, peer tests' included
(``kube.pod_lifecycle``: the free-node check, the node watch, the verdict from the final state, the
``Ended`` exception). What an exception out of the provider means is decided in ``provider_errors``:

* as a step of a node's bundle (the validate task group: the node's suites one after another): a
  step the bundle does not plan is skipped without a row; a step after a failed health check, or
  after a step that could not run its suite (a user took the node, no pod could start), is recorded
  ``skipped`` with that cause, no pod (``domain.planning.steps``);
* before the pod exists: the decision (for a later step of a bundle: the end of the step before it)
  is not older than the max queue time and the node is still free, else no pod and the attempt is
  ``skipped``;
* while Pending: every few seconds, whether the node turned not ready, was cordoned, gained a taint
  we do not tolerate or was deleted (ours is deleted at once: ``skipped``, with that cause); every
  availability interval, whether a user pod claimed the node (``preempted``); and a pending timeout
  (pod deleted: ``timeout``, with the scheduler's last word before our deletion). The re-checks read
  that node and its pods only (``kube.guards``);
* after the run: the suite's summary from the termination message, checked against the pod's exit
  code and final state (evicted or preempted while running is ``preempted``, never ``fail``);
* exactly one attempt record per try, whatever happened, pushed to XCom for the record task and
  written straight to the results DB as well (idempotent on the attempt identity).

**A control plane that blinks.** Every call on the task's own pod (the provider's included: its
PodManager uses ``client``) goes through ``retry.own_pod``: refused or lost connections, timeouts,
429 (after its Retry-After), 5xx, and a 401/403 while the apiserver comes back are retried until the
task's deadline (its execution_timeout less ``API_RESERVE_S``). An API error is never the node's
fault: when the pod's final state still cannot be read, or the wait for a pod already Running was cut
off, the pod is kept, not deleted, and the attempt recorded ``skipped`` with ``NOT_JUDGED: ...`` (the
pair stays due); the next run's orphan reaper records the pod's own result over that row and deletes
the pod. The same holds when the task's execution_timeout fires while its pod ran. Any other
orchestration failure is ``skipped`` with ``orchestration error: ...`` (a refusal names the missing
permission), never ``error``.

**A re-run never validates twice.** Airflow may run a task again after losing it (a scheduler or
worker gone, its heartbeat timed out) although it has no retries. A pod of an earlier try is adopted,
never replaced: one still running is waited for, one that ended is judged now; either way the attempt
keeps that pod's try number, so the try it belongs to has one row (superseding its not-judged row).

Task states: pass -> success; fail or error -> failed, the log ending on the verdict block (node, suite,
status, code, reason, action, failing checks) and one "Task exited" line, no traceback (VerdictFailed);
timeout, preempted, skipped -> skipped with the reason. No automatic retries: the next hour re-plans.
"""

from __future__ import annotations

import collections
import datetime as dt
import threading
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.utils.pod_manager import OnKillAction, PodLaunchTimeoutException
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule
from airflow.sdk.exceptions import AirflowSkipException, AirflowTaskTimeout
from kubernetes.client import ApiClient

from cluster_doctor.airflow import provider_errors
from cluster_doctor.airflow.provider_errors import PodLaunchFailedException
from cluster_doctor.domain import results, suites
from cluster_doctor.domain.planning import steps
from cluster_doctor.domain.attempts import ORCHESTRATION, Attempt, InvalidAttempt, not_judged
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.domain.payloads import Bundle, RunConfig, Validation
from cluster_doctor.domain.status import EXECUTED, Status
from cluster_doctor.kube import api_errors, pod_lifecycle, podspec, retry
from cluster_doctor.kube.pod_lifecycle import Ended
from cluster_doctor.store.history import RetryPolicy

POOL_WAIT_NOTE_S = 30  # a bundle step that waited this long for a pool slot says so in its log
# What a try keeps of its execution_timeout after its calls on its own pod give up (retry.own_pod): the
# last reads, recording the attempt. At most this, at most half the task margin.
API_RESERVE_S = 120
# A short budget inside the pool slot; the record task retries longer.
DIRECT_WRITE_RETRY = RetryPolicy(attempts=2, initial_delay_s=1.0)


class VerdictFailed(SystemExit):
    """How a validation task fails on its node's verdict (or on a pod that could not start). Airflow 3's
    task runner logs every exception it catches with its stack ("Task failed with exception"), but for a
    SystemExit one line ("Task exited"): the log ends on the verdict block above, not on eight frames of
    our own code. Like AirflowFailException it is never retried: the operator's retry policy
    (VERDICT_RETRY_POLICY, Airflow's extension point for the retry decision) fails the task at once —
    the verdict is recorded, a retry would only run the suite again."""

    def __init__(self, headline: str) -> None:
        super().__init__(headline)
        self.headline = headline

    def __str__(self) -> str:
        return self.headline


VERDICT_RETRY_POLICY = ExceptionRetryPolicy(rules=[RetryRule(
    exception=f"{__name__}.VerdictFailed", action=RetryAction.FAIL,
    reason="the node's verdict is recorded: a retry would only run the suite again")])


class _Observer(KubernetesPodOperatorCallback):
    """The provider's own signals, kept for the verdict: the pod started; the pod completed."""

    @staticmethod
    def on_pod_starting(*, operator: NodeValidationPodOperator, **kwargs: Any) -> None:
        operator._reached_running = True

    @staticmethod
    def on_pod_completion(*, pod: Any, operator: NodeValidationPodOperator, **kwargs: Any) -> None:
        if pod is not None:
            operator._final_pod = ApiClient().sanitize_for_serialization(pod)


class _PendingWatch(threading.Thread):
    """Runs beside the provider's wait for the pod to start, and ends that wait (deletes our pod) as
    soon as the pod cannot or should not start: the re-checks of ``pod_lifecycle.NodeWatch`` (the node
    can no longer take it, a user pod claimed it) or the pending window passed (the provider's schedule
    and startup timeouts restart when the pod is bound; this one counts from creation).

    The cause, and the scheduler's last word, are fixed before the deletion: what our own deletion
    causes afterwards (events, the pod vanishing) never replaces them. Nothing is deleted before a read
    of the pod says it is still Pending: when the provider cannot read it (a 429 storm, an apiserver
    away) the pod may well have started, and a pod that ran holds a result."""

    def __init__(self, operator: NodeValidationPodOperator, pod: Any):
        super().__init__(name=f"pending-watch-{pod.metadata.name}", daemon=True)
        self.operator, self.pod = operator, pod
        self.stopped = threading.Event()
        self.watched: pod_lifecycle.Watched | None = None
        self.timed_out = False

    def run(self) -> None:
        op, ours = self.operator, {self.operator.node_name: self.pod.metadata.name}
        watch = pod_lifecycle.NodeWatch(op.guard_client, op.cd_settings, start=time.monotonic(), logger=op.log)
        found: pod_lifecycle.Watched | None = None
        while not self.stopped.wait(watch.tick_s):
            now = time.monotonic()
            try:
                found = found or watch.poll(now, waiting=ours, live=ours)
                expired = found is None and watch.pending_expired(now)
                if found or expired:
                    if not self._still_pending():
                        return  # it started (or went) meanwhile: nothing left for this watch to end
                    self.watched, self.timed_out = found, expired
                    op._keep_pending_events()  # before our deletion adds events of its own
                    op.pod_manager.delete_pod(self.pod)  # ends the provider's wait
                    return
            except Exception as exc:  # the provider's own wait still bounds this try
                op.log.warning("availability check failed: %s", api_errors.describe(exc))

    def _still_pending(self) -> bool:
        """Our pod, read now, is still Pending (an API error is raised: the watch tries again)."""
        op = self.operator
        return pod_lifecycle.phase(pod_lifecycle.read_pod(op.guard_client, op.namespace, self.pod.metadata.name)) \
            == pod_lifecycle.PENDING

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=30)


class NodeValidationPodOperator(KubernetesPodOperator):
    """Validate one node with one suite. Mapped with ``expand_kwargs`` over the run's plan."""

    ui_color = "#d4f1d4"

    # ``bundle``: in the validate task group, each step gets its node's bundle (a mapped argument of the
    # group, resolved when the task's fields are rendered); see _apply_bundle.
    template_fields: Sequence[str] = (*KubernetesPodOperator.template_fields, "bundle")

    def __init__(
        self,
        *,
        test_name: str,
        node_name: str | None = None,
        gpu_count: int | None = None,
        gpu_model: str | None = None,
        node_gpus: int | None = None,
        probe_seconds: float | None = None,
        planned_at: str | dt.datetime | None = None,
        why: str | None = None,
        run_config: Mapping[str, Any] | RunConfig | None = None,
        bundle: Any = None,
        steps_before: Sequence[str] = (),
        settings: Settings | None = None,
        **kwargs: Any,
    ) -> None:
        """One pair (``node_name`` … ``run_config``: the kwargs of ``payloads.Validation``), or one step of
        a node's bundle (``bundle``, with ``steps_before``: the task ids of the steps that run before it
        on the same node, and ``settings``: the parse-time settings, until the bundle is rendered)."""
        suites.get(test_name)
        target = None
        if bundle is None:
            validate_node_name(node_name)
            # the kwargs ship_suites built (payloads.Validation.to_xcom), read back typed
            target = Validation.from_xcom({"node_name": node_name, "test_name": test_name, "gpu_count": gpu_count,
                                           "gpu_model": gpu_model, "node_gpus": node_gpus,
                                           "probe_seconds": probe_seconds,
                                           "planned_at": planned_at, "why": why, "run_config": run_config})
        s = target.run_config.settings if target is not None else (settings or Settings())
        self.test_name = test_name
        self.bundle = bundle
        self.steps_before = tuple(steps_before)
        self._bundle: Bundle | None = None
        self.node_name: str | None = None
        kwargs.setdefault("kubernetes_conn_id", s.kubernetes_conn_id)
        kwargs["execution_timeout"] = dt.timedelta(seconds=s.task_timeout_s(test_name))
        kwargs["callbacks"] = [*_as_list(kwargs.get("callbacks")), _Observer]
        kwargs.setdefault("retry_policy", VERDICT_RETRY_POLICY)  # a verdict fails the task, no retry
        super().__init__(
            namespace=s.namespace,
            name=podspec.pod_name_prefix(node_name, test_name) if target else f"cv-{test_name.replace('_', '-')}",
            random_name_suffix=True,
            in_cluster=kwargs.pop("in_cluster", None),
            get_logs=True,
            log_events_on_failure=True,
            on_finish_action="delete_pod",
            on_kill_action="delete_pod",
            termination_message_policy="FallbackToLogsOnError",
            schedule_timeout_seconds=s.pending_timeout_s,
            startup_timeout_seconds=s.pending_timeout_s,
            startup_check_interval_seconds=min(5, s.availability_check_s),
            deferrable=False,
            do_xcom_push=False,
            log_formatter=self._capture_log_line,
            **kwargs,
        )
        if target is not None:
            self._apply(target)
        self._fresh_state()

    def _fresh_state(self) -> None:
        """What one try learns about its pod. Set again when a try starts: a task of a mapped group is one
        operator, shallow-copied per instance, so mutable state must never be shared between instances."""
        self._log_tail: collections.deque[str] = collections.deque(maxlen=pod_lifecycle.LOG_TAIL_LINES)
        self._final_pod: dict[str, Any] | None = None
        self._pod_vanished = False
        self._reached_running = False
        self._recorded = False
        self._context = None
        self._pending_events: str | None = None  # the scheduler's last word before our deletion
        self._api_deadline = float("inf")  # when calls on our pod stop retrying (execute sets it)
        self._interrupted: str | None = None  # the API error that cut off the wait for our pod
        self._unread: str | None = None  # why the pod's final state could not be read
        self._kept: str | None = None  # why the pod is kept for the next run's reaper (not judged)
        self._pod_try: int | None = None  # the try that created the pod we adopted (a re-run)

    def _apply(self, target: Validation) -> None:
        """The pair this task validates. Mapped tasks are built, and bundle steps rendered, at run time
        from the run's settings (the Variable included), so the task timeout and the pod's deadline come
        from the same numbers."""
        self.node_name = target.node_name
        self.test_name = target.test_name
        self.gpu_count = target.gpu_count
        self.gpu_model = target.gpu_model
        self.node_gpus = target.node_gpus
        self.probe_seconds = target.probe_seconds
        self.planned_at = target.planned_at
        self.why = target.why
        self.run_config = target.run_config
        self.cd_settings = s = self.run_config.settings
        self.namespace = s.namespace
        self.name = podspec.pod_name_prefix(target.node_name, target.test_name)
        self.execution_timeout = dt.timedelta(seconds=s.task_timeout_s(target.test_name))
        self.schedule_timeout_seconds = self.startup_timeout_seconds = s.pending_timeout_s
        self.startup_check_interval_seconds = min(5, s.availability_check_s)

    # ------------------------------------------------------------------ one step of a node's bundle
    def _do_render_template_fields(self, parent, template_fields, context, jinja_env, seen_oids) -> None:
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)
        if parent is self and self.bundle is not None and self._bundle is None:
            self._apply_bundle(self.bundle)

    def _apply_bundle(self, value: Any) -> None:
        """The bundle this step belongs to, as rendered (the group's mapped argument, an XCom of
        ship_suites): this step validates its node with ``test_name``, if the bundle plans it."""
        self._bundle = Bundle.from_xcom(value)
        self._apply(self._bundle.validation(self.test_name))

    def _bundle_gate(self, context) -> None:
        """Before a step of a bundle: not planned on this node → skipped, no row; an earlier step stopped
        the bundle (health failed, a user took the node, no pod could start) → recorded ``skipped`` with
        that cause, no pod; else this step's queue time counts from the end of the previous one."""
        if self._bundle.step(self.test_name) is None:
            raise AirflowSkipException(f"{self.node_name} · {self.test_name}: not planned in this run "
                                       f"(this node runs {', '.join(self._bundle.tests)})")
        previous = []
        if self.steps_before:
            pulled = context["ti"].xcom_pull(task_ids=list(self.steps_before), key="attempt",
                                             map_indexes=context["ti"].map_index)
            previous = [_attempt_or_none(item) for item in (pulled if isinstance(pulled, list) else [pulled])]
        cause = steps.stop_cause(previous)
        if cause:
            raise Ended(Status.SKIPPED, f"{cause}; no pod created")
        # The max queue time guards a stale decision while waiting for a pool slot; the steps before
        # this one were the node's own work, so the wait counts from when the last of them ended.
        self.planned_at = steps.ready_at(self._bundle.planned_at, previous)
        waited = (dt.datetime.now(dt.UTC) - self.planned_at).total_seconds()
        if waited >= POOL_WAIT_NOTE_S:
            self.log.info("waited %s for a slot of pool %s since %s (the pool limits how many validation "
                          "pods run at once; a node's later steps go before other nodes' first ones)",
                          _duration(waited), self.pool, self.planned_at.isoformat(timespec="seconds"))

    @cached_property
    def client(self):
        """The provider's client, every call retried until this try's deadline (``retry.own_pod``): the
        provider's PodManager creates, waits for, reads and deletes our pod through it."""
        return retry.own_pod(KubernetesPodOperator.client.func(self), lambda: self._api_deadline)

    @property
    def guard_client(self):
        """The same client for our own guard calls, under a shorter bound: they run beside the provider's
        wait for the pod, which bounds the try."""
        return retry.with_policy(self.client, retry.GUARD_POLICY)

    def _api_time_s(self) -> float:
        """How long this try's calls on its pod may keep retrying: its execution_timeout less what it keeps
        for the last reads and for recording."""
        timeout = self.execution_timeout.total_seconds() if self.execution_timeout else 3600.0
        return max(0.0, timeout - min(API_RESERVE_S, self.cd_settings.task_margin_s / 2))

    # ------------------------------------------------------------------ pod request
    def build_pod_request_obj(self, context=None, *, dry_run: bool = False):
        ti_run_id = context["run_id"] if context else "dry-run"
        self.pod_template_dict = podspec.build_pod(
            self.cd_settings,
            node_name=self.node_name,
            test_name=self.test_name,
            gpu_count=self.gpu_count,
            gpu_model=self.gpu_model,
            node_gpus=self.node_gpus,
            probe_seconds=self.probe_seconds,
            run_id=ti_run_id,
            configmap=self.run_config.configmap,
            suite_version=self.run_config.suite_version,
            suite_files=self.run_config.suite_files,
        )
        return super().build_pod_request_obj(context, dry_run=dry_run)

    def _capture_log_line(self, container_name: str, line: str) -> str:
        self._log_tail.append(line)
        return f"[{container_name}] {line}"

    # ------------------------------------------------------------------ execute
    def execute(self, context):
        self._fresh_state()
        self._context = context  # on_kill records the attempt under this try's identity
        self._api_deadline = time.monotonic() + self._api_time_s()
        if self._bundle is not None and self._bundle.step(self.test_name) is None:
            self._bundle_gate(context)  # not planned on this node: skipped, nothing recorded
        try:
            earlier = self.find_pod(self.namespace, context=context)
            if self._bundle is not None and earlier is None:
                self._bundle_gate(context)
            adopted = self._adopt(earlier) if earlier is not None else None
            if adopted is not None:
                return self._finish(context, adopted)
            started = dt.datetime.now(dt.UTC)
            if earlier is None:  # no pod to reattach to
                self._precheck(started)
            super().execute(context)
            outcome = self._judge()
        except (Exception, AirflowTaskTimeout) as exc:
            timeout = provider_errors.find(exc, AirflowTaskTimeout)
            if timeout is not None:
                # Recorded before Airflow's timeout handling calls on_kill and fails the task.
                self._record(context, self._timed_out())
                raise timeout from None
            outcome = self._outcome_of(exc)
        return self._finish(context, outcome)

    def _timed_out(self) -> results.PodOutcome:
        """The execution_timeout fired. The pod's own deadline ends a suite that overruns before it, so
        this try's calls on the API were stuck: a pod that ran is kept for the next run's reaper (on_kill
        leaves it), one that never started is deleted."""
        if self._reached_running and self.pod is not None:
            self._kept = "the validation task hit its execution_timeout"
            return self._not_judged()
        return results.PodOutcome(Status.TIMEOUT, "the validation task hit its execution_timeout; pod deleted")

    def _adopt(self, earlier) -> results.PodOutcome | None:
        """A pod of this task already exists: an earlier try's (Airflow ran the task again after losing
        it) or this try's own after a worker restart. Never a second validation: the attempt takes that
        pod's try; a pod still running is reattached to by the provider (None here), one that ended is
        judged now from its final state, then deleted."""
        labels = earlier.metadata.labels or {}
        try:
            self._pod_try = int(labels.get("try_number"))
        except (TypeError, ValueError):
            self._pod_try = None
        phase = getattr(earlier.status, "phase", None)
        self.log.warning("pod %s of try %s of this task exists (%s): adopted, no new pod is created",
                         earlier.metadata.name, labels.get("try_number", "?"), phase)
        if phase not in pod_lifecycle.TERMINAL:
            return None
        self.pod, self._reached_running = earlier, True
        self._final_pod = ApiClient().sanitize_for_serialization(earlier)
        self._log_tail.extend(pod_lifecycle.read_log_tail(self.client, self.namespace, earlier.metadata.name,
                                                          self.log))
        outcome = self._judge()
        try:
            self.pod_manager.delete_pod(earlier)
        except Exception as exc:  # the next run's reaper deletes it
            self.log.warning("could not delete the adopted pod %s: %s", earlier.metadata.name,
                             api_errors.describe(exc))
        return outcome

    def _judge(self) -> results.PodOutcome:
        if self._kept is not None:
            return self._not_judged()
        return pod_lifecycle.collect(self._final_pod if not self._pod_vanished else None, self.cd_settings,
                                     node_name=self.node_name, test_name=self.test_name, log_tail=self._log_tail)

    def _not_judged(self) -> results.PodOutcome:
        name = self.pod.metadata.name if self.pod is not None else "?"
        return results.PodOutcome(Status.SKIPPED, not_judged(
            f"the suite's result could not be read: {self._kept}; pod {name} kept, the next run records its "
            "result from it"))

    def _outcome_of(self, exc: BaseException) -> results.PodOutcome:
        """What an exception out of the provider's lifecycle (or our additions to it) means."""
        ended = provider_errors.find(exc, Ended)
        if ended is not None:
            return results.PodOutcome(ended.status, ended.reason)
        if self._kept is not None:
            return self._not_judged()
        explained = provider_errors.explain(exc)
        kind = explained.kind
        if kind in (provider_errors.API_ERROR, provider_errors.OTHER) and self._pod_ended():
            # The pod ended and its final state was read: the termination message and the pod status
            # are the truth, an API error on the way (pods/log proxied to an unreachable kubelet: 500)
            # never changes the verdict. The provider's "Pod ... returned a failure" lands here too.
            outcome = self._judge()
            if kind == provider_errors.API_ERROR:
                outcome.reason = f"{outcome.reason or ''} (pod log unavailable: {explained.message})".strip()
            return outcome
        if kind == provider_errors.LAUNCH_TIMEOUT:
            return results.PodOutcome(
                Status.TIMEOUT, f"the pod was still Pending after {self.cd_settings.pending_timeout_s} s; pod deleted"
                + self._last_scheduling_message())
        if kind == provider_errors.LAUNCH_FAILED:
            return results.PodOutcome(Status.TIMEOUT, f"the pod could not start: {explained.message}")
        if kind == provider_errors.POD_GONE and self._reached_running:
            return pod_lifecycle.vanished(reached_running=True)
        if kind == provider_errors.POD_GONE and self.pod is not None:
            # Removed while Pending: the scheduler preempted it for a higher-priority pod (before
            # Kubernetes 1.26 only a Preempted event says so) or someone deleted it. The suite never ran.
            return pod_lifecycle.vanished(reached_running=False, while_pending=(
                self._last_event_message("Preempted") or " (no preemption event)"))
        # An orchestration failure says nothing about the node: never error, the pair stays due.
        return results.PodOutcome(Status.SKIPPED, f"{ORCHESTRATION}: {explained.message}")

    def _precheck(self, started: dt.datetime) -> None:
        waited = (started - self.planned_at).total_seconds()
        if waited > self.cd_settings.max_queue_s:
            raise Ended(Status.SKIPPED, f"the decision is {_duration(waited)} old, over the max queue time of "
                                        f"{_duration(self.cd_settings.max_queue_s)}; no pod created")
        pod_lifecycle.ensure_free(self.guard_client, self.node_name, self.cd_settings)

    # ------------------------------------------------------------------ while Pending
    def await_pod_start(self, pod) -> None:
        """The provider's wait, unchanged (schedule/startup timeouts, early-failure detection, events
        logged on failure), with ``_PendingWatch`` beside it."""
        watch = _PendingWatch(self, pod)
        watch.start()
        try:
            super().await_pod_start(pod)
        except Exception as exc:
            watch.stop()
            self._interrupted = _api_trouble(exc)
            self._keep_pending_events()  # the provider's timeout: its cleanup deletes the pod next
            self._raise_if_watched(watch, exc)
            if isinstance(exc, PodLaunchFailedException):
                self._raise_if_disrupted(pod, exc)
            raise
        watch.stop()
        self._raise_if_watched(watch, None)
        self._reached_running = True

    def _raise_if_watched(self, watch: _PendingWatch, cause: BaseException | None) -> None:
        watched = watch.watched
        if watched is not None and watched.problem is not None:
            raise Ended(Status.SKIPPED, f"{watched.problem.describe()}: the wait for our Pending pod ended "
                                        "at once; pod deleted") from cause
        if watched is not None:
            raise Ended(Status.PREEMPTED, "a user pod claimed the node while ours was Pending: "
                                          f"{watched.claimed_by}") from cause
        if watch.timed_out:
            raise PodLaunchTimeoutException(f"still Pending after {self.cd_settings.pending_timeout_s} s") from cause

    def _keep_pending_events(self) -> None:
        """The pod's last Warning event as it is now, once: the cause of a pending timeout. Read before
        the pod is deleted, so the events the deletion itself causes are never taken for the cause."""
        if self._pending_events is None:
            self._pending_events = self._last_event_message()

    def _raise_if_disrupted(self, pod, cause: BaseException) -> None:
        """A pod Failed before its container started may have been preempted or evicted: not a launch problem."""
        try:
            final = ApiClient().sanitize_for_serialization(self.pod_manager.read_pod(pod))
        except Exception:
            return
        disrupted = results.classify(final, node_name=self.node_name, test_name=self.test_name,
                                      now=dt.datetime.now(dt.UTC))
        if disrupted.status == Status.PREEMPTED:
            raise Ended(Status.PREEMPTED, disrupted.reason) from cause

    def _last_scheduling_message(self) -> str:
        return self._pending_events if self._pending_events is not None else self._last_event_message()

    def _last_event_message(self, reason: str | None = None) -> str:
        """The pod's last Warning event (or last event with ``reason``), whole: the scheduler's
        message lists every filter and the end of it matters."""
        if self.pod is None:
            return ""
        try:
            events = self.pod_manager.read_pod_events(self.pod).items
        except Exception:
            return ""
        chosen = [e for e in events if (e.reason == reason if reason else e.type == "Warning")]
        if not chosen:
            return ""
        last = chosen[-1]
        return f" (last event {last.reason}: {results.clean_text(last.message or '', results.MAX_REASON)})"

    def _pod_ended(self) -> bool:
        return not self._pod_vanished and pod_lifecycle.phase(self._final_pod) in pod_lifecycle.TERMINAL

    # ------------------------------------------------------------------ after the run
    def await_pod_completion(self, pod):
        """The provider's wait (the log streamed, then the container's end), noting an API error that cut
        it off: the suite may still be running, and its result will be in the pod."""
        try:
            return super().await_pod_completion(pod)
        except Exception as exc:
            self._interrupted = _api_trouble(exc)
            raise

    def cleanup(self, pod, remote_pod, xcom_result=None, context=None) -> None:
        """The provider's cleanup (already-checked label, events on failure, deletion, its failure
        exception), given the pod's final state: on a failure path the provider still holds the pod as
        read at creation. The final state is kept for the verdict. A pod whose result this try could not
        read (see the module doc) is kept instead: no label, no deletion, the next run's reaper reads it."""
        if not self._killed and remote_pod is not None:
            remote_pod = self._read_final(remote_pod)
            self._kept = self._keep_reason(remote_pod)
            if self._kept is not None:
                self.log.warning("pod %s kept for the next run, which records its result: %s",
                                 remote_pod.metadata.name, self._kept)
                return
        super().cleanup(pod, remote_pod, xcom_result, context)

    def _read_final(self, remote_pod):
        """The pod's final state (read again unless the provider's copy is terminal already), kept for
        the verdict; ``_pod_vanished`` when it is gone, ``_unread`` when it could not be read."""
        if getattr(remote_pod.status, "phase", None) not in pod_lifecycle.TERMINAL:
            try:
                remote_pod = self.pod_manager.read_pod(remote_pod)
            except Exception as exc:
                if getattr(exc, "status", None) == 404:
                    self._pod_vanished = True
                else:
                    self._unread = api_errors.describe(exc)
                    self.log.warning("could not read the pod's final state: %s", self._unread)
                    return remote_pod
        if not self._pod_vanished:
            self._final_pod = ApiClient().sanitize_for_serialization(remote_pod)
            if getattr(remote_pod.status, "phase", None) not in (pod_lifecycle.PENDING, "Unknown", None):
                self._reached_running = True
        return remote_pod

    def _keep_reason(self, remote_pod) -> str | None:
        """Why the pod must outlive this try (None: the provider deletes it): its final state could not be
        read, or an API error cut off the wait while the suite was running (its result will be there)."""
        if self._unread is not None:
            return f"its final state could not be read ({self._unread})"
        phase = getattr(remote_pod.status, "phase", None)
        if self._interrupted is not None and not self._pod_vanished and phase == pod_lifecycle.RUNNING:
            return f"the wait for it was cut off while it ran ({self._interrupted})"
        return None

    def on_kill(self) -> None:
        if self._kept is not None:
            self.on_kill_action = OnKillAction.KEEP_POD  # it holds the result the next run records
        super().on_kill()  # deletes the pod (unless kept)
        if not self._recorded and self._context is not None:
            outcome = results.PodOutcome(
                Status.SKIPPED, "the validation task was killed before the suite finished (DagRun timeout or a "
                           "manual stop); pod deleted")
            try:
                self._record(self._context, outcome)
            except Exception as exc:  # best effort: the record task fills any gap
                self.log.warning("could not record the killed attempt: %s", one_line(exc))

    # ------------------------------------------------------------------ recording
    def _attempt(self, context, outcome: results.PodOutcome) -> Attempt:
        ti = context["ti"] if context else None
        return results.to_attempt(
            outcome,
            node_name=self.node_name,
            test_name=self.test_name,
            now=dt.datetime.now(dt.UTC),
            gpu_count=self.gpu_count,
            gpu_model=self.gpu_model,
            suite_version=self.run_config.suite_version,
            pod_name=self.pod.metadata.name if self.pod is not None else None,
            dag_id=ti.dag_id if ti else self.dag_id,
            run_id=ti.run_id if ti else "",
            map_index=ti.map_index if ti else -1,
            # one row per pod: an adopted pod's attempt is the try that created it (a re-run of a lost task)
            try_number=self._pod_try if self._pod_try is not None else (ti.try_number if ti else 1),
        )

    def _write(self, attempt: Attempt) -> None:
        """Straight to the results DB. An adopted pod's try may hold a not-judged row: it becomes this."""
        from cluster_doctor.airflow.runtime import results_store

        store = results_store(self.cd_settings.validation_db_conn_id, retry=DIRECT_WRITE_RETRY)
        if self._pod_try is not None:
            store.record_over_placeholder(attempt)
        else:
            store.record([attempt])

    def _record(self, context, outcome: results.PodOutcome) -> Attempt:
        """XCom first (the record task's source, so it never adds a second row for this try), then
        the results DB directly; both keyed by the try's identity."""
        attempt = self._attempt(context, outcome)
        self._recorded = True
        context["ti"].xcom_push(key="attempt", value=attempt.to_dict())
        try:
            self._write(attempt)
        except Exception as exc:  # the record task writes it from XCom, with longer retries
            self.log.warning("results DB write deferred to the record task: %s", one_line(exc))
        return attempt

    def _finish(self, context, outcome: results.PodOutcome):
        attempt = self._record(context, outcome)
        status = attempt.status  # what was recorded, after the boundary's checks
        headline = f"{self.node_name} · {self.test_name}: {str(status).upper()}"
        if attempt.reason:
            headline += f" — {attempt.reason}"
        if status == Status.PASS:
            self.log.info(headline)
            return attempt.to_dict()
        if status in EXECUTED:
            # one log record, so the block reads as a whole in the UI, before anything else of the end
            self.log.error("%s", "\n".join(results.verdict_block(attempt, outcome.summary)))
            raise VerdictFailed(headline)
        if status == Status.TIMEOUT and (attempt.reason or "").startswith("the pod could not start"):
            # An image or configuration problem, not the node: make it red so someone fixes it.
            self.log.error(headline)
            raise VerdictFailed(headline)
        self.log.warning(headline)
        raise AirflowSkipException(headline)


def _attempt_or_none(item: Any) -> Attempt | None:
    """An earlier step's attempt from XCom (None: not planned, or never reported)."""
    try:
        return Attempt.from_dict(item) if item else None
    except InvalidAttempt:
        return None


def _api_trouble(exc: BaseException) -> str | None:
    """One line when ``exc`` is the Kubernetes API failing (an answer other than 404, a lost connection,
    the retries given up), else None (our own stop, a launch problem, the pod gone)."""
    if provider_errors.find(exc, Ended, PodLaunchTimeoutException, PodLaunchFailedException) is not None:
        return None
    explained = provider_errors.explain(exc)
    if explained.kind == provider_errors.API_ERROR:
        return explained.message
    found = provider_errors.find(exc, *retry.CONNECTION_ERRORS)
    if found is not None or type(exc).__name__ == "KubernetesApiException":
        return one_line(found or exc, 300)
    return None


def _as_list(callbacks: Any) -> list:
    if not callbacks:
        return []
    return list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]




def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
