"""The operator hands the pod the GPUs its node has: the suites' bar, beside the GPUs the pod
requests (the node's allocatable count)."""

import datetime as dt

from cluster_doctor.airflow import operator as op_module
from cluster_doctor.airflow.operator import NodeValidationPodOperator
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import RunConfig, Validation


def test_the_nodes_gpu_count_reaches_build_pod(monkeypatch):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    run_config = RunConfig(settings=Settings(), configmap="cluster-doctor-suites-0", suite_version="sha256:0")
    kwargs = Validation(node_name="gpu-002", test_name="gpu_health", gpu_count=7, gpu_model="H100", node_gpus=8,
                        planned_at=now, run_config=run_config).to_xcom()
    op = NodeValidationPodOperator(task_id="validate", **kwargs)
    assert (op.gpu_count, op.node_gpus) == (7, 8)
    seen = {}

    def build_pod(settings, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")  # the pod itself is podspec's (test_discovery_node_gpus.py)

    monkeypatch.setattr(op_module.podspec, "build_pod", build_pod)
    try:
        op.build_pod_request_obj(None, dry_run=True)
    except RuntimeError:
        pass
    assert (seen["gpu_count"], seen["node_gpus"]) == (7, 8)
    old = NodeValidationPodOperator(task_id="v", **{k: v for k, v in kwargs.items() if k != "node_gpus"})
    assert old.node_gpus is None  # kwargs of an earlier release: no count, the suites fall back
