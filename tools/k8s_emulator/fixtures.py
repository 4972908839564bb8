"""Realistic object shapes: GPU nodes as the GPU operator labels them, user workload pods (Job/Deployment
pods holding GPUs), and the bulk generator for scale tests (5,000 nodes / 150,000 pods in seconds: pods are
rendered from JSON templates straight into the store, with their derived records precomputed)."""

from __future__ import annotations

import hashlib
import json
import random
import time

from .resources import TYPES, PodInfo
from .util import random_suffix, rfc3339

GPU_MEMORY = {
    "NVIDIA-H100-80GB-HBM3": "81559",
    "NVIDIA-A100-SXM4-80GB": "81920",
    "NVIDIA-H200": "143771",
    "NVIDIA-L40S": "46068",
    "NVIDIA-B200": "183359",
}


def _ip(name: str, base: str = "10.0") -> str:
    h = int(hashlib.md5(name.encode()).hexdigest()[:4], 16)
    return f"{base}.{h >> 8}.{(h & 255) or 1}"


def gpu_node(
    name: str,
    gpus: int = 8,
    product: str = "NVIDIA-H100-80GB-HBM3",
    ready=True,
    unschedulable: bool = False,
    taints: list | None = None,
    labels: dict | None = None,
    cpu: str = "224",
    memory: str = "2063937Mi",
    rdma: int = 8,
    pods: int = 110,
    annotations: dict | None = None,
    created: float | None = None,
) -> dict:
    """A Node as a GPU-operator-managed kubelet registers it. gpus=0 gives a CPU-only node.
    ready: True, False (KubeletNotReady) or "Unknown" (the node stopped reporting)."""
    lab = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": f"gpu-{gpus}x-{product.split('-')[1].lower()}"
        if gpus
        else "cpu-64",
        "topology.kubernetes.io/region": "us-central",
        "topology.kubernetes.io/zone": "us-central-a",
    }
    cap = {
        "cpu": cpu,
        "ephemeral-storage": "1845710484Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": memory,
        "pods": str(pods),
    }
    if gpus:
        lab.update(
            {
                "feature.node.kubernetes.io/pci-10de.present": "true",
                "nvidia.com/cuda.driver.major": "550",
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.family": "hopper" if "H" in product else "ampere",
                "nvidia.com/gpu.memory": GPU_MEMORY.get(product, "81920"),
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/mig.strategy": "single",
            }
        )
        cap["nvidia.com/gpu"] = str(gpus)
        if rdma:
            cap["rdma/ib"] = str(rdma)
    lab.update(labels or {})
    alloc = dict(
        cap, cpu=str(max(int(cpu) - 2, 1)) if cpu.isdigit() else cpu, **{"ephemeral-storage": "1701001221936"}
    )
    now = rfc3339(created)
    hb = rfc3339()
    if ready is True or ready == "True":
        ready_c = ("True", "KubeletReady", "kubelet is posting ready status")
        pressure = ("False", None)
    elif ready is False or ready == "False":
        ready_c = (
            "False",
            "KubeletNotReady",
            (
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
                "message:Network plugin returns error: cni plugin not initialized"
            ),
        )
        pressure = ("False", None)
    else:
        ready_c = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
        pressure = ("Unknown", "NodeStatusUnknown")
    conds = []
    for t, ok_reason, ok_msg in (
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ):
        conds.append(
            {
                "type": t,
                "status": pressure[0],
                "lastHeartbeatTime": hb,
                "lastTransitionTime": now,
                "reason": pressure[1] or ok_reason,
                "message": ok_msg if pressure[1] is None else "Kubelet stopped posting node status.",
            }
        )
    conds.append(
        {
            "type": "Ready",
            "status": ready_c[0],
            "lastHeartbeatTime": hb,
            "lastTransitionTime": now,
            "reason": ready_c[1],
            "message": ready_c[2],
        }
    )
    ip = _ip(name)
    spec: dict = {
        "podCIDR": f"10.244.{int(ip.split('.')[2])}.0/24",
        "podCIDRs": [f"10.244.{int(ip.split('.')[2])}.0/24"],
        "providerID": f"emulator://{name}",
    }
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "labels": lab,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                **(annotations or {}),
            },
        },
        "spec": spec,
        "status": {
            "capacity": cap,
            "allocatable": alloc,
            "conditions": conds,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": hashlib.md5(name.encode()).hexdigest(),
                "systemUUID": hashlib.md5(("s" + name).encode()).hexdigest(),
                "bootID": hashlib.md5(("b" + name).encode()).hexdigest(),
                "kernelVersion": "5.15.0-1063-nvidia",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.18",
                "kubeletVersion": "v1.31.4",
                "kubeProxyVersion": "v1.31.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [],
        },
    }


