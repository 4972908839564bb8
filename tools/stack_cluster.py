"""The simulated cluster of `make up`: the Kubernetes API emulator plus a churn driver that keeps it moving.

``python tools/stack_cluster.py --state-dir DIR [--nodes 24] [--interval 20] [--seed N]`` runs in the
foreground until SIGTERM (``tools/stack.py`` starts it in its own session): it starts the emulator,
applies the parts of ``include/k8s`` the emulator serves (namespace, PriorityClass, the results PVC,
bound to a stand-in NFS volume), adds GPU nodes (a few busy with user jobs, one whose kernel log
holds an uncorrectable ECC error: ``gpu_fault``), writes ``DIR/ready.json``, then every ``interval``
seconds one churn step: user jobs arrive (and preempt a validation pod in their way) and leave when done, nodes get cordoned
and uncordoned, and now and then a node's next gpu_health run finds that fault too. What the
churn did goes to ``DIR/churn.jsonl``, one JSON object per action.

``plan()`` is the churn's pure decision (tested alone); ``observe()`` and ``apply()`` talk to the
emulator.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import random
import signal
import sys
import threading
import time

import gpu_fault
import yaml
from k8s_emulator import EmulatorProcess

REPO = pathlib.Path(__file__).resolve().parents[1]
NAMESPACE = "cluster-doctor"
PVC = "cluster-doctor-results"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
USER_NAMESPACES = ("ml-research", "inference")
CHURN_LABEL = "stack.cluster-doctor.io/churn"  # marks the user jobs the churn created
FAULTY = "gpu-004"  # an uncorrectable ECC error in its kernel log from the start, as in `make demo`


def node_names(count: int) -> list[str]:
    return [f"gpu-{i:03d}" for i in range(1, count + 1)]


# ------------------------------------------------------------------ the churn's decision (pure)
@dataclasses.dataclass(frozen=True)
class View:
    """What the churn needs to know of the cluster."""
    nodes: tuple[str, ...]
    cordoned: frozenset[str]
    busy: frozenset[str]  # nodes with a live user job (running or pending for the node)
    finished_jobs: tuple[str, ...]  # "namespace/name" of user jobs that ended (a Job controller's TTL)


@dataclasses.dataclass(frozen=True)
class Knobs:
    occupancy: float = 0.35  # user jobs arrive while fewer nodes than this share are busy
    job_seconds: tuple[float, float] = (120.0, 900.0)  # a user job's run time, uniform
    max_cordoned: int = 2
    cordon_rate: float = 0.15  # per step: cordon one more node
    uncordon_rate: float = 0.3  # per step: uncordon one
    fault_rate: float = 0.05  # per step: a node's next gpu_health run fails
    # nodes no user job arrives on and no cordon takes: the fault node, so the first run always reaches it
    keep_free: frozenset[str] = frozenset()


def plan(view: View, rng: random.Random, knobs: Knobs) -> list[dict]:
    """One churn step: a list of actions {"action": arrive|cordon|uncordon|fault|cleanup, ...}."""
    actions: list[dict] = [{"action": "cleanup", "pod": ref} for ref in view.finished_jobs]
    schedulable = [n for n in view.nodes if n not in view.cordoned and n not in knobs.keep_free]
    idle = [n for n in schedulable if n not in view.busy]
    if idle and len(view.busy) < knobs.occupancy * len(view.nodes):
        actions.append({"action": "arrive", "node": rng.choice(idle), "namespace": rng.choice(USER_NAMESPACES),
                        "run_seconds": round(rng.uniform(*knobs.job_seconds), 1)})
    roll = rng.random()
    if view.cordoned and roll < knobs.uncordon_rate:
        actions.append({"action": "uncordon", "node": rng.choice(sorted(view.cordoned))})
    elif len(view.cordoned) < knobs.max_cordoned and schedulable and roll > 1 - knobs.cordon_rate:
        actions.append({"action": "cordon", "node": rng.choice(schedulable)})
    if rng.random() < knobs.fault_rate:
        actions.append({"action": "fault", "node": rng.choice(view.nodes)})
    return actions


# ------------------------------------------------------------------ the emulator side
def observe(v1, nodes: list[str]) -> View:
    cordoned = {n.metadata.name for n in v1.list_node().items if n.spec.unschedulable}
    busy, finished = set(), []
    for pod in v1.list_pod_for_all_namespaces(label_selector=CHURN_LABEL).items:
        ref = f"{pod.metadata.namespace}/{pod.metadata.name}"
        if pod.status.phase in ("Succeeded", "Failed"):
            finished.append(ref)
        elif pod.metadata.deletion_timestamp is None:
            busy.add(pod.metadata.labels[CHURN_LABEL])  # the node it runs on or waits for
    return View(tuple(nodes), frozenset(cordoned & set(nodes)), frozenset(busy), tuple(sorted(finished)))


def inject_fault(emu: EmulatorProcess, node: str, *, once: bool) -> None:
    # only the node's gpu_health pods see the fault (in its kernel log); its other suites run as anywhere
    gpu_fault.inject(emu, node, pathlib.Path(emu.state_dir) / "faults", once=once)


def apply(emu: EmulatorProcess, v1, actions: list[dict]) -> None:
    from kubernetes.client.exceptions import ApiException

    for act in actions:
        kind = act["action"]
        if kind == "arrive":  # Pending, pinned to the node: the scheduler preempts a validation pod in its way
            emu.add_user_pod(act["node"], gpus=8, phase="Pending", namespace=act["namespace"],
                             run_seconds=act["run_seconds"], labels={CHURN_LABEL: act["node"]})
        elif kind in ("cordon", "uncordon"):
            emu.cordon(act["node"], unschedulable=kind == "cordon")
        elif kind == "fault":
            inject_fault(emu, act["node"], once=True)
        elif kind == "cleanup":
            ns, name = act["pod"].split("/")
            try:
                v1.delete_namespaced_pod(name, ns)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def setup(emu: EmulatorProcess, nodes: list[str], pvc_dir: pathlib.Path, rng: random.Random) -> list[dict]:
    """The cluster at start: include/k8s as far as the emulator serves it, nodes, a few busy ones."""
    from kubernetes import client

    v1 = emu.core_v1()
    manifests = {f: yaml.safe_load((REPO / "include" / "k8s" / f).read_text())
                 for f in ("namespace.yaml", "priorityclass.yaml", "pvc.yaml")}
    v1.create_namespace(manifests["namespace.yaml"])
    for ns in USER_NAMESPACES:
        v1.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    client.SchedulingV1Api(emu.api_client()).create_priority_class(manifests["priorityclass.yaml"])
    # a stand-in for the cluster's NFS volume, so the example claim binds as it would with a provisioner
    v1.create_persistent_volume({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "stack-nfs"},
                                 "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteMany"],
                                          "nfs": {"server": "nfs.stack.local", "path": "/export/cluster-doctor"}}})
    v1.create_namespaced_persistent_volume_claim(NAMESPACE, manifests["pvc.yaml"])
    emu.set_pvc_dir(PVC, str(pvc_dir))
    for node in nodes:
        emu.add_gpu_node(node, gpus=8, product=PRODUCT)
    emu.add_gpu_node("cpu-001", gpus=0)
    if FAULTY in nodes:
        inject_fault(emu, FAULTY, once=False)
    started = [{"action": "fault", "node": FAULTY, "sticky": True}] if FAULTY in nodes else []
    for node in rng.sample([n for n in nodes if n != FAULTY], k=max(1, len(nodes) // 6)):
        act = {"action": "arrive", "node": node, "namespace": rng.choice(USER_NAMESPACES),
               "run_seconds": round(rng.uniform(300, 1800), 1)}
        emu.add_user_pod(node, gpus=8, namespace=act["namespace"], run_seconds=act["run_seconds"],
                         labels={CHURN_LABEL: node})
        started.append(act)
    return started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", required=True, type=pathlib.Path)
    p.add_argument("--nodes", type=int, default=24)
    p.add_argument("--interval", type=float, default=20.0, help="seconds between churn steps (0: no churn)")
    p.add_argument("--job-seconds", default="120,900", help="a user job's run time: MIN,MAX seconds")
    p.add_argument("--fault-rate", type=float, default=0.05, help="chance per step of an injected fault")
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args(argv)
    lo, hi = (float(x) for x in args.job_seconds.split(","))
    knobs = Knobs(job_seconds=(lo, hi), fault_rate=args.fault_rate, keep_free=frozenset({FAULTY}))
    state = args.state_dir.resolve()
    state.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    nodes = node_names(args.nodes)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # pod processes carry the stack's marker too, so `down` can find every process of this stack
    marker = {k: v for k, v in os.environ.items() if k in ("CD_LOCAL_STACK_ID", "CD_LOCAL_STACK_PART")}
    emu = EmulatorProcess(state_dir=str(state / "emulator"), kubeconfig_path=str(state / "kubeconfig"),
                          exec_env=marker)
    emu.start()
    journal = open(state / "churn.jsonl", "a", buffering=1)
    try:
        for act in setup(emu, nodes, state / "pvc", rng):
            journal.write(json.dumps({"at": time.time(), **act}) + "\n")
        ready = {"url": emu.url, "kubeconfig": emu.kubeconfig_path, "emulator_pid": emu.pid, "nodes": nodes,
                 "pvc_dir": str(state / "pvc")}
        (state / "ready.json.tmp").write_text(json.dumps(ready))
        os.replace(state / "ready.json.tmp", state / "ready.json")
        print(f"simulated cluster at {emu.url}: {len(nodes)} GPU nodes, churn every {args.interval} s", flush=True)
        v1 = emu.core_v1()
        while args.interval > 0 and not stop.wait(args.interval):
            try:
                actions = plan(observe(v1, nodes), rng, knobs)
                apply(emu, v1, actions)
            except Exception as exc:  # one bad step (e.g. a race with the scheduler) must not end the cluster
                print(f"churn step failed: {exc}", file=sys.stderr, flush=True)
                continue
            for act in actions:
                journal.write(json.dumps({"at": time.time(), **act}) + "\n")
        stop.wait()
    finally:
        journal.close()
        emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
