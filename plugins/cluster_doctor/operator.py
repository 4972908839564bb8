"""NodeValidationPodOperator: one validation pod pinned to one node, and the truth about how it ended.

A subclass of the provider's KubernetesPodOperator (sync mode): the provider creates the pod, streams
its log into the task log, reattaches after a worker restart (durable) and deletes the pod on every
path (``on_finish_action="delete_pod"``, ``on_kill``). This class adds what validation needs:

* before the pod exists: the decision is not older than the max queue time and the node is still
  free, else no pod and the attempt is ``skipped``;
* while Pending: every availability interval, whether a user pod claimed the node (ours is deleted:
  ``preempted``), and a pending timeout (pod deleted: ``timeout``, with the scheduler's last word);
* after the run: the suite's summary from the termination message, checked against the pod's exit
  code and final state (evicted or preempted while running is ``preempted``, never ``fail``);
* exactly one attempt record per try, whatever happened, pushed to XCom for the record task and
  written straight to the results DB as well (idempotent on the attempt identity).

Task states: pass -> success; fail or error -> failed, failing checks at the end of the log;
timeout, preempted, skipped -> skipped with the reason. No automatic retries: the next hour re-plans.
"""

from __future__ import annotations

import collections
import datetime as dt
import time
from collections.abc import Mapping
from typing import Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.utils.pod_manager import (
    PodLaunchTimeoutException,
    PodPhase,
    detect_pod_terminate_early_issues,
)
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from cluster_doctor import discovery, podspec, results, suites
from cluster_doctor.attempts import Attempt, parse_timestamp
from cluster_doctor.config import Settings
from cluster_doctor.nodes import validate_node_name
from cluster_doctor.store import RetryPolicy

try:  # moved between provider versions
    from airflow.providers.cncf.kubernetes.exceptions import PodLaunchFailedException
except ImportError:  # pragma: no cover
    from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchFailedException

LOG_TAIL_LINES = 200
# A short budget inside the pool slot; the record task retries longer.
DIRECT_WRITE_RETRY = RetryPolicy(attempts=2, initial_delay_s=1.0)


class NodeClaimed(Exception):
    """A user pod claimed the node while ours was Pending."""


