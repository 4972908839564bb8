"""Realistic object shapes: GPU nodes as the GPU operator labels them, user workload pods (Job or Deployment
pods holding GPUs), and the bulk generator for scale tests (5,000 nodes / 150,000 pods in seconds: pods are
rendered from JSON templates straight into the store, with their derived records precomputed)."""

from __future__ import annotations

import hashlib
import json
import random
import time

from .admission import apply_node_lifecycle
from .resources import TYPES, PodInfo
from .util import SUFFIX_ALPHABET, random_suffix, rfc3339

GPU_MEMORY = {"NVIDIA-H100-80GB-HBM3": "81559", "NVIDIA-A100-SXM4-80GB": "81920", "NVIDIA-H200": "143771",
              "NVIDIA-L40S": "46068", "NVIDIA-B200": "183359"}
CONDITIONS = (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
              ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
              ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
NOT_READY = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network "
             "plugin returns error: cni plugin not initialized")


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def _ip(name: str, base: str = "10.0") -> str:
    h = int(_md5(name)[:4], 16)
    return f"{base}.{h >> 8}.{(h & 255) or 1}"


def _fake_uid(seed: str) -> str:
    h = _md5(seed)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def bound_claim(name: str, volume: str) -> dict:
    """A PersistentVolumeClaim as the PV controller leaves it once bound (what `pvc_dirs` claims are)."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                                       "pv.kubernetes.io/bound-by-controller": "yes"}},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}},
                     "storageClassName": "", "volumeMode": "Filesystem", "volumeName": volume},
            "status": {"phase": "Bound", "accessModes": ["ReadWriteMany"], "capacity": {"storage": "100Gi"}}}


def gpu_node(name: str, gpus: int = 8, product: str = "NVIDIA-H100-80GB-HBM3", ready=True,
             unschedulable: bool = False, taints: list | None = None, labels: dict | None = None, cpu: str = "224",
             memory: str = "2063937Mi", rdma: int = 8, pods: int = 110, annotations: dict | None = None,
             created: float | None = None) -> dict:
    """A Node as a GPU-operator-managed kubelet registers it. gpus=0 gives a CPU-only node.
    ready: True, False (KubeletNotReady), "Unknown" (the node stopped reporting) or None (just registered,
    no Ready condition yet)."""
    lab = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
           "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
           "node.kubernetes.io/instance-type": f"gpu-{gpus}x-{product.split('-')[1].lower()}" if gpus else "cpu-64",
           "topology.kubernetes.io/region": "us-central", "topology.kubernetes.io/zone": "us-central-a"}
    cap = {"cpu": cpu, "ephemeral-storage": "1845710484Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
           "memory": memory, "pods": str(pods)}
    if gpus:
        lab.update({"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/cuda.driver.major": "550",
                    "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.family": "hopper" if "H" in product else "ampere",
                    "nvidia.com/gpu.memory": GPU_MEMORY.get(product, "81920"), "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": product, "nvidia.com/mig.strategy": "single"})
        cap["nvidia.com/gpu"] = str(gpus)
        if rdma:
            cap["rdma/ib"] = str(rdma)
    lab.update(labels or {})
    alloc = {**cap, "cpu": str(max(int(cpu) - 2, 1)) if cpu.isdigit() else cpu, "ephemeral-storage": "1701001221936"}
    now, hb = rfc3339(created), rfc3339()
    ready = {True: "True", False: "False"}.get(ready, ready)
    silent = ready not in ("True", "False", None)
    conds = [{"type": t, "status": "Unknown" if silent else "False", "lastHeartbeatTime": hb, "lastTransitionTime": now,
              "reason": "NodeStatusUnknown" if silent else reason,
              "message": "Kubelet stopped posting node status." if silent else msg} for t, reason, msg in CONDITIONS]
    if ready is not None:
        status = ready if ready in ("True", "False") else "Unknown"
        reason, msg = {"True": ("KubeletReady", "kubelet is posting ready status"), "False": ("KubeletNotReady", NOT_READY),
                       "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status.")}[status]
        conds.append({"type": "Ready", "status": status, "lastHeartbeatTime": hb, "lastTransitionTime": now,
                      "reason": reason, "message": msg})
    ip = _ip(name)
    cidr = f"10.244.{int(ip.split('.')[2])}.0/24"
    spec = {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": f"emulator://{name}",
            **({"taints": [dict(t) for t in taints]} if taints else {}),
            **({"unschedulable": True} if unschedulable else {})}
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "labels": lab, "annotations": {
        "node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        **(annotations or {})}}, "spec": spec, "status": {
        "capacity": cap, "allocatable": alloc, "conditions": conds,
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": _md5(name), "systemUUID": _md5("s" + name), "bootID": boot_id(name),
                     "kernelVersion": "5.15.0-1063-nvidia", "osImage": "Ubuntu 22.04.4 LTS",
                     "containerRuntimeVersion": "containerd://1.7.18", "kubeletVersion": "v1.31.4",
                     "kubeProxyVersion": "v1.31.4", "operatingSystem": "linux", "architecture": "amd64"},
        "images": []}}


def boot_id(name: str, seed: str = "") -> str:
    """A node's bootID (a UUID, as /proc/sys/kernel/random/boot_id gives it): new with each boot (``seed``)."""
    return _fake_uid("b" + name + seed)


