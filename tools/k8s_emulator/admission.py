"""Validation, defaulting and admission (Priority, DefaultTolerationSeconds, node lifecycle taints) as the
apiserver applies them on create and update, with the apiserver's field-error messages."""

from __future__ import annotations

import re

from .errors import Cause, forbidden
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
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")
IMMUTABLE_CM_MSG = "field is immutable when `immutable` is set"
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_MSG = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
                  "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")


def validate_metadata(obj: dict, label_name: bool = False) -> list[Cause]:
    causes = []
    meta = obj.get("metadata") or {}
    name, limit = meta.get("name") or "", 63 if label_name else 253
    if not name:
        causes.append(Cause("metadata.name", "Required", detail="name or generateName is required"))
    elif len(name) > limit or not (DNS1123_LABEL if label_name else DNS1123_SUBDOMAIN).match(name):
        detail = (LABEL_MSG if label_name else SUBDOMAIN_MSG) if len(name) <= limit else \
            f"must be no more than {limit} characters"
        causes.append(Cause("metadata.name", "Invalid", name, detail))
    for k, v in (meta.get("labels") or {}).items():
        if err := qualified_name_error(k):
            causes.append(Cause("metadata.labels", "Invalid", k, err))
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            short = isinstance(v, str) and len(v) <= 63
            causes.append(Cause("metadata.labels", "Invalid", v,
                                LABEL_VALUE_MSG if short else "must be no more than 63 characters"))
    for k in meta.get("annotations") or {}:
        if err := qualified_name_error(k):
            causes.append(Cause("metadata.annotations", "Invalid", k, err))
    return causes


def _is_extended(resource: str) -> bool:
    """A domain-prefixed resource name outside kubernetes.io (nvidia.com/gpu)."""
    domain = resource.split("/", 1)[0] if "/" in resource else ""
    return bool(domain) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def default_pod(pod: dict):
    spec = pod.setdefault("spec", {})
    for k, v in (("restartPolicy", "Always"), ("terminationGracePeriodSeconds", 30), ("dnsPolicy", "ClusterFirst"),
                 ("schedulerName", "default-scheduler"), ("enableServiceLinks", True), ("securityContext", {})):
        spec.setdefault(k, v)
    spec["serviceAccountName"] = spec["serviceAccount"] = (spec.get("serviceAccountName")
                                                           or spec.get("serviceAccount") or "default")
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        image = c.get("image") or ""
        tag = image.rsplit("/", 1)[-1]
        latest = (":" not in tag and "@" not in image) or tag.endswith(":latest")
        c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        res = c.setdefault("resources", {})
        for r, q in (res.get("limits") or {}).items():
            res.setdefault("requests", {}).setdefault(r, q)
    for vol in spec.get("volumes") or []:
        for kind in ("configMap", "secret"):
            if kind in vol:
                vol[kind].setdefault("defaultMode", 420)
    tols = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})


def qos_class(spec: dict) -> str:
    any_set, guaranteed = False, True
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            any_set |= r in req or r in lim
            if r not in lim or (r in req and quantity_milli(req[r]) != quantity_milli(lim[r])):
                guaranteed = False
    return "BestEffort" if not any_set else "Guaranteed" if guaranteed else "Burstable"


def validate_pod(pod: dict) -> list[Cause]:
    causes = validate_metadata(pod)
    spec = pod.get("spec") or {}
    if not spec.get("containers"):
        causes.append(Cause("spec.containers", "Required"))
    names: dict[str, set] = {"volumes": set(), "containers": set()}
    items = [("volumes", i, v, "spec.volumes") for i, v in enumerate(spec.get("volumes") or [])]
    for key in ("initContainers", "containers"):
        items += [("containers", i, c, f"spec.{key}") for i, c in enumerate(spec.get(key) or [])]
    for kind, i, item, path in items:
        name, path = item.get("name") or "", f"{path}[{i}]"
        if not name:
            causes.append(Cause(f"{path}.name", "Required"))
        elif len(name) > 63 or not DNS1123_LABEL.match(name):
            causes.append(Cause(f"{path}.name", "Invalid", name, LABEL_MSG))
        elif name in names[kind]:
            causes.append(Cause(f"{path}.name", "Duplicate", name))
        names[kind].add(name)
        if kind == "volumes":
            continue
        if not item.get("image"):
            causes.append(Cause(f"{path}.image", "Required"))
        for j, m in enumerate(item.get("volumeMounts") or []):
            if m.get("name") not in names["volumes"]:
                causes.append(Cause(f"{path}.volumeMounts[{j}].name", "NotFound", m.get("name")))
            if not m.get("mountPath"):
                causes.append(Cause(f"{path}.volumeMounts[{j}].mountPath", "Required"))
        causes += _validate_resources(item.get("resources") or {}, f"{path}.resources")
    rp = spec.get("restartPolicy")
    if rp not in ("Always", "OnFailure", "Never"):
        causes.append(Cause("spec.restartPolicy", "Unsupported", rp, 'supported values: "Always", "OnFailure", "Never"'))
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and (not isinstance(ads, int) or ads <= 0):
        causes.append(Cause("spec.activeDeadlineSeconds", "Invalid", ads, "must be between 1 and 2147483647, inclusive"))
    return causes


