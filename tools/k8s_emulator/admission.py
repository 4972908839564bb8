"""Validation, defaulting and admission (Priority, DefaultTolerationSeconds) as the apiserver applies them on
create/update. Messages follow the apiserver's field-error format so clients see the same 422 texts."""

from __future__ import annotations

import re

from .errors import Cause, forbidden, invalid
from .resources import LIFECYCLE_TAINT_KEYS, lifecycle_taints, node_ready
from .util import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_MSG,
    LABEL_VALUE,
    LABEL_VALUE_MSG,
    SUBDOMAIN_MSG,
    qualified_name_error,
    quantity_milli,
    rfc3339,
)

SYSTEM_PRIORITY_CLASSES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
HUGE_PRIORITY = 1000000000
IMMUTABLE_POD_SPEC_MSG = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def validate_metadata(obj: dict, causes: list, *, label_name: bool = False):
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if not name:
        causes.append(Cause("metadata.name", "Required", detail="name or generateName is required"))
    elif label_name:
        if len(name) > 63 or not DNS1123_LABEL.match(name):
            causes.append(
                Cause(
                    "metadata.name",
                    "Invalid",
                    name,
                    LABEL_MSG if len(name) <= 63 else "must be no more than 63 characters",
                )
            )
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        causes.append(
            Cause(
                "metadata.name",
                "Invalid",
                name,
                SUBDOMAIN_MSG if len(name) <= 253 else "must be no more than 253 characters",
            )
        )
    for k, v in (meta.get("labels") or {}).items():
        err = qualified_name_error(k)
        if err:
            causes.append(Cause("metadata.labels", "Invalid", k, err))
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            causes.append(
                Cause(
                    "metadata.labels",
                    "Invalid",
                    v,
                    LABEL_VALUE_MSG
                    if isinstance(v, str) and len(v) <= 63
                    else "must be no more than 63 characters",
                )
            )
    for k in meta.get("annotations") or {}:
        err = qualified_name_error(k)
        if err:
            causes.append(Cause("metadata.annotations", "Invalid", k, err))


# ---------------------------------------------------------------- pods


def _is_extended(resource: str) -> bool:
    """v1helper.IsExtendedResourceName: a domain-prefixed name outside kubernetes.io."""
    domain = resource.split("/", 1)[0] if "/" in resource else ""
    return bool(domain) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def default_pod(pod: dict):
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = sa
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = c.get("image") or ""
            tag = image.rsplit("/", 1)[-1]
            c.setdefault(
                "imagePullPolicy",
                "Always"
                if (":" not in tag and "@" not in image) or tag.endswith(":latest")
                else "IfNotPresent",
            )
            res = c.setdefault("resources", {})
            if res.get("limits"):
                req = res.setdefault("requests", {})
                for r, q in res["limits"].items():
                    req.setdefault(r, q)
    for vol in spec.get("volumes") or []:
        for kind in ("configMap", "secret"):
            if kind in vol:
                vol[kind].setdefault("defaultMode", 420)
    tols = spec.setdefault("tolerations", [])
    for dt in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == dt["key"] and t.get("effect") in (None, "", "NoExecute") for t in tols):
            tols.append(dict(dt))
    if not tols:
        spec.pop("tolerations")


