"""Every Kubernetes API call Cluster Doctor makes, retried on transient failures (tenacity).

A 429 (waiting at least its Retry-After), a 5xx other than 501, or a lost connection (reset,
refused, timed out) is retried with exponential backoff and jitter, bounded in attempts and in total
time, so a flaky apiserver never eats a task's execution_timeout. A 401/403 is transient only while
the apiserver is coming back: within ``RECOVERY_S`` of a call that could not reach it, or while its
``/readyz`` fails (a restarted apiserver refuses every request for a few seconds until its authorizer
is ready); otherwise it is an authorisation error, the caller's at once (``api_errors.describe`` names
the missing permission). Anything else (404, 409, 422 ...) is the caller's at once. Each retry is
logged once at WARNING with its one-line cause; giving up raises ``GaveUp`` (an ApiException with the
last status, and a one-line message) or the last connection error.

Callers get a ``Retrying`` proxy in place of the API object, so call sites stay as they are: every
public method is retried. A create is not idempotent: when it is retried after an answer that may
have taken effect (a 5xx or a lost connection, not a 429) and then refused with 409 AlreadyExists,
the existing object is read back and returned (our own earlier attempt, most likely; the objects we
create are named after their content).

``core_v1`` builds the client the callers get from the provider's (or kubeconfig's) ApiClient, with
urllib3's own status retries off: urllib3 would otherwise sleep on a 429/503 Retry-After itself,
unbounded, and answer MaxRetryError instead of the status. urllib3 still re-sends an idempotent
request at once when a pooled connection turns out dead.

``own_pod`` is the client a validation task drives its own pod with (the provider's PodManager goes
through it): not bounded per call but by a deadline, the task's remaining time less what it keeps for
recording. Past the deadline a failing call raises ``OutOfTime``, whose status is None so the
provider's own retry (429/5xx) does not start over: the task then keeps the pod and records the
attempt as not judged (``domain.attempts.NOT_JUDGED``).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import email.utils
import http.client
import json
import logging
import time
import threading
from collections.abc import Callable, Mapping
from typing import Any

import tenacity
import urllib3
from kubernetes.client.exceptions import ApiException

from cluster_doctor.kube.api import CoreV1
from cluster_doctor.kube.api_errors import describe

log = logging.getLogger(__name__)

# urllib3's connection errors and the stdlib's (RemoteDisconnected is a ConnectionResetError)
CONNECTION_ERRORS = (urllib3.exceptions.ProtocolError, urllib3.exceptions.MaxRetryError,
                     urllib3.exceptions.TimeoutError, ConnectionError, http.client.IncompleteRead, TimeoutError)


# A 401/403 this soon after the apiserver could not be reached is the apiserver starting, not a refusal.
RECOVERY_S = 30.0
READYZ_TIMEOUT_S = 5.0


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6  # tries in all, the first included
    initial_s: float = 0.5  # first backoff; doubles per retry, plus up to as much jitter
    max_wait_s: float = 10.0  # longest backoff (a longer Retry-After is still honoured)
    total_s: float = 60.0  # no retry starts once the call has spent this long, waits included
    not_retried: frozenset[int] = frozenset()  # statuses left to the caller at once
    read_body: bool = True  # a _preload_content=False answer's body is read inside the retry (not a stream)

    def __post_init__(self) -> None:
        if self.attempts < 1 or min(self.initial_s, self.max_wait_s, self.total_s) < 0:
            raise ValueError(f"invalid retry policy {self}: attempts >= 1 and non-negative times")


DEFAULT_POLICY = RetryPolicy()
# the operator's guard calls run in a pool slot, beside the provider's own wait for the pod: shorter
GUARD_POLICY = RetryPolicy(attempts=4, max_wait_s=5.0, total_s=20.0)
# a read whose answer is nice to have (an orphan's log tail from a kubelet that may be gone)
BEST_EFFORT_POLICY = RetryPolicy(attempts=2, max_wait_s=2.0, total_s=5.0)
# a task's calls on its own pod: bounded by the task's deadline (own_pod), not per call
OWN_POD_POLICY = RetryPolicy(attempts=1_000_000, initial_s=0.5, max_wait_s=10.0, total_s=float("inf"))
# ... but its log: a 500 there is the kubelet behind pods/log, unreachable (the provider retries it a few
# times itself, and the log is only a help: the result is in the termination message); a followed log
# is a stream its reader consumes
OWN_POD_LOG_POLICY = dataclasses.replace(OWN_POD_POLICY, not_retried=frozenset({500}), read_body=False)
OWN_POD_METHODS = {"read_namespaced_pod_log": OWN_POD_LOG_POLICY}


class ApiHealth:
    """When this process last failed to reach the apiserver (a lost or refused connection): a 401/403
    soon after is the apiserver starting (``RECOVERY_S``). One per process: there is one apiserver."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock, self._lock = clock, threading.Lock()
        self._unreachable_at: float | None = None

    def unreachable(self) -> None:
        with self._lock:
            self._unreachable_at = self._clock()

    def recovering(self) -> bool:
        with self._lock:
            return self._unreachable_at is not None and self._clock() - self._unreachable_at < RECOVERY_S

    def reset(self) -> None:
        with self._lock:
            self._unreachable_at = None


