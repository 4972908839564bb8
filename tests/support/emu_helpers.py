"""Helpers shared by the emulator tests (manifests, polling)."""

from __future__ import annotations

import time

from kubernetes import client

# a container that exits 0.5 s after SIGTERM, so tests can observe the pod while it terminates; it prints
# "ready" once its handler is installed (see wait_ready)
SLOW_EXIT = ["python", "-c", "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), "
             "sys.exit(0)))\nprint('ready', flush=True)\ntime.sleep(60)"]


def wait_ready(v1, name, namespace="default", timeout=10.0):
    """Wait until a SLOW_EXIT container has installed its SIGTERM handler."""
    deadline = time.monotonic() + timeout
    while b"ready" not in v1.read_namespaced_pod_log(name, namespace, _preload_content=False).data:
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {name} never got ready")
        time.sleep(0.05)


def pod(
    name: str | None = None,
    *,
    command=None,
    gpus: int = 0,
    node: str | None = None,
    namespace="default",
    labels=None,
    restart="Never",
    **spec_extra,
) -> dict:
    """A minimal pod manifest; node pins it with required node affinity (like our validation pods)."""
    c = {"name": "base", "image": "python:3.11-slim"}
    if command is not None:
        c["command"] = command
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    meta = {"namespace": namespace, "labels": labels or {}}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "p-"
    spec = {"restartPolicy": restart, "containers": [c], **spec_extra}
    if node:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def wait_pod(v1, name, namespace="default", *, until=None, phases=("Succeeded", "Failed"), timeout=10.0):
    """Poll until the pod reaches one of phases (or until(pod) is true); returns the pod."""
    deadline = time.monotonic() + timeout
    while True:
        p = v1.read_namespaced_pod(name, namespace)
        if until(p) if until else p.status.phase in phases:
            return p
        if time.monotonic() > deadline:
            raise AssertionError(
                f"pod {name} stuck: phase={p.status.phase} conditions={p.status.conditions} "
                f"statuses={p.status.container_statuses}"
            )
        time.sleep(0.05)


def wait_gone(v1, name, namespace="default", timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            v1.read_namespaced_pod(name, namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {name} still exists")
        time.sleep(0.05)


def events_for(v1, name, namespace="default") -> list:
    return v1.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items


def scheduled(p) -> bool:
    return any(c.type == "PodScheduled" and c.status == "True" for c in p.status.conditions or [])


def unschedulable(p) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or [])