def _running_status(node_ip: str, pod_ip: str, containers: list[dict], started: str) -> dict:
    conds = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "phase": "Running",
        "conditions": conds,
        "hostIP": node_ip,
        "hostIPs": [{"ip": node_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "containerStatuses": [
            {
                "name": c["name"],
                "state": {"running": {"startedAt": started}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": c["image"],
                "imageID": c["image"].split(":")[0]
                + "@sha256:"
                + hashlib.sha256(c["image"].encode()).hexdigest(),
                "containerID": "containerd://"
                + hashlib.sha256((c["name"] + started + pod_ip).encode()).hexdigest(),
                "started": True,
            }
            for c in containers
        ],
    }


def user_pod(
    node: str | None,
    *,
    name: str | None = None,
    namespace: str = "default",
    gpus: int = 8,
    kind: str = "Job",
    phase: str = "Running",
    labels: dict | None = None,
    priority_class: str | None = None,
    image: str = "nvcr.io/nvidia/pytorch:24.05-py3",
    cpu: str = "32",
    memory: str = "256Gi",
    node_ip: str | None = None,
) -> dict:
    """A user workload pod as its controller would create it. phase Running: bound to node with a running
    status (written as-is); phase Pending: unbound, pinned to node by required node affinity so the scheduler
    places it."""
    owner = f"train-{random_suffix(5)}" if kind == "Job" else f"inference-{random_suffix(5)}"
    lab = {}
    owners = []
    if kind == "Job":
        uid = _fake_uid(owner)
        name = name or f"{owner}-{random_suffix(5)}"
        lab = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": owner,
            "controller-uid": uid,
            "job-name": owner,
        }
        owners = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": owner,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        restart = "Never"
    elif kind == "Deployment":
        rs_hash = hashlib.md5(owner.encode()).hexdigest()[:10]
        name = name or f"{owner}-{rs_hash}-{random_suffix(5)}"
        lab = {"app": owner, "pod-template-hash": rs_hash}
        owners = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{owner}-{rs_hash}",
                "uid": _fake_uid(owner + rs_hash),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        restart = "Always"
    else:
        name = name or f"user-{random_suffix(8)}"
        restart = "Never"
    lab.update(labels or {})
    res = {"cpu": cpu, "memory": memory}
    if gpus:
        res["nvidia.com/gpu"] = str(gpus)
    container = {
        "name": "trainer" if kind != "Deployment" else "server",
        "image": image,
        "command": ["torchrun", "--nproc-per-node", str(gpus or 1), "/workspace/train.py"],
        "resources": {"limits": dict(res), "requests": dict(res)},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": lab, "ownerReferences": owners},
        "spec": {
            "containers": [container],
            "restartPolicy": restart,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    if not owners:
        pod["metadata"].pop("ownerReferences")
    if priority_class:
        pod["spec"]["priorityClassName"] = priority_class
    if phase == "Running":
        pod["spec"]["nodeName"] = node
        started = rfc3339()
        pod["status"] = _running_status(node_ip or _ip(node or ""), _ip(name, "10.96"), [container], started)
        pod["status"]["qosClass"] = "Guaranteed"
    elif node:
        pod["spec"]["affinity"] = {
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
    return pod


def _fake_uid(seed: str) -> str:
    h = hashlib.md5(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# ---------------------------------------------------------------- bulk

_POD_TMPL = (
    '{"kind":"Pod","apiVersion":"v1","metadata":{"name":"%(name)s","namespace":"%(ns)s",'
    '"uid":"%(uid)s","resourceVersion":"%(rv)d","creationTimestamp":"%(ts)s","labels":%(labels)s,'
    '"ownerReferences":[{"apiVersion":"%(oapi)s","kind":"%(okind)s","name":"%(owner)s","uid":"%(ouid)s",'
    '"controller":true}]},'
    '"spec":{%(affinity)s"containers":[{"name":"%(cname)s","image":"%(image)s","resources":%(res)s}],'
    '"restartPolicy":"%(restart)s",%(nodename)s"schedulerName":"default-scheduler","priority":%(prio)d},'
    '"status":%(status)s}'
)


_ALPHA = "bcdfghjklmnpqrstvwxz2456789"


_PAIRS = [a + b for a in _ALPHA for b in _ALPHA]  # 729 two-letter chunks


def _unique_suffix(i: int) -> str:
    """5 chars of the generateName alphabet, distinct for i < 27**5 (a scrambled counter, not random)."""
    n = (i * 7919 + 12345) % 14348907  # 27**5; 7919 is coprime with it, so this is a bijection
    return _PAIRS[n % 729] + _PAIRS[(n // 729) % 729] + _ALPHA[n // 531441]


def _res_json(cpu: str, mem: str, gpus: int) -> str:
    r = {"cpu": cpu, "memory": mem}
    if gpus:
        r["nvidia.com/gpu"] = str(gpus)
    return json.dumps({"limits": r, "requests": r}, separators=(",", ":"))


def bulk_cluster(
    cluster,
    *,
    nodes: int = 5000,
    pods: int = 150000,
    seed: int = 0,
    gpus_per_node: int = 8,
    busy_share: float = 0.6,
    terminal_share: float = 0.5,
    pending_share: float = 0.05,
    cordoned_share: float = 0.02,
    notready_share: float = 0.01,
    daemonsets_per_node: int = 4,
    node_prefix: str = "gpu-node-",
    namespaces: int = 20,
) -> dict:
    """Load a big realistic cluster straight into the store. Returns counts and timings."""
    t0 = time.perf_counter()
    rng = random.Random(seed)
    store, api = cluster.store, cluster.api
    ns_names = [f"ml-team-{i:02d}" for i in range(namespaces)] + ["gpu-operator", "monitoring", "kube-system"]
    for ns in ns_names:
        if store.current("namespaces", ns) is None:
            api.create(TYPES["namespaces"], None, {"metadata": {"name": ns}}, {})

    # --- nodes
    products = ["NVIDIA-H100-80GB-HBM3"] * 6 + ["NVIDIA-A100-SXM4-80GB"] * 3 + ["NVIDIA-H200"]
    width = max(4, len(str(nodes)))
    node_names = [f"{node_prefix}{i:0{width}d}" for i in range(nodes)]
    ntype = TYPES["nodes"]
    first_rv = store.reserve(nodes)
    rows, states = [], {}
    created = time.time() - 86400 * 30
    from .admission import apply_node_lifecycle

    for i, name in enumerate(node_names):
        r = rng.random()
        state = (
            "cordoned"
            if r < cordoned_share
            else ("notready" if r < cordoned_share + notready_share else "ok")
        )
        states[name] = state
        obj = gpu_node(
            name,
            gpus=gpus_per_node,
            product=products[i % len(products)],
            ready=("Unknown" if state == "notready" else True),
            unschedulable=state == "cordoned",
            created=created,
        )
        apply_node_lifecycle(obj, cluster.settings.node_lifecycle_taints)
        obj["metadata"]["uid"] = _fake_uid(name)
        obj["metadata"]["creationTimestamp"] = rfc3339(created)
        obj["metadata"]["resourceVersion"] = str(first_rv + i)
        rows.append(
            (
                name,
                first_rv + i,
                json.dumps(obj, separators=(",", ":")).encode(),
                obj["metadata"]["labels"],
                ntype.fields(obj),
                ntype.info(obj),
            )
        )
    store.bulk_load("nodes", rows)
    t_nodes = time.perf_counter() - t0

    # --- pods
    schedulable = [n for n in node_names if states[n] == "ok"]
    busy = set(rng.sample(schedulable, int(len(schedulable) * busy_share)))
    n_daemon = min(pods, nodes * daemonsets_per_node)
    n_pending = int(pods * pending_share)
    n_terminal = int(pods * terminal_share)
    plan = []  # (category, node)
    ds = [
        ("nvidia-device-plugin-daemonset", "gpu-operator", "nvcr.io/nvidia/k8s-device-plugin:v0.15.0"),
        ("nvidia-dcgm-exporter", "gpu-operator", "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5"),
        ("node-exporter", "monitoring", "quay.io/prometheus/node-exporter:v1.8.1"),
        ("kube-proxy", "kube-system", "registry.k8s.io/kube-proxy:v1.31.4"),
    ]
    for n in node_names:
        for d in range(daemonsets_per_node):
            if len(plan) < n_daemon:
                plan.append(("ds", n, ds[d % len(ds)]))
    for n in sorted(busy):
        if len(plan) >= pods - n_pending - n_terminal:
            break
        if rng.random() < 0.7:
            plan.append(("gpu", n, gpus_per_node))
        else:
            plan += [("gpu", n, gpus_per_node // 2), ("gpu", n, gpus_per_node - gpus_per_node // 2)]
    busy_list = sorted(busy) or schedulable or node_names
    for _ in range(n_pending):
        plan.append(("pending", rng.choice(busy_list), gpus_per_node))
    for _ in range(n_terminal):
        plan.append(("terminal", rng.choice(node_names), rng.choice((1, 2, 4, 8))))
    while len(plan) < pods:
        plan.append(("cpu", rng.choice(schedulable or node_names), 0))
    plan = plan[:pods]

    ptype = TYPES["pods"]
    fidx_n = len(ptype.field_names)
    first_rv = store.reserve(len(plan))
    ts = rfc3339(created + 3600)
    gpu_res = {g: _res_json("16", "128Gi", g) for g in range(gpus_per_node + 1)}
    cpu_res = _res_json("100m", "128Mi", 0)
    gpu_req = {
        g: {"cpu": 16000, "memory": 128 * 2**30 * 1000, **({"nvidia.com/gpu": g * 1000} if g else {})}
        for g in range(gpus_per_node + 1)
    }
    small_req = {"cpu": 100, "memory": 128 * 2**20 * 1000}
    node_ip = {n: _ip(n) for n in node_names}
    ds_labels = {
        d[0]: json.dumps(
            {"app.kubernetes.io/name": d[0], "controller-revision-hash": "6d8f7b9c5"}, separators=(",", ":")
        )
        for d in ds
    }
    ds_uids = {d[0]: _fake_uid(d[0]) for d in ds}
    rows = []
    counts = {"ds": 0, "gpu": 0, "pending": 0, "terminal": 0, "cpu": 0}
    getrandbits = rng.getrandbits
    for i, (cat, node, extra) in enumerate(plan):
        counts[cat] += 1
        h = f"{getrandbits(128):032x}"
        uid = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"
        suffix = _unique_suffix(i)
        affinity, nodename = "", f'"nodeName":"{node}",'
        prio = 0
        if cat == "ds":
            dsname, ns, image = extra
            owner, gen = dsname, dsname + "-"
            owner_uid = ds_uids[dsname]
            name = f"{dsname}-{suffix}"
            labels = {"app.kubernetes.io/name": dsname, "controller-revision-hash": "6d8f7b9c5"}
            labels_json = ds_labels[dsname]
            oapi, okind, cname, res, restart = (
                "apps/v1",
                "DaemonSet",
                dsname.split("-")[-1],
                cpu_res,
                "Always",
            )
            info = PodInfo(
                uid,
                node,
                "Running",
                False,
                small_req,
                2000001000 if ns == "kube-system" else 0,
                "default-scheduler",
                False,
            )
            prio = info.priority
            status = _bulk_running(node_ip[node], i, cname, image, ts)
        else:
            ns = ns_names[i % namespaces]
            job = f"train-{h[5:10]}"
            owner, gen = job, job + "-"
            owner_uid = f"{h[16:24]}-{h[24:28]}-{h[28:32]}-{h[0:4]}-{h[4:16]}"
            name = f"{job}-{suffix}"
            labels = {"batch.kubernetes.io/job-name": job, "team": ns}
            labels_json = f'{{"batch.kubernetes.io/job-name":"{job}","team":"{ns}"}}'
            oapi, okind, cname, restart = "batch/v1", "Job", "trainer", "Never"
            image = "nvcr.io/nvidia/pytorch:24.05-py3"
            gpus = extra
            res = gpu_res[gpus] if cat != "cpu" else cpu_res
            req = gpu_req[gpus] if cat != "cpu" else small_req
            if cat == "pending":
                nodename = ""
                affinity = (
                    '"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":'
                    '{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname",'
                    f'"operator":"In","values":["{node}"]}}]}}]}}}}}},'
                )
                status = (
                    '{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False",'
                    f'"lastTransitionTime":"{ts}","reason":"Unschedulable",'
                    f'"message":"0/{nodes} nodes are available: 1 Insufficient nvidia.com/gpu, {nodes - 1} '
                    'node(s) didn\'t match Pod\'s node affinity/selector."}],"qosClass":"Burstable"}'
                )
                info = PodInfo(uid, "", "Pending", False, req, 0, "default-scheduler", False)
            elif cat == "terminal":
                phase = "Succeeded" if rng.random() < 0.8 else "Failed"
                code = 0 if phase == "Succeeded" else 1
                status = (
                    f'{{"phase":"{phase}","hostIP":"{node_ip[node]}","podIP":"10.96.{(i >> 8) & 255}.'
                    f'{i & 255}","startTime":"{ts}","containerStatuses":[{{"name":"trainer","state":'
                    f'{{"terminated":{{"exitCode":{code},"reason":"{"Completed" if code == 0 else "Error"}",'
                    f'"finishedAt":"{ts}"}}}},"ready":false,"restartCount":0,"image":"{image}",'
                    f'"imageID":""}}],'
                    f'"qosClass":"Burstable"}}'
                )
                info = PodInfo(uid, node, phase, False, req, 0, "default-scheduler", False)
            else:
                status = _bulk_running(node_ip[node], i, cname, image, ts)
                info = PodInfo(uid, node, "Running", False, req, 0, "default-scheduler", False)
        rv = first_rv + i
        raw = (
            _POD_TMPL
            % {
                "name": name,
                "gen": gen,
                "ns": ns,
                "uid": uid,
                "rv": rv,
                "ts": ts,
                "labels": labels_json,
                "oapi": oapi,
                "okind": okind,
                "owner": owner,
                "ouid": owner_uid,
                "affinity": affinity,
                "cname": cname,
                "image": image,
                "res": res,
                "restart": restart,
                "nodename": nodename,
                "prio": prio,
                "status": status,
            }
        ).encode()
        phase = info.phase
        fields = (
            name,
            ns,
            info.node,
            restart,
            "default-scheduler",
            "default",
            "false",
            phase,
            "" if cat == "pending" else f"10.96.{(i >> 8) & 255}.{i & 255}",
            "",
        )
        assert len(fields) == fidx_n
        rows.append((f"{ns}/{name}", rv, raw, labels, fields, info))
    store.bulk_load("pods", rows)
    # bulk pending pods count as already tried: the scheduler re-tries them when the cluster changes
    now = time.monotonic()
    for *_, info in rows:
        if not info.node:
            cluster.scheduler.attempts[info.uid] = (cluster.scheduler.gen, now)
    sizes = [len(r[2]) for r in rows[:: max(1, len(rows) // 200)]]
    return {
        "nodes": nodes,
        "pods": len(rows),
        "node_states": {s: list(states.values()).count(s) for s in ("ok", "cordoned", "notready")},
        "busy_nodes": len(busy),
        "pod_categories": counts,
        "avg_pod_bytes": sum(sizes) // max(len(sizes), 1),
        "seconds": round(time.perf_counter() - t0, 3),
        "node_seconds": round(t_nodes, 3),
    }


def _bulk_running(node_ip: str, i: int, cname: str, image: str, ts: str) -> str:
    return (
        f'{{"phase":"Running","hostIP":"{node_ip}","podIP":"10.96.{(i >> 8) & 255}.{i & 255}",'
        f'"startTime":"{ts}",'
        f'"containerStatuses":[{{"name":"{cname}","state":{{"running":{{"startedAt":"{ts}"}}}},"ready":true,'
        f'"restartCount":0,"image":"{image}","imageID":""}}],"qosClass":"Burstable"}}'
    )