class _Ended(Exception):
    """Internal: the attempt ended with ``status`` before (or instead of) a suite result."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class NodeValidationPodOperator(KubernetesPodOperator):
    """Validate one node with one suite. Mapped with ``expand_kwargs`` over the run's plan."""

    ui_color = "#d4f1d4"

    def __init__(
        self,
        *,
        node_name: str,
        test_name: str,
        gpu_count: int,
        gpu_model: str | None = None,
        planned_at: str,
        why: str | None = None,
        run_config: Mapping[str, Any],
        **kwargs: Any,
    ) -> None:
        validate_node_name(node_name)
        suites.get(test_name)
        self.node_name = node_name
        self.test_name = test_name
        self.gpu_count = int(gpu_count)
        self.gpu_model = gpu_model
        self.planned_at = planned_at
        self.why = why
        self.run_config = dict(run_config)
        self.cd_settings = Settings(**self.run_config["settings"])
        s = self.cd_settings
        kwargs.setdefault("kubernetes_conn_id", s.kubernetes_conn_id)
        super().__init__(
            namespace=s.namespace,
            name=podspec.pod_name_prefix(node_name, test_name),
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
        self._log_tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._final_pod: dict[str, Any] | None = None
        self._pod_vanished = False
        self._reached_running = False
        self._recorded = False
        self._context = None

    # ------------------------------------------------------------------ pod request
    def build_pod_request_obj(self, context=None, *, dry_run: bool = False):
        ti_run_id = context["run_id"] if context else "dry-run"
        self.pod_template_dict = podspec.build_pod(
            self.cd_settings,
            node_name=self.node_name,
            test_name=self.test_name,
            gpu_count=self.gpu_count,
            gpu_model=self.gpu_model,
            run_id=ti_run_id,
            configmap=self.run_config["configmap"],
            suite_version=self.run_config["suite_version"],
            suite_files=self.run_config.get("suite_files"),
        )
        return super().build_pod_request_obj(context, dry_run=dry_run)

    def _capture_log_line(self, container_name: str, line: str) -> str:
        self._log_tail.append(line)
        return f"[{container_name}] {line}"

    # ------------------------------------------------------------------ execute
    def execute(self, context):
        started = dt.datetime.now(dt.UTC)
        self._context = context  # on_kill records the attempt under this try's identity
        outcome: results.PodOutcome | None = None
        try:
            if self.find_pod(self.namespace, context=context) is None:  # no pod to reattach to
                self._precheck(started)
            super().execute(context)
            outcome = results.classify(
                self._final_pod if not self._pod_vanished else None,
                node_name=self.node_name,
                test_name=self.test_name,
                log_tail=list(self._log_tail),
                run_budget_s=self.cd_settings.suite_timeout(self.test_name),
            )
        except _Ended as ended:
            outcome = results.PodOutcome(ended.status, ended.reason)
        except NodeClaimed as claimed:
            outcome = results.PodOutcome("preempted", f"a user pod claimed the node while ours was Pending: {claimed}")
        except PodLaunchFailedException as exc:
            outcome = results.PodOutcome("timeout", f"the pod could not start: {_one_line(exc)}")
        except PodLaunchTimeoutException as exc:
            outcome = results.PodOutcome("timeout", _one_line(exc))
        except ApiException as exc:
            if exc.status == 404 and self._reached_running:
                outcome = results.PodOutcome("preempted", "the pod disappeared while running (deleted or preempted)")
            else:
                outcome = self._orchestration_error(exc)
        except Exception as exc:
            # The provider wraps launch timeouts in a generic AirflowException: tell them apart.
            if isinstance(exc.__context__, PodLaunchTimeoutException):
                outcome = results.PodOutcome("timeout", _one_line(exc.__context__))
            elif _is_task_timeout(exc):
                reason = "the validation task hit its execution_timeout; pod deleted"
                outcome = results.PodOutcome("error" if self._reached_running else "timeout", reason)
                self._record(context, outcome, started)
                raise
            else:
                outcome = self._orchestration_error(exc)
        return self._finish(context, outcome, started)

    def _orchestration_error(self, exc: BaseException) -> results.PodOutcome:
        # An orchestration failure says nothing about the node: unless the suite was already running,
        # record it as skipped so the pair stays due.
        status = "error" if self._reached_running else "skipped"
        return results.PodOutcome(status, f"orchestration error: {_one_line(exc)}")

    def _precheck(self, started: dt.datetime) -> None:
        planned = parse_timestamp(self.planned_at, "planned_at")
        waited = (started - planned).total_seconds()
        if waited > self.cd_settings.max_queue_s:
            raise _Ended("skipped", f"the decision is {_duration(waited)} old, over the max queue time of "
                                    f"{_duration(self.cd_settings.max_queue_s)}; no pod created")
        holders = discovery.node_gpu_pods(self.client, self.node_name, self.cd_settings.gpu_resource)
        if holders:
            raise _Ended("skipped", f"the node is no longer free ({holders[0]}); no pod created")
        node = self.client.read_node(self.node_name)
        if node.spec and node.spec.unschedulable:
            raise _Ended("skipped", "the node was cordoned after planning; no pod created")

    # ------------------------------------------------------------------ while Pending
    def await_pod_start(self, pod) -> None:
        """Wait for the pod to leave Pending, re-checking the node's availability on the way."""
        s = self.cd_settings
        start = time.monotonic()
        next_check = start + s.availability_check_s
        interval = self.startup_check_interval_seconds
        while True:
            remote = self.pod_manager.read_pod(pod)
            phase = remote.status.phase
            if phase == PodPhase.FAILED and not remote.status.container_statuses:
                self._final_pod = ApiClient().sanitize_for_serialization(remote)
                disrupted = results.classify(self._final_pod, node_name=self.node_name, test_name=self.test_name)
                if disrupted.status == "preempted":
                    raise _Ended("preempted", disrupted.reason)
                raise PodLaunchFailedException(f"pod failed before its container started: {remote.status.reason}")
            if phase not in (PodPhase.PENDING, "Unknown"):
                self._reached_running = True
                self.log.info("Pod %s is %s on %s", pod.metadata.name, phase, self.node_name)
                return
            problem = detect_pod_terminate_early_issues(remote)
            if problem:
                raise PodLaunchFailedException(problem)
            now = time.monotonic()
            if now >= next_check:
                holders = discovery.node_gpu_pods(self.client, self.node_name, s.gpu_resource,
                                                  exclude_pod=pod.metadata.name)
                if holders:
                    raise NodeClaimed(holders[0])
                self.log.info("Still Pending after %.0f s; %s is still free of other GPU pods",
                              now - start, self.node_name)
                next_check = now + s.availability_check_s
            if now - start >= s.pending_timeout_s:
                raise PodLaunchTimeoutException(
                    f"the pod was still Pending after {s.pending_timeout_s} s; pod deleted"
                    + self._last_scheduling_message(pod)
                )
            time.sleep(min(interval, max(0.05, s.pending_timeout_s - (now - start))))

    def _last_scheduling_message(self, pod) -> str:
        try:
            events = self.pod_manager.read_pod_events(pod).items
        except Exception:
            return ""
        warnings = [e for e in events if e.type == "Warning"]
        if not warnings:
            return ""
        last = warnings[-1]
        return f" (last event {last.reason}: {_one_line(last.message)})"

    # ------------------------------------------------------------------ after the run
    def cleanup(self, pod, remote_pod, xcom_result=None, context=None) -> None:
        """Read the pod's final state, then delete it. Never raises: the outcome is decided in execute."""
        if self._killed or not remote_pod:
            return
        try:
            final = self.pod_manager.read_pod(remote_pod)
            self._final_pod = ApiClient().sanitize_for_serialization(final)
            if final.status and final.status.phase not in (PodPhase.PENDING, "Unknown", None):
                self._reached_running = True
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._pod_vanished = True
        self.process_pod_deletion(remote_pod, reraise=False)

    def on_kill(self) -> None:
        super().on_kill()  # deletes the pod
        if not self._recorded and self._context is not None:
            outcome = results.PodOutcome(
                "skipped", "the validation task was killed before the suite finished (DagRun timeout or a "
                           "manual stop); pod deleted")
            try:
                self._write(self._attempt(self._context, outcome, dt.datetime.now(dt.UTC)))
            except Exception as exc:  # best effort: the record task fills any gap
                self.log.warning("could not record the killed attempt: %s", _one_line(exc))

    # ------------------------------------------------------------------ recording
    def _attempt(self, context, outcome: results.PodOutcome, started: dt.datetime) -> Attempt:
        summary = outcome.summary or {}
        finished = outcome.finished_at or dt.datetime.now(dt.UTC)
        began = outcome.started_at
        duration = summary.get("duration_s")
        if duration is None and began is not None:
            duration = max(0.0, (finished - began).total_seconds())
        ti = context["ti"] if context else None
        if outcome.status in ("pass", "fail", "error"):
            metrics, checks = summary.get("metrics") or {}, summary.get("checks") or []
        else:
            metrics, checks = {}, []
        return Attempt(
            node_name=self.node_name,
            test_name=self.test_name,
            status=outcome.status,
            started_at=began,
            finished_at=finished,
            duration_s=duration,
            metrics=metrics if isinstance(metrics, Mapping) else {},
            checks=checks if isinstance(checks, list) else [],
            reason=outcome.reason,
            log_path=summary.get("log_path"),
            pod_name=self.pod.metadata.name if self.pod is not None else None,
            gpu_model=summary.get("gpu_model") or self.gpu_model,
            gpu_count=self.gpu_count,
            suite_version=summary.get("suite_version") or self.run_config.get("suite_version"),
            dag_id=ti.dag_id if ti else self.dag_id,
            run_id=ti.run_id if ti else "",
            map_index=ti.map_index if ti else -1,
            try_number=ti.try_number if ti else 1,
        )

    def _write(self, attempt: Attempt) -> None:
        from cluster_doctor.airflow_support import results_store

        results_store(self.cd_settings.validation_db_conn_id, retry=DIRECT_WRITE_RETRY).record([attempt])

    def _record(self, context, outcome: results.PodOutcome, started: dt.datetime) -> Attempt:
        attempt = self._attempt(context, outcome, started)
        context["ti"].xcom_push(key="attempt", value=attempt.to_dict())
        self._recorded = True
        try:
            self._write(attempt)
        except Exception as exc:  # the record task writes it from XCom, with longer retries
            self.log.warning("results DB write deferred to the record task: %s", _one_line(exc))
        return attempt

    def _finish(self, context, outcome: results.PodOutcome, started: dt.datetime):
        attempt = self._record(context, outcome, started)
        headline = f"{self.node_name} · {self.test_name}: {outcome.status.upper()}"
        if outcome.reason:
            headline += f" — {outcome.reason}"
        if outcome.status == "pass":
            self.log.info(headline)
            return attempt.to_dict()
        if outcome.status in ("fail", "error"):
            for line in results.failing_checks(outcome.summary):
                self.log.error("  %s", line)
            self.log.error(headline)
            raise AirflowFailException(headline)
        if outcome.status == "timeout" and (outcome.reason or "").startswith("the pod could not start"):
            # An image or configuration problem, not the node: make it red so someone fixes it.
            self.log.error(headline)
            raise AirflowFailException(headline)
        self.log.warning(headline)
        raise AirflowSkipException(headline)


def _one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())[:400]


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _is_task_timeout(exc: BaseException) -> bool:
    return type(exc).__name__ == "AirflowTaskTimeout"
