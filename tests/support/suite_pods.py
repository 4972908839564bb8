"""A suite's pod on a node of the emulator, as the validation pods run it (the real suite in CPU mode,
its summary in the termination message): what a node's fault looks like to the operator."""

from __future__ import annotations

import json
import pathlib
import uuid


def run_suite_pod(emu, node: str, suite: str, output_dir: pathlib.Path, *, timeout: float = 120) -> dict:
    """The summary the suite's pod on ``node`` ends with (its termination message), parsed."""
    v1 = emu.core_v1()
    name = f"{suite.replace('_', '-')}-{node}-{uuid.uuid4().hex[:6]}"
    v1.create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"cluster-doctor.io/test": suite}},
        # as the validation pod template: an emptyDir at /tmp (the node's own tools live on the host)
        "spec": {"nodeName": node, "restartPolicy": "Never", "volumes": [{"name": "tmp", "emptyDir": {}}],
                 "containers": [{
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            "name": "suite", "image": "cluster-doctor-suites:test",
            "command": ["python", "-m", f"cluster_doctor_suites.{suite}", "--device", "cpu",
                        "--output-dir", str(output_dir)],
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    # as kube.podspec sets it: the kubelet maps the path to the container's message file
                    {"name": "CLUSTER_DOCTOR_TERMINATION_LOG", "value": "/dev/termination-log"}]}]}})

    def ended():
        pod = v1.read_namespaced_pod(name, "default")
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = emu.wait_for(ended, timeout=timeout, interval=0.2, message=f"the {suite} pod on {node} to end")
    message = pod.status.container_statuses[0].state.terminated.message
    return json.loads(message)