HEALTH = ApiHealth()


# Set by ``streamed()``: the caller reads the body itself as it arrives (kube.listing), so the body of
# a ``_preload_content=False`` answer is not read inside the retry (that would hold a whole list in
# memory). A connection lost mid-body then reaches the caller, which starts its read over.
_STREAMED: contextvars.ContextVar[bool] = contextvars.ContextVar("cluster_doctor_streamed", default=False)


@contextlib.contextmanager
def streamed():
    """Calls made inside return their ``_preload_content=False`` answers unread: the caller streams them."""
    token = _STREAMED.set(True)
    try:
        yield
    finally:
        _STREAMED.reset(token)


class GaveUp(ApiException):
    """The last transient answer of a call that ran out of retries: same status, reason, body and
    headers (so ``status`` checks still work), one line as ``str()``."""

    def __init__(self, last: ApiException, message: str):
        super().__init__(status=last.status, reason=last.reason)
        self.body, self.headers, self.message = last.body, last.headers, message

    def __str__(self) -> str:
        return self.message


class OutOfTime(GaveUp):
    """A call on the task's own pod still failing at the task's deadline (``own_pod``). Its ``status``
    is None, so nobody retries it again (the provider retries 429/5xx); ``last_status``: the last
    answer's (None: the apiserver could not be reached)."""

    def __init__(self, last: BaseException, message: str):
        if isinstance(last, ApiException):
            super().__init__(last, message)
        else:
            ApiException.__init__(self, status=None, reason="Unreachable")
            self.body, self.headers, self.message = None, None, message
        self.last_status = getattr(last, "status", None) if isinstance(last, ApiException) else None
        self.status = None


def unreachable(exc: BaseException) -> bool:
    """The apiserver could not be reached (no answer): refused, reset, timed out."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(exc.reason, urllib3.exceptions.SSLError):
        return False  # a certificate problem does not go away by asking again
    return isinstance(exc, CONNECTION_ERRORS)


def transient(exc: BaseException, api: Any = None) -> bool:
    """Worth asking again: 429, 5xx but 501, a lost connection, and a 401/403 while the apiserver
    comes back (``starting``; ``api``: the API object whose /readyz may say so)."""
    if isinstance(exc, ApiException):
        if exc.status in (401, 403):
            return starting(api)
        return exc.status == 429 or (500 <= (exc.status or 0) <= 599 and exc.status != 501)
    return unreachable(exc)


def starting(api: Any = None) -> bool:
    """The apiserver is coming back: this process could not reach it within ``RECOVERY_S``, or its
    ``/readyz`` fails or cannot be reached (always authorised: ``--authorization-always-allow-paths``)."""
    if HEALTH.recovering():
        return True
    return ready(api) is False


def ready(api: Any) -> bool | None:
    """The apiserver's /readyz: True (200), False (an error status or no answer), None (no client
    to ask, or /readyz itself refused: it cannot say)."""
    client = getattr(api, "api_client", None)
    if client is None or not hasattr(client, "call_api"):
        return None
    try:
        client.call_api("/readyz", "GET", auth_settings=["BearerToken"], _preload_content=False,
                        _return_http_data_only=True, _request_timeout=READYZ_TIMEOUT_S)
    except ApiException as exc:
        return None if exc.status in (401, 403, 404) else False
    except CONNECTION_ERRORS:
        HEALTH.unreachable()
        return False
    except Exception:  # noqa: BLE001 - a probe: it cannot say
        return None
    return True


def retry_after(exc: BaseException) -> float:
    """Seconds the server asked us to wait: the Retry-After header (seconds or an HTTP date), else
    the Status's details.retryAfterSeconds; 0 when it says nothing."""
    if not isinstance(exc, ApiException):
        return 0.0
    header = exc.headers.get("Retry-After") if exc.headers else None
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            try:
                return max(0.0, email.utils.parsedate_to_datetime(header).timestamp() - time.time())
            except (TypeError, ValueError):
                pass
    try:
        details = (json.loads(exc.body).get("details") or {}) if exc.body else {}
        return max(0.0, float(details.get("retryAfterSeconds") or 0))
    except (ValueError, TypeError, AttributeError):
        return 0.0