def qos_class(spec: dict) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in req or r in lim:
                any_set = True
            if r not in lim or (r in req and quantity_milli(req[r]) != quantity_milli(lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def validate_pod(pod: dict) -> list[Cause]:
    causes: list[Cause] = []
    validate_metadata(pod, causes)
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        causes.append(Cause("spec.containers", "Required"))
    vol_names = set()
    for i, v in enumerate(spec.get("volumes") or []):
        n = v.get("name") or ""
        if not n:
            causes.append(Cause(f"spec.volumes[{i}].name", "Required"))
        elif not DNS1123_LABEL.match(n):
            causes.append(Cause(f"spec.volumes[{i}].name", "Invalid", n, LABEL_MSG))
        elif n in vol_names:
            causes.append(Cause(f"spec.volumes[{i}].name", "Duplicate", n))
        vol_names.add(n)
    seen = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            path = f"spec.{key}[{i}]"
            name = c.get("name") or ""
            if not name:
                causes.append(Cause(f"{path}.name", "Required"))
            elif len(name) > 63 or not DNS1123_LABEL.match(name):
                causes.append(Cause(f"{path}.name", "Invalid", name, LABEL_MSG))
            elif name in seen:
                causes.append(Cause(f"{path}.name", "Duplicate", name))
            seen.add(name)
            if not c.get("image"):
                causes.append(Cause(f"{path}.image", "Required"))
            for j, m in enumerate(c.get("volumeMounts") or []):
                if m.get("name") not in vol_names:
                    causes.append(Cause(f"{path}.volumeMounts[{j}].name", "NotFound", m.get("name")))
                if not m.get("mountPath"):
                    causes.append(Cause(f"{path}.volumeMounts[{j}].mountPath", "Required"))
            causes += _validate_resources(c.get("resources") or {}, f"{path}.resources")
            for j, e in enumerate(c.get("env") or []):
                if not e.get("name"):
                    causes.append(Cause(f"{path}.env[{j}].name", "Required"))
    rp = spec.get("restartPolicy")
    if rp not in ("Always", "OnFailure", "Never"):
        causes.append(
            Cause("spec.restartPolicy", "Unsupported", rp, 'supported values: "Always", "OnFailure", "Never"')
        )
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and (not isinstance(ads, int) or ads <= 0):
        causes.append(
            Cause("spec.activeDeadlineSeconds", "Invalid", ads, "must be between 1 and 2147483647, inclusive")
        )
    return causes


def _validate_resources(res: dict, path: str) -> list[Cause]:
    causes = []
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    parsed = {}
    for kind, d in (("requests", req), ("limits", lim)):
        for r, q in d.items():
            try:
                parsed[(kind, r)] = quantity_milli(q)
            except ValueError as exc:
                causes.append(Cause(f"{path}.{kind}[{r}]", "Invalid", str(q), str(exc)))
                continue
            if parsed[(kind, r)] < 0:
                causes.append(
                    Cause(f"{path}.{kind}[{r}]", "Invalid", str(q), "must be greater than or equal to 0")
                )
            if _is_extended(r) and parsed[(kind, r)] % 1000:
                causes.append(Cause(f"{path}.{kind}[{r}]", "Invalid", str(q), "must be an integer"))
    for r, q in req.items():
        if (("requests", r)) not in parsed:
            continue
        if _is_extended(r):
            if r not in lim:
                causes.append(
                    Cause(
                        f"{path}.limits",
                        "Required",
                        detail="Limit must be set for non overcommitable resources",
                    )
                )
            elif ("limits", r) in parsed and parsed[("requests", r)] != parsed[("limits", r)]:
                causes.append(
                    Cause(f"{path}.requests", "Invalid", str(q), f"must be equal to {r} limit of {lim[r]}")
                )
        elif r in lim and ("limits", r) in parsed and parsed[("requests", r)] > parsed[("limits", r)]:
            causes.append(
                Cause(
                    f"{path}.requests",
                    "Invalid",
                    str(q),
                    f"must be less than or equal to {r} limit of {lim[r]}",
                )
            )
    return causes


def admit_pod(pod: dict, priority_class_lookup):
    """Priority admission: resolve priorityClassName (or the global default) to spec.priority."""
    spec = pod["spec"]
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
    pc_name = spec.get("priorityClassName")
    if pc_name:
        pc = SYSTEM_PRIORITY_CLASSES.get(pc_name)
        policy = "PreemptLowerPriority"
        if pc is None:
            obj = priority_class_lookup(pc_name)
            if obj is None:
                raise forbidden("pods", name, f"no PriorityClass with name {pc_name} was found")
            pc, policy = int(obj.get("value", 0)), obj.get("preemptionPolicy") or "PreemptLowerPriority"
    else:
        default = priority_class_lookup(None)
        pc, policy = (
            (int(default.get("value", 0)), default.get("preemptionPolicy") or "PreemptLowerPriority")
            if default
            else (0, "PreemptLowerPriority")
        )
        if default:
            spec["priorityClassName"] = default["metadata"]["name"]
    if spec.get("priority") is not None and spec["priority"] != pc:
        raise forbidden(
            "pods",
            name,
            f"the integer value of priority ({spec['priority']}) must not be provided in "
            f"pod spec; priority admission controller computed {pc} from the given "
            f"PriorityClass name",
        )
    spec["priority"] = pc
    spec.setdefault("preemptionPolicy", policy)


def pod_update_causes(old: dict, new: dict) -> list[Cause]:
    """Pods are mostly immutable: compare specs with the mutable fields masked."""

    def masked(spec):
        s = dict(spec or {})
        for k in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
            s.pop(k, None)
        for key in ("containers", "initContainers"):
            if key in s:
                s[key] = [{k: v for k, v in c.items() if k != "image"} for c in s[key]]
        return s

    if masked(old.get("spec")) != masked(new.get("spec")):
        return [Cause("spec", "Forbidden", detail=IMMUTABLE_POD_SPEC_MSG)]
    return []


# ---------------------------------------------------------------- nodes


def apply_node_lifecycle(node: dict, enabled: bool):
    """Keep the node.kubernetes.io/{not-ready,unreachable,unschedulable} taints in sync, like the node
    lifecycle controller and TaintNodesByCondition do a moment after the node changes."""
    if not enabled:
        return
    spec = node.setdefault("spec", {})
    want = lifecycle_taints(node_ready(node), bool(spec.get("unschedulable")))
    old = [t for t in spec.get("taints") or [] if t.get("key") in LIFECYCLE_TAINT_KEYS]
    kept = [t for t in spec.get("taints") or [] if t.get("key") not in LIFECYCLE_TAINT_KEYS]
    for t in want:
        prev = next((o for o in old if o.get("key") == t["key"] and o.get("effect") == t["effect"]), None)
        if t["effect"] == "NoExecute":
            t["timeAdded"] = prev.get("timeAdded") if prev and prev.get("timeAdded") else rfc3339()
        kept.append(t)
    if kept:
        spec["taints"] = kept
    else:
        spec.pop("taints", None)


def validate_node(node: dict) -> list[Cause]:
    causes: list[Cause] = []
    validate_metadata(node, causes)
    for i, t in enumerate((node.get("spec") or {}).get("taints") or []):
        if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(
                Cause(
                    f"spec.taints[{i}].effect",
                    "Unsupported",
                    t.get("effect"),
                    'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
                )
            )
        if not t.get("key"):
            causes.append(Cause(f"spec.taints[{i}].key", "Required"))
    return causes


# ---------------------------------------------------------------- configmaps, priority classes, namespaces


def validate_configmap(cm: dict) -> list[Cause]:
    causes: list[Cause] = []
    validate_metadata(cm, causes)
    data, binary = cm.get("data") or {}, cm.get("binaryData") or {}
    for where, d in (("data", data), ("binaryData", binary)):
        for k in d:
            if not CONFIG_KEY.match(k):
                causes.append(
                    Cause(
                        f"{where}[{k}]",
                        "Invalid",
                        k,
                        "a valid config key must consist of alphanumeric "
                        "characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', "
                        "regex used for validation is '[-._a-zA-Z0-9]+')",
                    )
                )
    for k in set(data) & set(binary):
        causes.append(Cause(f"data[{k}]", "Invalid", k, "duplicate of key present in binaryData"))
    size = sum(len(k) + len(str(v)) for k, v in data.items()) + sum(
        len(k) + len(str(v)) for k, v in binary.items()
    )
    if size > 1048576:
        causes.append(Cause("", "TooLong", "", "must have at most 1048576 bytes"))
    return causes


def configmap_update_causes(old: dict, new: dict) -> list[Cause]:
    if not old.get("immutable"):
        return []
    causes = []
    if not new.get("immutable"):
        causes.append(Cause("immutable", "Forbidden", detail="field is immutable when `immutable` is set"))
    if (old.get("data") or {}) != (new.get("data") or {}):
        causes.append(Cause("data", "Forbidden", detail="field is immutable when `immutable` is set"))
    if (old.get("binaryData") or {}) != (new.get("binaryData") or {}):
        causes.append(Cause("binaryData", "Forbidden", detail="field is immutable when `immutable` is set"))
    return causes


def validate_priorityclass(pc: dict) -> list[Cause]:
    causes: list[Cause] = []
    validate_metadata(pc, causes)
    name = (pc.get("metadata") or {}).get("name") or ""
    if "value" not in pc:
        causes.append(Cause("value", "Required"))
    elif name.startswith("system-"):
        if SYSTEM_PRIORITY_CLASSES.get(name) != pc["value"]:
            causes.append(
                Cause(
                    "metadata.name",
                    "Invalid",
                    name,
                    "priority class names with 'system-' prefix are reserved",
                )
            )
    elif int(pc["value"]) > HUGE_PRIORITY:
        causes.append(
            Cause(
                "value",
                "Forbidden",
                detail=f"maximum allowed value of a user defined priority is {HUGE_PRIORITY}",
            )
        )
    if pc.get("preemptionPolicy") not in (None, "Never", "PreemptLowerPriority"):
        causes.append(
            Cause(
                "preemptionPolicy",
                "Unsupported",
                pc.get("preemptionPolicy"),
                'supported values: "Never", "PreemptLowerPriority"',
            )
        )
    return causes


def priorityclass_update_causes(old: dict, new: dict) -> list[Cause]:
    causes = []
    if old.get("value") != new.get("value"):
        causes.append(Cause("value", "Forbidden", detail="may not be changed in an update."))
    if (old.get("preemptionPolicy") or "PreemptLowerPriority") != (
        new.get("preemptionPolicy") or "PreemptLowerPriority"
    ):
        causes.append(Cause("preemptionPolicy", "Invalid", new.get("preemptionPolicy"), "field is immutable"))
    return causes


def validate_namespace(ns: dict) -> list[Cause]:
    causes: list[Cause] = []
    validate_metadata(ns, causes, label_name=True)
    return causes


def raise_if(kind: str, name: str, causes: list[Cause], group: str = ""):
    if causes:
        raise invalid(kind, name, causes, group)
