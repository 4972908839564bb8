"""Every provider exception the operator maps, alone and in the shapes the provider raises it: chained
under its own cleanup's "Pod ... returned a failure"."""

import pytest
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchTimeoutException
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout
from cluster_doctor.airflow import provider_errors as pe
from cluster_doctor.airflow.provider_errors import PodLaunchFailedException
from kubernetes.client.exceptions import ApiException


def under_cleanup(cause: BaseException) -> AirflowException:
    """What reaches the operator when the provider's cleanup raises while ``cause`` propagates."""
    try:
        try:
            raise cause
        finally:
            raise AirflowException("Pod validate-gpu-001-abc returned a failure.")
    except AirflowException as exc:
        return exc


@pytest.mark.parametrize("exc, kind", [
    (AirflowTaskTimeout("Timeout, PID: 42"), pe.TASK_TIMEOUT),
    (PodLaunchTimeoutException("Pod took too long to be scheduled on the cluster, giving up."), pe.LAUNCH_TIMEOUT),
    (PodLaunchFailedException("Pod docker image cannot be pulled"), pe.LAUNCH_FAILED),
    (ApiException(status=404, reason="Not Found"), pe.POD_GONE),
    (ApiException(status=403, reason="Forbidden"), pe.API_ERROR),
    (ApiException(status=500, reason="Internal Server Error"), pe.API_ERROR),
    (AirflowException("Pod validate-gpu-001-abc returned a failure."), pe.OTHER),
    (RuntimeError("boom"), pe.OTHER),
])
def test_each_exception_alone_and_under_the_providers_cleanup(exc, kind):
    assert pe.explain(exc).kind == kind
    if kind != pe.OTHER:
        wrapped = under_cleanup(exc)
        explained = pe.explain(wrapped)
        assert explained.kind == kind and explained.exc is exc


def test_the_most_specific_kind_wins_whatever_the_nesting():
    # a task timeout that fired while the provider was handling an API error
    try:
        try:
            raise ApiException(status=500, reason="Internal Server Error")
        except ApiException:
            raise AirflowTaskTimeout("Timeout")
    except AirflowTaskTimeout as exc:
        assert pe.explain(under_cleanup(exc)).kind == pe.TASK_TIMEOUT


def test_explicit_causes_are_followed_and_cycles_end():
    inner = PodLaunchTimeoutException("still Pending")
    outer = RuntimeError("wrapped")
    outer.__cause__ = inner
    inner.__context__ = outer  # a cycle must not hang
    assert pe.explain(outer).kind == pe.LAUNCH_TIMEOUT
    assert list(pe.chain(outer)) == [outer, inner]


def test_messages_are_one_line_and_api_errors_do_not_dump_their_body():
    api = ApiException(status=403, reason="Forbidden")
    api.body = '{"kind":"Status","message":"pods is forbidden: User \\"system:serviceaccount\\" ...\\n' + "x" * 5000
    assert pe.explain(api).message == "Kubernetes API 403 Forbidden"
    assert pe.explain(RuntimeError("a\nb   c")).message == "a b c"
