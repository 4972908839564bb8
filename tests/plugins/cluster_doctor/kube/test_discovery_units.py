"""Pure pieces of discovery: quantities, the scheduler's effective request, taints."""

import subprocess
import sys
from decimal import Decimal

import pytest
from cluster_doctor.domain.taints import tolerates, untolerated_taints
from cluster_doctor.kube.discovery import parse_quantity, pod_request

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize("text, value", [("8", 8), ("500m", Decimal("0.5")), ("1Gi", 2**30), ("2k", 2000),
                                         (4, 4), (None, 0), ("1e3", 1000)])
def test_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text, value", [("100n", Decimal("1E-7")), ("2E", 2 * 10**18), ("1Ki", 1024), (" 8 ", 8)])
def test_quantities_the_kubernetes_parser_knows(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["eight", "NaN", "Infinity", "1ki", "", "-"])
def test_bad_quantity(text):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_importing_discovery_does_not_import_the_kubernetes_package():
    """The client's quantity parser is imported on first use: importing discovery stays cheap (the
    kubernetes package takes over a second to import; its callers hold a client, so have it loaded)."""
    code = "import sys, cluster_doctor.kube.discovery; assert 'kubernetes' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def container(gpus=None, limit_only=False, restart=None):
    res = {}
    if gpus is not None:
        res = {"limits": {GPU: str(gpus)}} if limit_only else {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}
    c = {"name": "c", "image": "x", "resources": res}
    if restart:
        c["restartPolicy"] = restart
    return c


def test_limit_only_counts_as_request():
    assert pod_request({"spec": {"containers": [container(2, limit_only=True)]}}, GPU) == 2


def test_init_containers_counted_like_the_scheduler():
    pod = {"spec": {"initContainers": [container(8)], "containers": [container(1), container(1)]}}
    assert pod_request(pod, GPU) == 8  # max(max(init), sum(app))
    pod = {"spec": {"initContainers": [container(1)], "containers": [container(2), container(2)]}}
    assert pod_request(pod, GPU) == 4


def test_sidecar_init_containers_add_to_the_app_containers():
    pod = {"spec": {"initContainers": [container(1, restart="Always"), container(2)],
                    "containers": [container(2)]}}
    # sidecar runs alongside: app 2 + sidecar 1 = 3; init peak: sidecar 1 + init 2 = 3
    assert pod_request(pod, GPU) == 3


def test_no_gpu_request():
    assert pod_request({"spec": {"containers": [container()]}}, GPU) == 0


@pytest.mark.parametrize("toleration, taint, expected", [
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
     {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
     {"key": "nvidia.com/gpu", "effect": "NoExecute"}, False),
    ({"operator": "Exists"}, {"key": "anything", "effect": "NoExecute"}, True),
    ({"key": "k", "operator": "Equal", "value": "a"}, {"key": "k", "value": "b", "effect": "NoSchedule"}, False),
    ({"key": "k", "value": "a"}, {"key": "k", "value": "a", "effect": "NoSchedule"}, True),
])
def test_toleration_matching(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


def test_prefer_no_schedule_never_blocks():
    node = {"spec": {"taints": [{"key": "a", "effect": "PreferNoSchedule"},
                                {"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}}
    assert untolerated_taints(node, []) == ["maintenance=true:NoSchedule"]
