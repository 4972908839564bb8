"""The three PATCH flavours the apiserver accepts: JSON merge patch (RFC 7386), strategic merge patch
(the subset of directives kubectl and the python client produce), and JSON patch (RFC 6902)."""

from __future__ import annotations

from .errors import ApiError, bad_request, unsupported_media
from .util import jcopy

# patchMergeKey of the list fields that have patchStrategy=merge in the core/v1 types we serve.
MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "addresses": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}
MERGE_PRIMITIVE_LISTS = {"finalizers"}


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return jcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def strategic_merge_patch(target, patch, field: str | None = None):
    if not isinstance(patch, dict):
        return jcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: jcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k == "$retainKeys" or k == "$patch":
            continue  # ordering/retain hints: harmless to ignore for the fields we serve
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            result[name] = [x for x in result.get(name) or [] if x not in v]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list) and k in MERGE_KEYS and isinstance(result.get(k), list):
            result[k] = _merge_list(result[k], v, MERGE_KEYS[k])
        elif isinstance(v, list) and k in MERGE_PRIMITIVE_LISTS and isinstance(result.get(k), list):
            result[k] = result[k] + [x for x in v if x not in result[k]]
        elif isinstance(v, dict):
            merged = strategic_merge_patch(result.get(k), v, k)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        else:
            result[k] = jcopy(v)
    return result


def _merge_list(current: list, patch: list, key: str) -> list:
    out = [jcopy(x) for x in current]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [jcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(jcopy(item))
            continue
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append(jcopy(item))
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts):
    for p in parts:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc


def json_patch(target, ops):
    if not isinstance(ops, list):
        raise bad_request("json patch must be a list of operations")
    doc = jcopy(target)
    for op in ops:
        kind, parts = op.get("op"), _pointer(op.get("path", ""))
        try:
            if kind == "test":
                if _walk(doc, parts) != op.get("value"):
                    raise ApiError(
                        422,
                        "Invalid",
                        f"the server rejected our request due to an error in our request: "
                        f"testing value {op.get('path')} failed",
                    )
                continue
            if kind in ("move", "copy"):
                src = _pointer(op.get("from", ""))
                value = jcopy(_walk(doc, src))
                if kind == "move":
                    parent = _walk(doc, src[:-1])
                    parent.pop(int(src[-1]) if isinstance(parent, list) else src[-1])
                kind, op = "add", {"value": value}
            if not parts:
                doc = jcopy(op.get("value"))
                continue
            parent, last = _walk(doc, parts[:-1]), parts[-1]
            if kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), jcopy(op.get("value")))
                else:
                    parent[last] = jcopy(op.get("value"))
            elif kind == "remove":
                parent.pop(int(last) if isinstance(parent, list) else last)
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = jcopy(op.get("value"))
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = jcopy(op.get("value"))
            else:
                raise bad_request(f"unexpected kind of patch operation: {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(
                422,
                "Invalid",
                f"the server rejected our request due to an error in our request: "
                f"{kind} operation does not apply: doc is missing path: "
                f"{op.get('path')}: {exc}",
            ) from None
    return doc


def apply_patch(target: dict, body, content_type: str) -> dict:
    ct = (content_type or "").split(";")[0].strip().lower()
    if ct == "application/merge-patch+json":
        return merge_patch(target, body)
    if ct == "application/strategic-merge-patch+json":
        return strategic_merge_patch(target, body)
    if ct == "application/json-patch+json":
        return json_patch(target, body)
    raise unsupported_media(ct)
