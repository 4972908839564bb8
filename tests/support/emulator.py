"""The Kubernetes API emulator for the tests, as a pytest plugin (tests/conftest.py loads it).

``emulator``: one emulator process per test module, started on first use and stopped after the
module's last test; each test then starts from the cluster it needs (``emulator.reset()`` and the
helpers below). A module that needs a results claim or a quicker scheduler says so once, at its top:

    pytestmark = pytest.mark.emulator(pvc=True, settings=FAST)

``validation_cluster``: a reset emulator with the validation namespace. ``operator_cluster``: that,
plus what the pod operator needs to run a pod (the priority class, Airflow's Kubernetes connection),
and a check after the test that no validation pod was left behind.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

NS = "cluster-doctor"
PVC = "cluster-doctor-results"
POD_SELECTOR = "app.kubernetes.io/name=cluster-doctor"
PRIORITY_CLASS = "cluster-doctor-preemptible"
# A scheduler and kubelet that act within 50 ms: tests that run pods wait for them, not for the defaults.
FAST = {"scheduler_interval": 0.05, "startup_delay": 0.05}
# FAST, and a pod's deletion done in 50 ms too (peer tests delete and recreate pods within one test).
FAST_DELETE = {**FAST, "static_termination_seconds": 0.05}
MARKER = "emulator"


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}(pvc=False, settings=None): how the module's Kubernetes API "
                                       "emulator starts (tests/support/emulator.py): a Bound results claim, "
                                       "scheduler settings")


@pytest.fixture(scope="module")
def emulator(request, tmp_path_factory):
    """The module's Kubernetes API emulator (see the module's docstring for its options)."""
    mark = request.node.get_closest_marker(MARKER)
    options = dict(mark.kwargs) if mark is not None else {}
    unknown = set(options) - {"pvc", "settings"}
    if unknown or (mark is not None and mark.args):
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes pvc= and settings= only, not {sorted(unknown) or mark.args}")
    # imported here: tests/conftest.py loads this plugin in pytest runs from other roots too (the clock
    # guard's probe), where tools/ is not on the path
    from k8s_emulator import EmulatorProcess

    pvc_dirs = {PVC: str(tmp_path_factory.mktemp("pvc"))} if options.get("pvc") else None
    with EmulatorProcess(pvc_dirs=pvc_dirs, settings=options.get("settings")) as emu:
        yield emu


def create_namespace(emulator, name: str = NS) -> None:
    emulator.core_v1().create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def create_priority_class(emulator) -> None:
    """The priority class our validation pods run at (a user job preempts them)."""
    k8s.SchedulingV1Api(emulator.api_client()).create_priority_class({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS}, "value": -100, "preemptionPolicy": "Never"})


def gpu_fleet(emulator, gpu_nodes: int, *, cpu_nodes: int = 0) -> list[str]:
    """The emulator reset to a fleet: GPU nodes gpu-001 … (8 GPUs each), then CPU nodes cpu-001 … (none);
    the GPU nodes' names."""
    emulator.reset()
    names = [f"gpu-{i:03d}" for i in range(1, gpu_nodes + 1)]
    for name in names:
        emulator.add_gpu_node(name)
    for i in range(1, cpu_nodes + 1):
        emulator.add_gpu_node(f"cpu-{i:03d}", gpus=0)
    return names


def validation_pods_left(emulator) -> list[str]:
    return [p["name"] for p in emulator.live_pods(POD_SELECTOR)]


@pytest.fixture
def validation_cluster(emulator):
    """The module's emulator, reset: no nodes, the validation namespace only."""
    emulator.reset()
    create_namespace(emulator)
    return emulator


@pytest.fixture
def operator_cluster(validation_cluster, monkeypatch):
    """A cluster the real pod operator can run a validation pod on (nodes are the test's to add); after the
    test, none of its pods may be left."""
    create_priority_class(validation_cluster)
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": validation_cluster.kubeconfig_path}}))
    yield validation_cluster
    assert validation_pods_left(validation_cluster) == [], "validation pods left behind"
