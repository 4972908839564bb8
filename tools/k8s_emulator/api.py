"""REST semantics of the apiserver on top of the store: create/get/list/update/patch/delete, the pod
subresources (status, log, eviction, binding), graceful pod deletion, and the hand-offs to the scheduler
and kubelet. The HTTP layer only parses requests and renders what these methods return."""

from __future__ import annotations

import time

from . import admission as adm
from .errors import ApiError, bad_request, conflict, not_found, not_implemented
from .patch import apply_patch
from .resources import TYPES, ResourceType
from .selectors import parse_field_selector, parse_label_selector
from .util import jcopy, new_uid, parse_time, random_suffix, rfc3339

SERVER_SET_META = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
    "generation",
)
HAS_STATUS = {"pods", "nodes", "namespaces"}


def qbool(q: dict, key: str) -> bool:
    """Query booleans as Go's strconv.ParseBool reads them (the python client sends "True")."""
    return str(q.get(key, "")).lower() in ("1", "t", "true")


def success_status(
    name: str | None = None,
    kind: str | None = None,
    uid: str | None = None,
    code: int | None = None,
    group: str = "",
) -> dict:
    st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if name is not None:
        d = {"name": name, "kind": kind}
        if group:
            d["group"] = group
        if uid:
            d["uid"] = uid
        st["details"] = d
    if code is not None:
        st["code"] = code
    return st