def _validate_resources(res: dict, path: str) -> list[Cause]:
    causes, parsed = [], {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    for kind, d in (("requests", req), ("limits", lim)):
        for r, q in d.items():
            try:
                parsed[kind, r] = v = quantity_milli(q)
            except ValueError as exc:
                causes.append(Cause(f"{path}.{kind}[{r}]", "Invalid", str(q), str(exc)))
                continue
            if v < 0:
                causes.append(Cause(f"{path}.{kind}[{r}]", "Invalid", str(q), "must be greater than or equal to 0"))
            if _is_extended(r) and v % 1000:
                causes.append(Cause(f"{path}.{kind}[{r}]", "Invalid", str(q), "must be an integer"))
    for r, q in req.items():
        if ("requests", r) not in parsed:
            continue
        if _is_extended(r) and r not in lim:
            causes.append(Cause(f"{path}.limits", "Required", detail="Limit must be set for non overcommitable resources"))
        elif ("limits", r) not in parsed:
            continue
        elif _is_extended(r) and parsed["requests", r] != parsed["limits", r]:
            causes.append(Cause(f"{path}.requests", "Invalid", str(q), f"must be equal to {r} limit of {lim[r]}"))
        elif parsed["requests", r] > parsed["limits", r]:
            causes.append(Cause(f"{path}.requests", "Invalid", str(q),
                                f"must be less than or equal to {r} limit of {lim[r]}"))
    return causes


def admit_pod(pod: dict, priority_class_lookup):
    """Priority admission: resolve priorityClassName (or the global default class) to spec.priority."""
    spec, meta = pod["spec"], pod["metadata"]
    name = meta.get("name") or meta.get("generateName", "")
    pc_name = spec.get("priorityClassName")
    pc = priority_class_lookup(pc_name)
    if pc_name and pc is None:
        raise forbidden("pods", name, f"no PriorityClass with name {pc_name} was found")
    value, policy = (int(pc.get("value", 0)), pc.get("preemptionPolicy") or "PreemptLowerPriority") if pc else \
        (0, "PreemptLowerPriority")
    if pc and not pc_name:
        spec["priorityClassName"] = pc["metadata"]["name"]
    if spec.get("priority") is not None and spec["priority"] != value:
        raise forbidden("pods", name, f"the integer value of priority ({spec['priority']}) must not be provided in "
                                      f"pod spec; priority admission controller computed {value} from the given "
                                      "PriorityClass name")
    spec["priority"] = value
    spec.setdefault("preemptionPolicy", policy)


def pod_update_causes(old: dict, new: dict) -> list[Cause]:
    """Pods are mostly immutable: compare the specs with the mutable fields masked."""
    def masked(spec):
        s = {k: v for k, v in (spec or {}).items()
             if k not in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")}
        for key in ("containers", "initContainers"):
            if key in s:
                s[key] = [{k: v for k, v in c.items() if k != "image"} for c in s[key]]
        return s
    return [Cause("spec", "Forbidden", detail=IMMUTABLE_POD_SPEC_MSG)] if masked(old.get("spec")) != \
        masked(new.get("spec")) else []


def apply_node_lifecycle(node: dict, enabled: bool):
    """Keep the not-ready/unreachable/unschedulable taints in sync with the node's state, as the kubelet
    (registration) and the node lifecycle controller do a moment after the node changes."""
    if not enabled:
        return
    spec = node.setdefault("spec", {})
    old = [t for t in spec.get("taints") or [] if t.get("key") in LIFECYCLE_TAINT_KEYS]
    taints = [t for t in spec.get("taints") or [] if t.get("key") not in LIFECYCLE_TAINT_KEYS]
    for t in lifecycle_taints(node_ready(node), bool(spec.get("unschedulable"))):
        if t["effect"] == "NoExecute":
            prev = next((o for o in old if (o.get("key"), o.get("effect")) == (t["key"], t["effect"])), {})
            t["timeAdded"] = prev.get("timeAdded") or rfc3339()
        taints.append(t)
    spec["taints"] = taints
    if not taints:
        del spec["taints"]


def validate_node(node: dict) -> list[Cause]:
    causes = validate_metadata(node)
    for i, t in enumerate((node.get("spec") or {}).get("taints") or []):
        if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(Cause(f"spec.taints[{i}].effect", "Unsupported", t.get("effect"),
                                'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'))
        if not t.get("key"):
            causes.append(Cause(f"spec.taints[{i}].key", "Required"))
    return causes


def validate_configmap(cm: dict, old: dict | None = None) -> list[Cause]:
    causes = validate_metadata(cm)
    data, binary = cm.get("data") or {}, cm.get("binaryData") or {}
    for where, d in (("data", data), ("binaryData", binary)):
        causes += [Cause(f"{where}[{k}]", "Invalid", k, CONFIG_KEY_MSG) for k in d if not CONFIG_KEY.match(k)]
    if sum(len(k) + len(str(v)) for d in (data, binary) for k, v in d.items()) > 1048576:
        causes.append(Cause("", "TooLong", "", "must have at most 1048576 bytes"))
    if old is not None and old.get("immutable"):
        for f in ("immutable", "data", "binaryData"):
            if (old.get(f) or {}) != (cm.get(f) or {}):
                causes.append(Cause(f, "Forbidden", detail=IMMUTABLE_CM_MSG))
    return causes


def validate_priorityclass(pc: dict) -> list[Cause]:
    causes = validate_metadata(pc)
    name = (pc.get("metadata") or {}).get("name") or ""
    if "value" not in pc:
        causes.append(Cause("value", "Required"))
    elif name.startswith("system-"):
        if SYSTEM_PRIORITY_CLASSES.get(name) != pc["value"]:
            causes.append(Cause("metadata.name", "Invalid", name, "priority class names with 'system-' prefix are reserved"))
    elif int(pc["value"]) > HUGE_PRIORITY:
        causes.append(Cause("value", "Forbidden",
                            detail=f"maximum allowed value of a user defined priority is {HUGE_PRIORITY}"))
    if pc.get("preemptionPolicy") not in (None, "Never", "PreemptLowerPriority"):
        causes.append(Cause("preemptionPolicy", "Unsupported", pc.get("preemptionPolicy"),
                            'supported values: "Never", "PreemptLowerPriority"'))
    return causes