def user_pod(node: str | None, *, name: str | None = None, namespace: str = "default", gpus: int = 8, kind: str = "Job",
             phase: str = "Running", labels: dict | None = None, priority_class: str | None = None,
             image: str = "nvcr.io/nvidia/pytorch:24.05-py3", cpu: str = "32", memory: str = "256Gi",
             node_ip: str | None = None, reason: str | None = None, message: str | None = None) -> dict:
    """A user workload pod as its controller creates it. phase Running: bound to node with a running status
    (written as is); phase Pending: unbound, pinned to node by required node affinity so the scheduler places it;
    phase Failed: bound and rejected by the kubelet at admission, as it leaves such a pod (``reason``, default
    UnexpectedAdmissionError when the device plugin cannot allocate its GPUs, and ``message``; no container
    ever started)."""
    owner = f"{'inference' if kind == 'Deployment' else 'train'}-{random_suffix(5)}"
    lab, owners, restart = {}, [], "Never"
    if kind == "Job":
        uid = _fake_uid(owner)
        name = name or f"{owner}-{random_suffix(5)}"
        lab = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": owner, "controller-uid": uid,
               "job-name": owner}
        owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": uid}]
    elif kind == "Deployment":
        rs_hash = _md5(owner)[:10]
        name, restart = name or f"{owner}-{rs_hash}-{random_suffix(5)}", "Always"
        lab = {"app": owner, "pod-template-hash": rs_hash}
        owners = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{owner}-{rs_hash}",
                   "uid": _fake_uid(owner + rs_hash)}]
    else:
        name = name or f"user-{random_suffix(8)}"
    res = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    container = {"name": "server" if kind == "Deployment" else "trainer", "image": image,
                 "command": ["torchrun", "--nproc-per-node", str(gpus or 1), "/workspace/train.py"],
                 "resources": {"limits": dict(res), "requests": dict(res)}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "labels": {**lab, **(labels or {})},
                        **({"ownerReferences": [{**o, "controller": True, "blockOwnerDeletion": True} for o in owners]}
                           if owners else {})},
           "spec": {"containers": [container], "restartPolicy": restart,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    **({"priorityClassName": priority_class} if priority_class else {})}}
    if phase == "Running":
        started, node_ip, pod_ip = rfc3339(), node_ip or _ip(node or ""), _ip(name, "10.96")
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running", "hostIP": node_ip, "hostIPs": [{"ip": node_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
            "startTime": started, "qosClass": "Guaranteed",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "containerStatuses": [{"name": container["name"], "state": {"running": {"startedAt": started}}, "lastState": {},
                                   "ready": True, "restartCount": 0, "image": image,
                                   "imageID": image.split(":")[0] + "@sha256:" + hashlib.sha256(image.encode()).hexdigest(),
                                   "containerID": "containerd://" + hashlib.sha256((name + started).encode()).hexdigest(),
                                   "started": True}]}
    elif phase == "Failed":
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Failed", "reason": reason or "UnexpectedAdmissionError",
                         "message": message or (f"Pod was rejected: Allocate failed due to requested number of devices "
                                                f"unavailable for nvidia.com/gpu. Requested: {gpus}, Available: 0, "
                                                "which is unexpected"), "startTime": rfc3339()}
    elif node:
        pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    return pod


# ---------------------------------------------------------------- bulk

_POD = ('{"kind":"Pod","apiVersion":"v1","metadata":{"name":"%(name)s","namespace":"%(ns)s","uid":"%(uid)s",'
        '"resourceVersion":"%(rv)d","creationTimestamp":"%(ts)s","labels":%(labels)s,"ownerReferences":[{"apiVersion":'
        '"%(oapi)s","kind":"%(okind)s","name":"%(owner)s","uid":"%(ouid)s","controller":true}]},"spec":{%(affinity)s'
        '"containers":[{"name":"%(cname)s","image":"%(image)s","resources":%(res)s}],"restartPolicy":"%(restart)s",'
        '%(nodename)s"schedulerName":"default-scheduler","priority":%(prio)d},"status":%(status)s}')