def _status_reason(exc: ApiException) -> str | None:
    try:
        return json.loads(exc.body).get("reason") if exc.body else None
    except (ValueError, AttributeError):
        return None


def _object_name(body: Any) -> str | None:
    meta = body.get("metadata") if isinstance(body, dict) else getattr(body, "metadata", None)
    return meta.get("name") if isinstance(meta, dict) else getattr(meta, "name", None)


class Retrying:
    """A Kubernetes API object (CoreV1Api, StorageV1Api ...) whose public methods retry transient
    failures; every other attribute (``api_client``) is the wrapped object's. ``methods``: a policy of
    their own for some methods; ``deadline``: the monotonic time after which no retry starts and a call
    that still fails raises ``OutOfTime`` (``own_pod``)."""

    def __init__(self, api: Any, policy: RetryPolicy = DEFAULT_POLICY,
                 sleep: Callable[[float], None] = time.sleep, *,
                 deadline: Callable[[], float] | None = None, methods: Mapping[str, RetryPolicy] | None = None):
        self._api, self._policy, self._sleep = api, policy, sleep
        self._deadline, self._methods = deadline, dict(methods or {})

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._policy

    def __repr__(self) -> str:
        return f"Retrying({self._api!r}, {self._policy})"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._api, name)
        if name.startswith("_") or name == "api_client" or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, attr, args, kwargs)

        call.__name__ = name
        return call

    def _call(self, name: str, method: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        policy = self._methods.get(name, self._policy)
        maybe_applied = False  # an earlier attempt may have reached the server and taken effect

        def attempt() -> Any:
            nonlocal maybe_applied
            try:
                result = method(*args, **kwargs)
                if (kwargs.get("_preload_content") is False and policy.read_body and not _STREAMED.get()
                        and hasattr(result, "data")):
                    result.data  # noqa: B018 - read the body inside the retry: a reset mid-body is retried too
                return result
            except ApiException as exc:
                if (exc.status == 409 and maybe_applied and name.startswith("create_")
                        and _status_reason(exc) == "AlreadyExists"):
                    return self._read_back(name, args, kwargs, exc)
                if transient(exc) and exc.status not in (401, 403, 429):  # refused before anything happened
                    maybe_applied = True
                raise
            except CONNECTION_ERRORS as exc:
                if unreachable(exc):
                    HEALTH.unreachable()
                maybe_applied = True
                raise

        started = time.monotonic()
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda exc: self._retried(exc, policy)),
            stop=self._stop(policy), wait=self._wait(policy), sleep=self._sleep,
            before_sleep=lambda state: self._log_retry(name, policy, state),
            retry_error_callback=lambda state: self._give_up(name, state, started))
        return retrying(attempt)

    def _retried(self, exc: BaseException, policy: RetryPolicy) -> bool:
        return getattr(exc, "status", None) not in policy.not_retried and transient(exc, self._api)

    def _stop(self, policy: RetryPolicy) -> Any:
        stop = tenacity.stop_after_attempt(policy.attempts) | tenacity.stop_before_delay(policy.total_s)
        if self._deadline is not None:
            deadline = self._deadline

            def past_deadline(state: tenacity.RetryCallState) -> bool:
                return time.monotonic() + (state.upcoming_sleep or 0) >= deadline()

            stop = stop | past_deadline
        return stop

    @staticmethod
    def _wait(policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], float]:
        backoff = (tenacity.wait_exponential(multiplier=policy.initial_s, max=policy.max_wait_s)
                   + tenacity.wait_random(0, policy.initial_s))

        def wait(state: tenacity.RetryCallState) -> float:
            return max(backoff(state), retry_after(state.outcome.exception()))

        return wait

    @staticmethod
    def _log_retry(name: str, policy: RetryPolicy, state: tenacity.RetryCallState) -> None:
        tries = "" if policy.attempts >= OWN_POD_POLICY.attempts else f" of {policy.attempts}"
        exc = state.outcome.exception()
        why = " (the apiserver is coming back: unreachable just now, or /readyz fails)" if getattr(
            exc, "status", None) in (401, 403) else ""
        log.warning("Kubernetes API %s failed (try %d%s), retrying in %.1f s%s: %s", name,
                    state.attempt_number, tries, state.upcoming_sleep, why, describe(exc))

    def _give_up(self, name: str, state: tenacity.RetryCallState, started: float) -> Any:
        exc = state.outcome.exception()
        took = time.monotonic() - started
        what = f"{name}: gave up after {state.attempt_number} attempt(s) in {took:.1f} s"
        if self._deadline is not None and time.monotonic() + _next_wait(state) >= self._deadline():
            raise OutOfTime(exc, f"{describe(exc)} ({what}, the task's time for the API ran out)") from exc
        if isinstance(exc, ApiException):
            raise GaveUp(exc, f"{describe(exc)} ({what})") from exc
        exc.add_note(what)
        raise exc

    def _read_back(self, name: str, args: tuple, kwargs: dict, conflict: ApiException) -> Any:
        """The object a retried create found already there (``create_namespaced_x(ns, body)`` ->
        ``read_namespaced_x(name, ns)``); the 409 itself when it cannot be read."""
        body = kwargs.get("body", args[-1] if args else None)
        object_name = _object_name(body)
        reader = getattr(self._api, "read_" + name[len("create_"):], None)
        if not object_name or reader is None:
            raise conflict
        namespaced = name.startswith("create_namespaced_")
        namespace = kwargs.get("namespace", args[0] if namespaced and len(args) > 1 else None)
        extra = {k: v for k, v in kwargs.items() if k in ("_preload_content", "_request_timeout")}
        try:
            found = reader(object_name, namespace, **extra) if namespaced else reader(object_name, **extra)
        except Exception:
            raise conflict from None
        log.warning("Kubernetes API %s: %s already exists after a retried create (the earlier attempt took "
                    "effect); using it", name, object_name)
        return found


