"""REST semantics of the apiserver on top of the store: create/get/list/update/patch/delete, the pod
subresources (status, log, eviction, binding), graceful pod deletion, the PersistentVolume binder, and the
hand-offs to the scheduler and kubelet. The HTTP layer only parses requests and renders the results."""

from __future__ import annotations

import time
import urllib.parse

from . import admission as adm
from .errors import ApiError, Cause, already_exists, bad_request, conflict, not_found, raise_if
from .resources import TYPES, ResourceType
from .selectors import parse_field_selector, parse_label_selector
from .util import dumps, jcopy, new_uid, parse_time, random_suffix, rfc3339

SERVER_SET_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "selfLink", "managedFields", "generation")
KEPT_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "name",
             "generateName")
HAS_STATUS = {"pods", "nodes", "namespaces", "persistentvolumeclaims", "persistentvolumes"}
MERGE_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def qbool(q: dict, key: str) -> bool:
    """Query booleans as Go's strconv.ParseBool reads them (the python client sends "True")."""
    return str(q.get(key, "")).lower() in ("1", "t", "true")


def success_status(name=None, kind=None, uid=None, group="", code=None) -> dict:
    st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if name is not None:
        st["details"] = {"name": name, "kind": kind, **({"group": group} if group else {}), "uid": uid}
    if code is not None:
        st["code"] = code
    return st


def merge_patch(target, patch):
    """JSON merge patch (RFC 7386): maps merge, a null deletes, lists are replaced."""
    if not isinstance(patch, dict):
        return jcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# Lists a strategic merge patch merges element by element, by their patchMergeKey (k8s.io/api core/v1
# types.go: `patchStrategy:"merge" patchMergeKey:"type"` on NodeStatus.Conditions and
# PodStatus.Conditions); every other list is replaced, as in a merge patch (a difference for lists
# like containers or taints that no client of this project patches by key).
STRATEGIC_LISTS = {"nodes": {("status", "conditions"): "type"}, "pods": {("status", "conditions"): "type"}}


def strategic_merge(target, patch, lists: dict, path: tuple = ()):
    """A strategic merge patch as apimachinery's strategicpatch applies it to the lists above: the
    element with the same merge key is merged, a new one appended (existing ones keep their order),
    `{"<key>": ..., "$patch": "delete"}` removes it; `$setElementOrder/...` and `$retainKeys`
    directives (kubectl sends them) only order or prune and are not stored."""
    if not isinstance(patch, dict):
        return jcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k == "$retainKeys":
            continue
        key = lists.get(path + (k,))
        if v is None:
            out.pop(k, None)
        elif key and isinstance(v, list):
            out[k] = _merge_list(out.get(k) or [], v, key, lists, path + (k,))
        else:
            out[k] = strategic_merge(out.get(k), v, lists, path + (k,))
    return out