_RUNNING = ('{"phase":"Running","hostIP":"%s","podIP":"%s","startTime":"%s","containerStatuses":[{"name":"%s","state":'
            '{"running":{"startedAt":"%s"}},"ready":true,"restartCount":0,"image":"%s","imageID":""}],'
            '"qosClass":"Burstable"}')
_TERMINAL = ('{"phase":"%s","hostIP":"%s","podIP":"%s","startTime":"%s","containerStatuses":[{"name":"trainer","state":'
             '{"terminated":{"exitCode":%d,"reason":"%s","finishedAt":"%s"}},"ready":false,"restartCount":0,"image":"%s",'
             '"imageID":""}],"qosClass":"Burstable"}')
_PENDING = ('{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False","lastTransitionTime":"%s",'
            '"reason":"Unschedulable","message":"0/%d nodes are available: 1 Insufficient nvidia.com/gpu, %d node(s) '
            'didn\'t match Pod\'s node affinity/selector."}],"qosClass":"Burstable"}')
_PINNED = ('"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":'
           '[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["%s"]}]}]}}},')
DAEMONSETS = (("nvidia-device-plugin-daemonset", "gpu-operator", "nvcr.io/nvidia/k8s-device-plugin:v0.15.0"),
              ("nvidia-dcgm-exporter", "gpu-operator", "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5"),
              ("node-exporter", "monitoring", "quay.io/prometheus/node-exporter:v1.8.1"),
              ("kube-proxy", "kube-system", "registry.k8s.io/kube-proxy:v1.31.4"))