def _next_wait(state: tenacity.RetryCallState) -> float:
    return state.upcoming_sleep or 0.0


def wrap(api: Any, policy: RetryPolicy = DEFAULT_POLICY) -> Retrying:
    """``api`` with its calls retried (idempotent: a Retrying is returned as is)."""
    return api if isinstance(api, Retrying) else Retrying(api, policy)


def with_policy(api: Any, policy: RetryPolicy) -> Any:
    """The same API object retried under another bound (a plain API object stays as it is)."""
    return Retrying(api._api, policy, api._sleep) if isinstance(api, Retrying) else api


def sibling(core_v1: CoreV1, api_class: Callable[[Any], Any]) -> Any:
    """Another API group on the same client (``StorageV1Api``), retried like ``core_v1`` is."""
    api = api_class(core_v1.api_client)
    return Retrying(api, core_v1.retry_policy) if isinstance(core_v1, Retrying) else api


def own_pod(api: Any, deadline: Callable[[], float], sleep: Callable[[float], None] = time.sleep) -> Retrying:
    """The API a task drives its own pod with: every transient failure retried until ``deadline()``
    (``OWN_POD_POLICY``; its log under ``OWN_POD_LOG_POLICY``), then ``OutOfTime``. Over a copy of
    ``api``'s client whose urllib3 layer answers a 429/503 instead of sleeping on it (as ``core_v1``).
    ``sleep``: how it waits between tries."""
    inner = api._api if isinstance(api, Retrying) else api
    return Retrying(_status_answered(inner), OWN_POD_POLICY, sleep, deadline=deadline, methods=OWN_POD_METHODS)


def _status_answered(api: Any) -> Any:
    """``api`` (a kubernetes API class) over a client configured like its own, urllib3's status retries off."""
    api_client = getattr(api, "api_client", None)
    configuration = getattr(api_client, "configuration", None)
    if configuration is None:
        return api  # not a kubernetes client (a test double): as it is
    configuration = copy.deepcopy(configuration)
    configuration.retries = urllib3.Retry(total=3, respect_retry_after_header=False)
    return type(api)(type(api_client)(configuration=configuration))


def core_v1(api_client: Any, policy: RetryPolicy = DEFAULT_POLICY,
            sleep: Callable[[float], None] = time.sleep) -> Retrying:
    """The CoreV1Api our code gets, over a client like ``api_client`` (same class and configuration)
    whose urllib3 layer answers a 429/503 instead of sleeping on it (see the module doc). ``sleep``: how
    it waits between tries."""
    from kubernetes import client

    configuration = api_client.configuration
    configuration.retries = urllib3.Retry(total=3, respect_retry_after_header=False)
    return Retrying(client.CoreV1Api(type(api_client)(configuration=configuration)), policy, sleep)