class Api:
    def __init__(self, cluster):
        self.c = cluster
        self.store = cluster.store
        self.settings = cluster.settings

    # ------------------------------------------------------------ helpers
    @staticmethod
    def key(rt: ResourceType, ns: str | None, name: str) -> str:
        return f"{ns}/{name}" if rt.namespaced else name

    def _require_namespace(self, ns: str):
        if self.store.current("namespaces", ns) is None:
            if self.settings.auto_create_namespaces:
                self.create(TYPES["namespaces"], None, {"metadata": {"name": ns}}, {})
            else:
                raise not_found("namespaces", ns)

    def current(self, rt: ResourceType, ns: str | None, name: str):
        v = self.store.current(rt.plural, self.key(rt, ns, name))
        if v is None:
            raise not_found(rt.plural, name, rt.group)
        return v

    def _priority_class(self, name: str | None):
        if name is not None:
            v = self.store.current("priorityclasses", name)
            return v.obj() if v else None
        for _, v in self.store.all_current("priorityclasses"):
            if v.obj().get("globalDefault"):
                return v.obj()
        return None

    # ------------------------------------------------------------ read
    def get(self, rt, ns, name):
        return self.current(rt, ns, name)

    def list(self, rt: ResourceType, ns: str | None, q: dict):
        if qbool(q, "watch"):
            raise not_implemented(
                "k8s_emulator does not implement watch; poll with list/get instead "
                f"(GET {rt.plural}?watch=true)"
            )
        lsel = parse_label_selector(q.get("labelSelector"))
        fsel = parse_field_selector(q.get("fieldSelector"), rt.field_index)
        if q.get("resourceVersionMatch") and not q.get("resourceVersion"):
            raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise bad_request(f"limit: Invalid value: {q.get('limit')!r}") from None
        if (
            ns is not None
            and rt.namespaced
            and ns
            and self.store.current("namespaces", ns) is None
            and not self.settings.auto_create_namespaces
        ):
            pass  # listing in a missing namespace returns an empty list, like the real apiserver
        return self.store.list(
            rt.plural, ns if rt.namespaced else None, lsel, fsel, max(limit, 0), q.get("continue")
        )

    # ------------------------------------------------------------ create
    def create(self, rt: ResourceType, ns: str | None, body: dict, q: dict, *, static: bool = False):
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        obj = jcopy(body)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        meta = obj.setdefault("metadata", {}) or {}
        obj["metadata"] = meta
        for k in SERVER_SET_META:
            meta.pop(k, None)
        if rt.namespaced:
            if meta.get("namespace") and ns and meta["namespace"] != ns:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns or meta.get("namespace") or "default"
            self._require_namespace(meta["namespace"])
        else:
            meta.pop("namespace", None)
        with self.store.lock:
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(8):
                    meta["name"] = meta["generateName"] + random_suffix()
                    if (
                        self.store.current(rt.plural, self.key(rt, meta.get("namespace"), meta["name"]))
                        is None
                    ):
                        break
            getattr(self, f"_admit_{rt.plural}", lambda o: None)(obj)
            name = meta.get("name") or ""
            key = self.key(rt, meta.get("namespace"), name)
            if self.store.current(rt.plural, key) is not None:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{rt.plural}{"." + rt.group if rt.group else ""} "{name}" already exists',
                    {"name": name, "kind": rt.plural, **({"group": rt.group} if rt.group else {})},
                )
            meta["uid"] = new_uid()
            meta["creationTimestamp"] = rfc3339()
            if rt.plural == "pods" and not static:
                obj["status"] = {"phase": "Pending", "qosClass": adm.qos_class(obj["spec"])}
            if q.get("dryRun"):
                return _Detached(obj)
            v = self.store.put(rt.plural, key, obj)
            if rt.plural == "pods" and obj["spec"].get("nodeName") and not static:
                self.c.kubelet.adopt(key, obj, prebound=True)
            return v

    def _admit_pods(self, pod):
        adm.default_pod(pod)
        adm.raise_if(
            "Pod",
            pod["metadata"].get("name") or pod["metadata"].get("generateName", ""),
            adm.validate_pod(pod),
        )
        adm.admit_pod(pod, self._priority_class)

    def _admit_nodes(self, node):
        adm.raise_if("Node", node["metadata"].get("name", ""), adm.validate_node(node))
        adm.apply_node_lifecycle(node, self.settings.node_lifecycle_taints)
        node.setdefault("spec", {})
        node.setdefault("status", {})

    def _admit_configmaps(self, cm):
        adm.raise_if("ConfigMap", cm["metadata"].get("name", ""), adm.validate_configmap(cm))

    def _admit_priorityclasses(self, pc):
        name = pc["metadata"].get("name", "")
        causes = adm.validate_priorityclass(pc)
        if pc.get("globalDefault"):
            other = self._priority_class(None)
            if other is not None and other["metadata"]["name"] != name:
                causes.append(
                    adm.Cause(
                        "globalDefault",
                        "Invalid",
                        True,
                        f"PriorityClass {other['metadata']['name']} "
                        "is already marked as default. Only one default can exist",
                    )
                )
        adm.raise_if("PriorityClass", name, causes, "scheduling.k8s.io")
        pc.setdefault("preemptionPolicy", "PreemptLowerPriority")

    def _admit_namespaces(self, ns):
        adm.raise_if("Namespace", ns["metadata"].get("name", ""), adm.validate_namespace(ns))
        ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = ns["metadata"]["name"]
        ns["spec"] = {"finalizers": ["kubernetes"]}
        ns["status"] = {"phase": "Active"}

    def _admit_events(self, ev):
        ev.setdefault("count", 1)
        ev.setdefault("firstTimestamp", rfc3339())
        ev.setdefault("lastTimestamp", ev["firstTimestamp"])

    # ------------------------------------------------------------ update / patch
    def update(self, rt, ns, name, body: dict, q: dict, sub: str | None = None):
        with self.store.lock:
            cur = self.current(rt, ns, name)
            new = jcopy(body)
            bname = (new.get("metadata") or {}).get("name")
            if bname and bname != name:
                raise bad_request(
                    f"the name of the object ({bname}) does not match the name on the URL ({name})"
                )
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != str(cur.rv):
                raise conflict(
                    rt.plural,
                    name,
                    "the object has been modified; please apply your changes to the "
                    "latest version and try again",
                    rt.group,
                )
            return self._write_update(rt, ns, name, cur, new, sub, q)

    def patch(self, rt, ns, name, body, content_type: str, q: dict, sub: str | None = None):
        with self.store.lock:
            cur = self.current(rt, ns, name)
            new = apply_patch(jcopy(cur.obj()), body, content_type)
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != str(cur.rv):
                raise conflict(
                    rt.plural,
                    name,
                    "the object has been modified; please apply your changes to the "
                    "latest version and try again",
                    rt.group,
                )
            return self._write_update(rt, ns, name, cur, new, sub, q)

    def _write_update(self, rt, ns, name, cur, new: dict, sub, q):
        old = cur.obj()
        if sub == "status":
            status = new.get("status")
            new = jcopy(old)
            new["status"] = status if status is not None else {}
        elif rt.plural in HAS_STATUS:
            new["status"] = jcopy(old.get("status") or {})
        new["kind"], new["apiVersion"] = rt.kind, rt.api_version
        meta = new.setdefault("metadata", {})
        for k in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "name",
            "generateName",
        ):
            if k in old["metadata"]:
                meta[k] = old["metadata"][k]
            else:
                meta.pop(k, None)
        meta.pop("resourceVersion", None)
        causes: list = []
        if sub != "status":
            adm.validate_metadata(new, causes)
        kind = rt.kind
        if rt.plural == "pods" and sub != "status":
            causes += adm.pod_update_causes(old, new)
        elif rt.plural == "nodes":
            causes += adm.validate_node(new)
            adm.apply_node_lifecycle(new, self.settings.node_lifecycle_taints)
        elif rt.plural == "configmaps":
            causes += adm.validate_configmap(new) + adm.configmap_update_causes(old, new)
        elif rt.plural == "priorityclasses":
            causes += adm.priorityclass_update_causes(old, new)
        adm.raise_if(kind, name, causes, rt.group)
        cmp_old = {k: v for k, v in old.items()}
        cmp_old["metadata"] = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
        if new == cmp_old or q.get("dryRun"):
            return cur if new == cmp_old else _Detached(new)  # no-op writes don't bump resourceVersion
        return self.store.put(rt.plural, self.key(rt, ns, name), new)

    # ------------------------------------------------------------ delete
    def delete(self, rt, ns, name, body: dict | None, q: dict):
        opts = dict(body or {})
        if q.get("gracePeriodSeconds") is not None:
            opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        with self.store.lock:
            cur = self.current(rt, ns, name)
            pre = opts.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != cur.obj()["metadata"].get("uid"):
                raise conflict(
                    rt.plural,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in "
                    f"object meta: {cur.obj()['metadata'].get('uid')}",
                    rt.group,
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != str(cur.rv):
                raise conflict(
                    rt.plural,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: {cur.rv}",
                    rt.group,
                )
            if q.get("dryRun"):
                return (
                    cur
                    if rt.plural == "pods"
                    else success_status(name, rt.plural, cur.obj()["metadata"].get("uid"), group=rt.group)
                )
            key = self.key(rt, ns, name)
            if rt.plural == "pods":
                return self.delete_pod(key, cur, opts.get("gracePeriodSeconds"))
            uid = cur.obj()["metadata"].get("uid")
            if rt.plural == "namespaces":
                self._delete_namespace(name)
            if rt.plural == "nodes":
                self._pod_gc(name)
            self.store.remove(rt.plural, key)
            return success_status(name, rt.plural, uid, group=rt.group)

    def delete_collection(self, rt, ns, body, q):
        lr = self.list(rt, ns, {k: v for k, v in q.items() if k in ("labelSelector", "fieldSelector")})
        import json

        names = [json.loads(raw)["metadata"]["name"] for raw in lr.items]
        out = []
        for n in names:
            try:
                out.append(self.delete(rt, ns, n, body, q))
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return out

    def delete_pod(self, key: str, v, grace):
        obj, info = v.obj(), v.info
        if grace is None:
            grace = int(obj["spec"].get("terminationGracePeriodSeconds", 30))
        grace = max(int(grace), 0)
        now = time.time()
        if info.deleting:
            cur_grace = obj["metadata"].get("deletionGracePeriodSeconds", 30)
            if grace >= cur_grace:
                return v
        new = jcopy(obj)
        if not info.node or info.terminal or grace == 0:
            new["metadata"]["deletionTimestamp"] = rfc3339(now)
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            self.store.remove("pods", key)
            self.c.kubelet.kill(info.uid)
            return _Detached(new)
        new["metadata"]["deletionTimestamp"] = rfc3339(now + grace)
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        nv = self.store.put("pods", key, new)
        self.c.kubelet.terminate(key, info.uid, grace)
        return nv

    def _delete_namespace(self, ns: str):
        for plural, rt in TYPES.items():
            if not rt.namespaced:
                continue
            for key, v in self.store.all_current(plural):
                if key.startswith(ns + "/"):
                    self.store.remove(plural, key)
                    if plural == "pods":
                        self.c.kubelet.kill(v.info.uid)

    def _pod_gc(self, node: str):
        """PodGC: pods bound to a node that no longer exists are force-deleted (DeletionByPodGC)."""
        for key in self.store.keys_by_index("pods", "node", node):
            v = self.store.current("pods", key)
            if v is None:
                continue
            self._add_condition(key, v, "DisruptionTarget", "DeletionByPodGC", "PodGC: node no longer exists")
            self.store.remove("pods", key)
            self.c.kubelet.kill(v.info.uid)

    def _add_condition(self, key, v, type_, reason, message):
        pod = jcopy(v.obj())
        conds = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != type_]
        conds.insert(
            0,
            {
                "type": type_,
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(),
                "reason": reason,
                "message": message,
            },
        )
        pod.setdefault("status", {})["conditions"] = conds
        return self.store.put("pods", key, pod)

    def disrupt(self, key: str, uid: str, reason: str, message: str, grace=None):
        """DisruptionTarget condition, then graceful deletion (preemption, Eviction API)."""
        with self.store.lock:
            v = self.store.current("pods", key)
            if v is None or v.info.uid != uid or v.info.deleting:
                return
            nv = self._add_condition(key, v, "DisruptionTarget", reason, message)
            self.delete_pod(key, nv, grace)

    # ------------------------------------------------------------ pod subresources
    def evict(self, ns: str, name: str, body: dict):
        bname = ((body or {}).get("metadata") or {}).get("name")
        if bname and bname != name:
            raise bad_request("name in URL does not match name in Eviction object")
        with self.store.lock:
            v = self.current(TYPES["pods"], ns, name)
            grace = ((body or {}).get("deleteOptions") or {}).get("gracePeriodSeconds")
            key = f"{ns}/{name}"
            if v.info.terminal or not v.info.node:
                self.delete_pod(key, v, 0)
            else:
                self.disrupt(key, v.info.uid, "EvictionByEvictionAPI", "Eviction API: evicting", grace)
        return success_status(code=201)

    def bind(self, ns: str, name: str, body: dict):
        target = ((body or {}).get("target") or {}).get("name")
        with self.store.lock:
            v = self.current(TYPES["pods"], ns, name)
            if not target:
                raise adm.invalid("Binding", name, [adm.Cause("target.name", "Required")])
            if v.info.node:
                raise conflict(
                    "pods/binding", name, f'pod {name} is already assigned to node "{v.info.node}"'
                )
            if v.info.deleting:
                raise conflict(
                    "pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host"
                )
            self.c.scheduler.bind(f"{ns}/{name}", target, event=False)
        return success_status(code=201)

    def log_source(self, ns: str, name: str, q: dict):
        """(container object or None, options) for GET .../log, with the apiserver's 400s."""
        v = self.current(TYPES["pods"], ns, name)
        pod = v.obj()
        spec = pod.get("spec") or {}
        names = [c["name"] for c in spec.get("containers") or []]
        inits = [c["name"] for c in spec.get("initContainers") or []]
        container = q.get("container")
        if not container:
            if len(names) != 1:
                extra = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
                raise bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(names)}]{extra}"
                )
            container = names[0]
        elif container not in names and container not in inits:
            raise bad_request(f"container {container} is not valid for pod {name}")
        if qbool(q, "previous"):
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        if not v.info.node:
            raise bad_request(f'pod "{name}" does not have a host assigned')
        c = self.c.kubelet.log_buffer(v.info.uid, container)
        if c is None or (c.state == "waiting" and c.started_at is None and not c.log.size):
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            st = next(
                (
                    s
                    for s in statuses + ((pod.get("status") or {}).get("initContainerStatuses") or [])
                    if s.get("name") == container
                ),
                None,
            )
            waiting = ((st or {}).get("state") or {}).get("waiting")
            if c is not None or waiting:
                reason = (waiting or {}).get("reason") or "ContainerCreating"
                raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
            return None, {}  # static (simulated) pod: it has no log output
        opts = {"timestamps": qbool(q, "timestamps"), "follow": qbool(q, "follow")}
        if q.get("sinceSeconds"):
            opts["since"] = time.time() - int(q["sinceSeconds"])
        elif q.get("sinceTime"):
            opts["since"] = parse_time(q["sinceTime"])
        if q.get("tailLines"):
            opts["tail"] = int(q["tailLines"])
        if q.get("limitBytes"):
            opts["limit_bytes"] = int(q["limitBytes"])
        return c, opts

    # ------------------------------------------------------------ used by fixtures / control API
    def finish_static_pod(
        self,
        key: str,
        uid: str,
        *,
        phase: str,
        reason: str | None = None,
        message: str | None = None,
        exit_code: int = 0,
        evicted: bool = False,
    ):
        with self.store.lock:
            v = self.store.current("pods", key)
            if v is None or v.info.uid != uid or v.info.terminal:
                return
            pod = jcopy(v.obj())
            st = pod.setdefault("status", {})
            st["phase"] = phase
            if reason:
                st["reason"], st["message"] = reason, message or ""
            now = rfc3339()
            code = 137 if evicted else exit_code
            for cs in st.get("containerStatuses") or []:
                started = ((cs.get("state") or {}).get("running") or {}).get("startedAt") or now
                cs["state"] = {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                        "startedAt": started,
                        "finishedAt": now,
                        **({"containerID": cs["containerID"]} if cs.get("containerID") else {}),
                    }
                }
                cs["ready"], cs["started"] = False, False
            conds = [
                c for c in st.get("conditions") or [] if c.get("type") not in ("Ready", "ContainersReady")
            ]
            conds += [
                {
                    "type": t,
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                    "reason": "PodCompleted",
                }
                for t in ("Ready", "ContainersReady")
            ]
            if evicted:
                conds.insert(
                    0,
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                        "reason": "TerminationByKubelet",
                        "message": message,
                    },
                )
            st["conditions"] = conds
            self.store.put("pods", key, pod)
            if evicted:
                self.c.events.emit(
                    pod, "Evicted", message, type_="Warning", component="kubelet", host=v.info.node
                )


class _Detached:
    """A result that was not stored (dry run, immediately deleted pod): quacks like a store Version."""

    def __init__(self, obj: dict):
        self._obj = obj

    def obj(self):
        return self._obj

    def raw(self):
        from .util import dumps

        return dumps(self._obj)
