"""What an exception out of the KubernetesPodOperator means, decided in one place.

The provider runs the pod's lifecycle inside ``try/finally``: when waiting fails, its ``cleanup``
may raise its own "Pod ... returned a failure" on the way out, and the exception that says what
happened is then only the ``__context__`` of the one that reaches us. Exception classes also move
between provider versions (``PodLaunchFailedException`` did). So the operator never looks at
``type(exc).__name__`` or one ``__context__`` hop: it asks ``explain``, which walks the whole
cause/context chain and picks the most specific known exception by class, in ``PRIORITY`` order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchTimeoutException
from airflow.sdk.exceptions import AirflowTaskTimeout
from kubernetes.client.exceptions import ApiException

from cluster_doctor.domain.errors import one_line
from cluster_doctor.kube import api_errors
from cluster_doctor.kube.retry import GaveUp

try:  # provider >= 10.x keeps it here; older versions in pod_manager
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import PodLaunchFailedException
except ImportError:  # pragma: no cover
    from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchFailedException

# kinds, most specific first
TASK_TIMEOUT = "task_timeout"      # Airflow's execution_timeout fired (AirflowTaskTimeout)
LAUNCH_TIMEOUT = "launch_timeout"  # still Pending past the schedule/startup timeout
LAUNCH_FAILED = "launch_failed"    # cannot start: bad image, bad config, or failed before a container ran
POD_GONE = "pod_gone"              # the API answered 404 for the pod: deleted under us
API_ERROR = "api_error"            # any other answer of the Kubernetes API (403, 409, 5xx after retries)
OTHER = "other"                    # anything else, e.g. the provider's "Pod ... returned a failure"

PRIORITY: tuple[tuple[str, type[BaseException]], ...] = (
    (TASK_TIMEOUT, AirflowTaskTimeout),
    (LAUNCH_TIMEOUT, PodLaunchTimeoutException),
    (LAUNCH_FAILED, PodLaunchFailedException),
    (API_ERROR, ApiException),
)


@dataclasses.dataclass(frozen=True)
class Explained:
    kind: str
    exc: BaseException  # the exception of that kind found in the chain (the outermost if OTHER)

    @property
    def message(self) -> str:
        """The exception's text on one line (ApiException: status and reason, the missing permission of a
        403, the retries given up, not the whole body)."""
        if isinstance(self.exc, ApiException) and (api_errors.permission(self.exc) or isinstance(self.exc, GaveUp)):
            return api_errors.describe(self.exc)
        if isinstance(self.exc, ApiException):
            return f"Kubernetes API {self.exc.status} {self.exc.reason}"
        return one_line(self.exc)


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it was raised from or while handling, outermost first."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]


def find(exc: BaseException, *types: type[BaseException]) -> BaseException | None:
    """The first exception in ``exc``'s chain that is one of ``types``."""
    return next((e for e in chain(exc) if isinstance(e, types)), None)


def explain(exc: BaseException) -> Explained:
    for kind, cls in PRIORITY:
        found = find(exc, cls)
        if found is not None:
            if kind == API_ERROR and getattr(found, "status", None) == 404:
                return Explained(POD_GONE, found)
            return Explained(kind, found)
    return Explained(OTHER, exc)