def _merge_list(current: list, patch: list, key: str, lists: dict, path: tuple) -> list:
    result = jcopy(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {key}")
        at = next((i for i, x in enumerate(result) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                result.pop(at)
            continue
        element = {k: v for k, v in item.items() if k != "$patch"}
        if at is None:
            result.append(strategic_merge({}, element, lists, path))
        else:
            result[at] = strategic_merge(result[at], element, lists, path)
    return result


class Detached:
    """A result that is not (or no longer) stored, e.g. a pod deleted at once: quacks like a Version."""

    def __init__(self, obj: dict):
        self._obj = obj

    def obj(self):
        return self._obj

    def raw(self):
        return dumps(self._obj)


class Api:
    def __init__(self, cluster):
        self.c, self.store, self.settings = cluster, cluster.store, cluster.settings

    @staticmethod
    def key(rt: ResourceType, ns: str | None, name: str) -> str:
        return f"{ns}/{name}" if rt.namespaced else name

    def current(self, rt: ResourceType, ns: str | None, name: str):
        v = self.store.current(rt.plural, self.key(rt, ns, name))
        if v is None:
            raise not_found(rt.plural, name, rt.group)
        return v

    def priority_class(self, name: str | None):
        if name is not None:
            v = self.store.current("priorityclasses", name)
            return v.obj() if v else None
        return next((v.obj() for _, v in self.store.all_current("priorityclasses") if v.obj().get("globalDefault")),
                    None)

    # ------------------------------------------------------------ read
    def list(self, rt: ResourceType, ns: str | None, q: dict, *, stream: bool = False):
        """``stream``: the caller can write the items as they are produced (the HTTP layer)."""
        if qbool(q, "watch"):
            raise ApiError(501, "NotImplemented", "k8s_emulator does not implement watch; poll with list/get "
                                                  f"instead (GET {rt.plural}?watch=true)")
        lsel = parse_label_selector(q.get("labelSelector"))
        fsel = parse_field_selector(q.get("fieldSelector"), rt.field_index)
        try:
            limit = max(int(q.get("limit") or 0), 0)
        except ValueError:
            raise bad_request(f"limit: Invalid value: {q.get('limit')!r}") from None
        source = self.read_source(q, limit)
        namespace = ns if rt.namespaced else None
        if stream and not limit and not q.get("continue") and self.c.version_at_least(1, 33):
            # StreamingCollectionEncodingToJSON (beta and on from 1.33): items encoded one by one as the
            # response is written, never the whole list at once
            lr = self.store.stream(rt.plural, namespace, lsel, fsel, indexed=source == "watch-cache")
        else:
            lr = self.store.list(rt.plural, namespace, lsel, fsel, limit, q.get("continue"),
                                 (q.get("labelSelector"), q.get("fieldSelector")), indexed=source == "watch-cache")
        self.c.count_read(rt.plural, source, lr.examined)
        return lr

    def read_source(self, q: dict, limit: int) -> str:
        """Where a kube-apiserver of ``kubernetes_version`` serves a list from, as its cacher decides
        (shouldDelegateList, 1.31/1.32): ``etcd`` for a continue token, an Exact match, a limit without
        resourceVersion=0, or a consistent read (no resourceVersion) before 1.31, where
        ConsistentListFromCache is off; ``watch-cache`` otherwise. A read from etcd looks at every
        object of the kind, selectors applied after; the cache uses its spec.nodeName index for pods."""
        rv, match = q.get("resourceVersion") or "", q.get("resourceVersionMatch") or ""
        consistent_from_cache = self.c.version_at_least(1, 31)
        if q.get("continue") or (match and match != "NotOlderThan") or (limit > 0 and rv != "0") \
                or (not rv and not consistent_from_cache):
            return "etcd"
        return "watch-cache"

    # ------------------------------------------------------------ create
    def create(self, rt: ResourceType, ns: str | None, body: dict, *, static: bool = False):
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        obj = jcopy(body)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        meta = obj["metadata"] = obj.get("metadata") or {}
        for k in SERVER_SET_META:
            meta.pop(k, None)
        if rt.namespaced:
            if meta.get("namespace") and ns and meta["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                                  "request")
            meta["namespace"] = ns or meta.get("namespace") or "default"
            if self.store.current("namespaces", meta["namespace"]) is None:
                raise not_found("namespaces", meta["namespace"])
        else:
            meta.pop("namespace", None)
        with self.store.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + random_suffix()
            name = meta.get("name") or ""
            self._admit(rt, obj, None)
            key = self.key(rt, meta.get("namespace"), name)
            if self.store.current(rt.plural, key) is not None:
                raise already_exists(rt.plural, name, rt.group)
            meta["uid"], meta["creationTimestamp"] = new_uid(), rfc3339()
            if rt.plural == "pods" and not static:
                obj["status"] = {"phase": "Pending", "qosClass": adm.qos_class(obj["spec"])}
            v = self.store.put(rt.plural, key, obj)
            if rt.plural == "pods" and obj["spec"].get("nodeName") and not static:
                self.c.kubelet.adopt(key, obj)
            if rt.plural in ("persistentvolumeclaims", "persistentvolumes"):
                self.bind_volumes()
            if rt.plural == "namespaces":
                self.c.provision_claims([name])
            return self.store.current(rt.plural, key) or v

    def _admit(self, rt: ResourceType, obj: dict, old: dict | None):
        name, kind = obj["metadata"].get("name") or obj["metadata"].get("generateName", ""), rt.plural
        if kind == "pods":
            if old is None:
                adm.default_pod(obj)
                raise_if("Pod", name, adm.validate_pod(obj))
                adm.admit_pod(obj, self.priority_class)
            else:
                raise_if("Pod", name, adm.validate_metadata(obj) + adm.pod_update_causes(old, obj))
        elif kind == "nodes":
            raise_if("Node", name, adm.validate_node(obj))
            adm.apply_node_lifecycle(obj, self.settings.node_lifecycle_taints)
            obj.setdefault("spec", {})
            obj.setdefault("status", {})
        elif kind == "configmaps":
            raise_if("ConfigMap", name, adm.validate_configmap(obj, old))
        elif kind == "priorityclasses":
            causes = adm.validate_priorityclass(obj) if old is None else adm.validate_metadata(obj)
            other = self.priority_class(None)
            if obj.get("globalDefault") and other is not None and other["metadata"]["name"] != name:
                causes.append(Cause("globalDefault", "Invalid", True, f"PriorityClass {other['metadata']['name']} "
                                    "is already marked as default. Only one default can exist"))
            raise_if("PriorityClass", name, causes, "scheduling.k8s.io")
            obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
        elif kind == "namespaces":
            raise_if("Namespace", name, adm.validate_metadata(obj, label_name=True))
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj.setdefault("status", {"phase": "Active"})
        elif kind == "storageclasses":
            causes = adm.validate_metadata(obj)
            if not obj.get("provisioner"):
                causes.append(Cause("provisioner", "Required"))
            if obj.get("volumeBindingMode", "Immediate") not in ("Immediate", "WaitForFirstConsumer"):
                causes.append(Cause("volumeBindingMode", "Unsupported", obj["volumeBindingMode"],
                                    'supported values: "Immediate", "WaitForFirstConsumer"'))
            raise_if("StorageClass", name, causes, "storage.k8s.io")
            obj.setdefault("volumeBindingMode", "Immediate")
            obj.setdefault("reclaimPolicy", "Delete")
        elif kind in ("persistentvolumeclaims", "persistentvolumes"):
            raise_if(rt.kind, name, adm.validate_metadata(obj))
            obj.setdefault("spec", {})
            obj.setdefault("status", {"phase": "Pending" if kind == "persistentvolumeclaims" else "Available"})
        elif kind == "events" and old is None:
            obj.setdefault("count", 1)
            obj.setdefault("firstTimestamp", rfc3339())
            obj.setdefault("lastTimestamp", obj["firstTimestamp"])
        else:
            raise_if(rt.kind, name, adm.validate_metadata(obj))

    # ------------------------------------------------------------ update / patch
    def update(self, rt, ns, name, body, sub: str | None = None, content_type: str | None = None):
        """PUT (content_type None) or PATCH (a JSON merge or strategic merge patch)."""
        with self.store.lock:
            cur = self.current(rt, ns, name)
            if content_type is None:
                new = jcopy(body or {})
                if (new.get("metadata") or {}).get("name") not in (None, name):
                    raise bad_request(f"the name of the object ({new['metadata']['name']}) does not match the "
                                      f"name on the URL ({name})")
            elif content_type.split(";")[0].strip() == STRATEGIC_MERGE:
                new = strategic_merge(jcopy(cur.obj()), body or {}, STRATEGIC_LISTS.get(rt.plural, {}))
            elif content_type.split(";")[0].strip() in MERGE_PATCH_TYPES:
                new = merge_patch(jcopy(cur.obj()), body or {})
            else:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                               f"accepted media types include: {', '.join(MERGE_PATCH_TYPES)} (got {content_type})")
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != str(cur.rv):
                raise conflict(rt.plural, name, MODIFIED, rt.group)
            return self._write_update(rt, ns, name, cur, new, sub)

    def _write_update(self, rt, ns, name, cur, new: dict, sub):
        old = cur.obj()
        if sub == "status":
            new = {**jcopy(old), "status": new.get("status") or {}}
        elif rt.plural in HAS_STATUS:
            new["status"] = jcopy(old.get("status") or {})
        new["kind"], new["apiVersion"] = rt.kind, rt.api_version
        meta = new["metadata"] = new.get("metadata") or {}
        for k in KEPT_META:
            meta.pop(k, None)
            if k in old["metadata"]:
                meta[k] = old["metadata"][k]
        meta.pop("resourceVersion", None)
        if sub != "status" or rt.plural == "nodes":
            self._admit(rt, new, old)
        if new == {**old, "metadata": {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}}:
            return cur  # a no-op write does not bump the resourceVersion
        v = self.store.put(rt.plural, self.key(rt, ns, name), new)
        if rt.plural in ("persistentvolumeclaims", "persistentvolumes"):
            self.bind_volumes()
        return v

    # ------------------------------------------------------------ delete
    def delete(self, rt, ns, name, body: dict | None, q: dict):
        opts = dict(body or {})
        if q.get("gracePeriodSeconds") is not None:
            opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        with self.store.lock:
            cur = self.current(rt, ns, name)
            uid = cur.obj()["metadata"].get("uid")
            pre = opts.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != uid:
                raise conflict(rt.plural, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in "
                                                f"object meta: {uid}", rt.group)
            if pre.get("resourceVersion") and pre["resourceVersion"] != str(cur.rv):
                raise conflict(rt.plural, name, "Precondition failed: ResourceVersion in precondition: "
                                                f"{pre['resourceVersion']}, ResourceVersion in object meta: {cur.rv}",
                               rt.group)
            key = self.key(rt, ns, name)
            if rt.plural == "pods":
                return self.delete_pod(key, cur, opts.get("gracePeriodSeconds"))
            if rt.plural == "namespaces":
                for plural, t in TYPES.items():
                    for k, v in self.store.all_current(plural) if t.namespaced else ():
                        if k.startswith(name + "/"):
                            self.store.remove(plural, k)
                            if plural == "pods":
                                self.c.kubelet.kill(v.info.uid)
            if rt.plural == "nodes":  # PodGC: pods bound to a node that no longer exists are force-deleted
                for k in self.store.keys_on_node(name):
                    v = self.store.current("pods", k)
                    self.add_condition(k, v, "DisruptionTarget", "DeletionByPodGC", "PodGC: node no longer exists")
                    self.store.remove("pods", k)
                    self.c.kubelet.kill(v.info.uid)
            self.store.remove(rt.plural, key)
            return success_status(name, rt.plural, uid, rt.group)

    def delete_pod(self, key: str, v, grace):
        """Graceful deletion: a bound, running pod gets deletionTimestamp and stays (Terminating) until its
        kubelet has stopped the containers and confirms; anything else goes at once."""
        obj, info = v.obj(), v.info
        grace = max(int(obj["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace), 0)
        if info.deleting and grace >= obj["metadata"].get("deletionGracePeriodSeconds", 30):
            return v
        new = jcopy(obj)
        if not info.node or info.terminal or grace == 0:
            new["metadata"].update(deletionTimestamp=rfc3339(), deletionGracePeriodSeconds=0)
            self.store.remove("pods", key)
            self.c.kubelet.kill(info.uid)
            return Detached(new)
        new["metadata"].update(deletionTimestamp=rfc3339(time.time() + grace), deletionGracePeriodSeconds=grace)
        nv = self.store.put("pods", key, new)
        self.c.kubelet.terminate(key, info.uid, grace)
        return nv

    def add_condition(self, key, v, type_, reason, message):
        """A pod condition, as the controllers write them; DisruptionTarget only from Kubernetes 1.26 on."""
        if type_ == "DisruptionTarget" and not self.c.disruption_conditions():
            return v
        pod = jcopy(v.obj())
        conds = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != type_]
        conds.insert(0, {"type": type_, "status": "True", "lastProbeTime": None, "lastTransitionTime": rfc3339(),
                         "reason": reason, "message": message})
        pod.setdefault("status", {})["conditions"] = conds
        return self.store.put("pods", key, pod)

    def disrupt(self, key: str, uid: str, reason: str, message: str, grace=None):
        """DisruptionTarget condition, then graceful deletion (preemption, Eviction API)."""
        with self.store.lock:
            v = self.store.current("pods", key)
            if v is not None and v.info.uid == uid and not v.info.deleting:
                self.delete_pod(key, self.add_condition(key, v, "DisruptionTarget", reason, message), grace)

    # ------------------------------------------------------------ pod subresources
    def evict(self, ns: str, name: str, body: dict):
        if ((body or {}).get("metadata") or {}).get("name") not in (None, name):
            raise bad_request("name in URL does not match name in Eviction object")
        with self.store.lock:
            v = self.current(TYPES["pods"], ns, name)
            grace = ((body or {}).get("deleteOptions") or {}).get("gracePeriodSeconds")
            if v.info.terminal or not v.info.node:
                self.delete_pod(f"{ns}/{name}", v, 0)
            else:
                self.disrupt(f"{ns}/{name}", v.info.uid, "EvictionByEvictionAPI", "Eviction API: evicting", grace)
        return success_status(code=201)

    def bind(self, ns: str, name: str, body: dict):
        target = ((body or {}).get("target") or {}).get("name")
        with self.store.lock:
            v = self.current(TYPES["pods"], ns, name)
            if not target:
                raise_if("Binding", name, [Cause("target.name", "Required")])
            if v.info.node:
                raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{v.info.node}"')
            if v.info.deleting:
                raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
            self.c.scheduler.bind(f"{ns}/{name}", target, event=False)
        return success_status(code=201)

    def log_source(self, ns: str, name: str, q: dict):
        """(container or None, options) for GET .../log, with the apiserver's 400s, and its 500 when the
        kubelet the log is proxied to cannot be reached."""
        v = self.current(TYPES["pods"], ns, name)
        pod = v.obj()
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        names = [c["name"] for c in spec.get("containers") or []]
        inits = [c["name"] for c in spec.get("initContainers") or []]
        container = q.get("container")
        if not container:
            if len(names) != 1:
                extra = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
                raise bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                  f"[{' '.join(names)}]{extra}")
            container = names[0]
        elif container not in names + inits:
            raise bad_request(f"container {container} is not valid for pod {name}")
        if qbool(q, "previous"):
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        if not v.info.node:
            raise bad_request(f'pod "{name}" does not have a host assigned')
        unreachable = self.settings.unreachable_kubelets
        if "*" in unreachable or v.info.node in unreachable:
            ip = self.c.kubelet.host_ip(v.info.node)
            opts = urllib.parse.urlencode(sorted(
                [(k, "true") for k in ("follow", "timestamps") if qbool(q, k)]
                + [(k, q[k]) for k in ("limitBytes", "sinceSeconds", "sinceTime", "tailLines") if q.get(k)]))
            url = f"https://{ip}:10250/containerLogs/{ns}/{name}/{container}" + (f"?{opts}" if opts else "")
            raise ApiError(500, None, f'Get "{url}": dial tcp {ip}:10250: connect: connection refused')
        c = self.c.kubelet.container(v.info.uid, container)
        if c is None or (c.state == "waiting" and c.started_at is None and not c.log.size):
            st = next((s for s in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
                       if s.get("name") == container), {})
            waiting = (st.get("state") or {}).get("waiting")
            if c is not None or waiting:
                reason = (waiting or {}).get("reason") or "ContainerCreating"
                raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
            return None, {}  # a simulated pod without a runtime has no log output
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

    # ------------------------------------------------------------ PersistentVolume binder
    def bind_volumes(self):
        """The PV controller's immediate binding: a Pending claim binds an Available volume it names
        (spec.volumeName) or one of its storage class with enough capacity; both become Bound."""
        with self.store.lock:
            pvs = [v.obj() for _, v in self.store.all_current("persistentvolumes")
                   if (v.obj().get("status") or {}).get("phase") == "Available"]
            for key, v in self.store.all_current("persistentvolumeclaims"):
                claim = v.obj()
                if (claim.get("status") or {}).get("phase") != "Pending":
                    continue
                spec = claim.get("spec") or {}
                want = adm.quantity_milli(((spec.get("resources") or {}).get("requests") or {}).get("storage", "0"))
                pv = next((p for p in pvs if p["metadata"]["name"] == spec.get("volumeName") or not spec.get(
                    "volumeName") and (p["spec"].get("storageClassName") or "") == (spec.get("storageClassName") or "")
                    and adm.quantity_milli((p["spec"].get("capacity") or {}).get("storage", "0")) >= want), None)
                if pv is None:
                    continue
                pvs.remove(pv)
                pv = jcopy(pv)
                pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": claim["metadata"]["namespace"],
                                          "name": claim["metadata"]["name"], "uid": claim["metadata"]["uid"],
                                          "apiVersion": "v1"}
                pv["status"] = {"phase": "Bound"}
                self.store.put("persistentvolumes", pv["metadata"]["name"], pv)
                claim = jcopy(claim)
                claim["spec"]["volumeName"] = pv["metadata"]["name"]
                claim["status"] = {"phase": "Bound", "accessModes": pv["spec"].get("accessModes") or [],
                                   "capacity": pv["spec"].get("capacity") or {}}
                self.store.put("persistentvolumeclaims", key, claim)