def _suffix(i: int) -> str:
    """5 chars of the generateName alphabet, distinct for i < 27**5 (a scrambled counter, not random)."""
    n = (i * 7919 + 12345) % 27**5  # 7919 is coprime with 27**5, so this is a bijection
    return "".join(SUFFIX_ALPHABET[(n // 27**k) % 27] for k in range(5))


def _res(cpu: str, mem: str, gpus: int) -> str:
    r = {"cpu": cpu, "memory": mem, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return json.dumps({"limits": r, "requests": r}, separators=(",", ":"))


def bulk_cluster(cluster, *, nodes: int = 5000, pods: int = 150000, seed: int = 0, gpus_per_node: int = 8,
                 busy_share: float = 0.6, terminal_share: float = 0.5, pending_share: float = 0.05,
                 cordoned_share: float = 0.02, notready_share: float = 0.01, daemonsets_per_node: int = 4,
                 node_prefix: str = "gpu-node-", namespaces: int = 20) -> dict:
    """Load a big realistic cluster straight into the store. Returns counts and timings."""
    t0, rng, store = time.perf_counter(), random.Random(seed), cluster.store
    ns_names = [f"ml-team-{i:02d}" for i in range(namespaces)] + ["gpu-operator", "monitoring", "kube-system"]
    for ns in ns_names:
        if store.current("namespaces", ns) is None:
            cluster.api.create(TYPES["namespaces"], None, {"metadata": {"name": ns}})
    products = ["NVIDIA-H100-80GB-HBM3"] * 6 + ["NVIDIA-A100-SXM4-80GB"] * 3 + ["NVIDIA-H200"]
    names = [f"{node_prefix}{i:0{max(4, len(str(nodes)))}d}" for i in range(nodes)]
    created, rows, states = time.time() - 86400 * 30, [], {}
    first_rv = store.reserve(nodes)
    for i, name in enumerate(names):
        r = rng.random()
        states[name] = "cordoned" if r < cordoned_share else "notready" if r < cordoned_share + notready_share else "ok"
        obj = gpu_node(name, gpus=gpus_per_node, product=products[i % len(products)], created=created,
                       ready="Unknown" if states[name] == "notready" else True, unschedulable=states[name] == "cordoned")
        apply_node_lifecycle(obj, cluster.settings.node_lifecycle_taints)
        obj["metadata"].update(uid=_fake_uid(name), creationTimestamp=rfc3339(created), resourceVersion=str(first_rv + i))
        rows.append((name, first_rv + i, json.dumps(obj, separators=(",", ":")).encode(), obj["metadata"]["labels"],
                     TYPES["nodes"].fields(obj), TYPES["nodes"].info(obj)))
    store.bulk_load("nodes", rows)
    t_nodes = time.perf_counter() - t0

    schedulable = [n for n in names if states[n] == "ok"]
    busy = set(rng.sample(schedulable, int(len(schedulable) * busy_share)))
    n_pending, n_terminal = int(pods * pending_share), int(pods * terminal_share)
    plan = [("ds", n, DAEMONSETS[d % len(DAEMONSETS)]) for n in names for d in range(daemonsets_per_node)][:pods]
    for n in sorted(busy):
        if len(plan) >= pods - n_pending - n_terminal:
            break
        half = gpus_per_node // 2
        plan += [("gpu", n, gpus_per_node)] if rng.random() < 0.7 else [("gpu", n, half), ("gpu", n, gpus_per_node - half)]
    busy_list = sorted(busy) or schedulable or names
    plan += [("pending", rng.choice(busy_list), gpus_per_node) for _ in range(n_pending)]
    plan += [("terminal", rng.choice(names), rng.choice((1, 2, 4, 8))) for _ in range(n_terminal)]
    plan += [("cpu", rng.choice(schedulable or names), 0) for _ in range(pods - len(plan))]
    plan = plan[:pods]

    ts, first_rv = rfc3339(created + 3600), store.reserve(len(plan))
    gpu_res = {g: _res("16", "128Gi", g) for g in range(gpus_per_node + 1)}
    gpu_req = {g: {"cpu": 16000, "memory": 128 * 2**30 * 1000, **({"nvidia.com/gpu": g * 1000} if g else {})}
               for g in range(gpus_per_node + 1)}
    cpu_res, small_req = _res("100m", "128Mi", 0), {"cpu": 100, "memory": 128 * 2**20 * 1000}
    rows, counts = [], dict.fromkeys(("ds", "gpu", "pending", "terminal", "cpu"), 0)
    for i, (cat, node, extra) in enumerate(plan):
        counts[cat] += 1
        h = f"{rng.getrandbits(128):032x}"
        uid, pod_ip = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}", f"10.96.{(i >> 8) & 255}.{i & 255}"
        t = {"uid": uid, "rv": first_rv + i, "ts": ts, "affinity": "", "nodename": f'"nodeName":"{node}",', "prio": 0}
        phase, host_ip = "Running", _ip(node)
        if cat == "ds":
            dsname, ns, image = extra
            labels = {"app.kubernetes.io/name": dsname, "controller-revision-hash": "6d8f7b9c5"}
            t.update(name=f"{dsname}-{_suffix(i)}", owner=dsname, ouid=_fake_uid(dsname), oapi="apps/v1",
                     okind="DaemonSet", cname=dsname.split("-")[-1], res=cpu_res, restart="Always",
                     prio=2000001000 if ns == "kube-system" else 0)
            req = small_req
        else:
            ns, job, image = ns_names[i % namespaces], f"train-{h[5:10]}", "nvcr.io/nvidia/pytorch:24.05-py3"
            labels = {"batch.kubernetes.io/job-name": job, "team": ns}
            t.update(name=f"{job}-{_suffix(i)}", owner=job, ouid=f"{h[16:24]}-{h[24:28]}-{h[28:32]}-{h[0:4]}-{h[4:16]}",
                     oapi="batch/v1", okind="Job", cname="trainer", restart="Never",
                     res=cpu_res if cat == "cpu" else gpu_res[extra])
            req = small_req if cat == "cpu" else gpu_req[extra]
        if cat == "pending":
            phase, pod_ip = "Pending", ""
            t.update(nodename="", affinity=_PINNED % node, status=_PENDING % (ts, nodes, nodes - 1))
        elif cat == "terminal":
            phase = "Succeeded" if rng.random() < 0.8 else "Failed"
            code = int(phase == "Failed")
            t["status"] = _TERMINAL % (phase, host_ip, pod_ip, ts, code, "Error" if code else "Completed", ts, image)
        else:
            t["status"] = _RUNNING % (host_ip, pod_ip, ts, t["cname"], ts, image)
        t.update(ns=ns, image=image, labels=json.dumps(labels, separators=(",", ":")))
        info = PodInfo(uid, "" if cat == "pending" else node, phase, False, req, t["prio"], "default-scheduler", False)
        fields = (t["name"], ns, info.node, t["restart"], "default-scheduler", "default", phase, pod_ip, "")
        rows.append((f"{ns}/{t['name']}", first_rv + i, (_POD % t).encode(), labels, fields, info))
    store.bulk_load("pods", rows)
    now = time.monotonic()  # bulk pending pods count as tried: the scheduler retries them when the cluster changes
    for *_, info in rows:
        if not info.node:
            cluster.scheduler.attempts[info.uid] = (cluster.scheduler.gen, now)
    sizes = [len(r[2]) for r in rows[:: max(1, len(rows) // 200)]]
    return {"nodes": nodes, "pods": len(rows), "busy_nodes": len(busy), "pod_categories": counts,
            "node_states": {s: list(states.values()).count(s) for s in ("ok", "cordoned", "notready")},
            "avg_pod_bytes": sum(sizes) // max(len(sizes), 1), "seconds": round(time.perf_counter() - t0, 3),
            "node_seconds": round(t_nodes, 3)}
