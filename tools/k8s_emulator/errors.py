"""API errors rendered as the apiserver's metav1.Status bodies, so the kubernetes client raises an
ApiException with the same status, reason and body a real cluster would produce."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, code: int, reason: str | None, message: str, details: dict | None = None,
                 metadata: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details
        self.metadata = metadata or {}

    def status(self) -> dict:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": self.metadata, "status": "Failure",
                "message": self.message}
        if self.reason:  # a proxied kubelet error carries no reason
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _named(code: int, reason: str, resource: str, name: str, group: str, text: str) -> ApiError:
    details = {"name": name, "kind": resource, **({"group": group} if group else {})}
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(code, reason, text.format(f'{qualified} "{name}"'), details)


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return _named(404, "NotFound", resource, name, group, "{} not found")


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return _named(409, "AlreadyExists", resource, name, group, "{} already exists")


def conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    return _named(409, "Conflict", resource, name, group, "Operation cannot be fulfilled on {}: " + why)


def forbidden(resource: str, name: str, why: str) -> ApiError:
    return _named(403, "Forbidden", resource, name, "", "{} is forbidden: " + why)


def rbac_forbidden(verb: str, resource: str, group: str, name: str | None, namespace: str | None,
                   user: str = "system:anonymous") -> ApiError:
    """The RBAC authorizer's refusal, as the apiserver words it (the emulator has no authentication:
    every request is the anonymous user's)."""
    qualified = f"{resource.split('/')[0]}.{group}" if group else resource.split("/")[0]
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    what = f'{qualified} "{name}"' if name else qualified
    message = f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{group}" {scope}'
    details = {**({"name": name} if name else {}), **({"group": group} if group else {}),
               "kind": resource.split("/")[0]}
    return ApiError(403, "Forbidden", message, details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


_CAUSE_TEXT = {"Required": ("FieldValueRequired", "Required value"), "Forbidden": ("FieldValueForbidden", "Forbidden"),
               "NotFound": ("FieldValueNotFound", 'Not found: "{}"'),
               "Duplicate": ("FieldValueDuplicate", 'Duplicate value: "{}"'),
               "Unsupported": ("FieldValueNotSupported", 'Unsupported value: "{}"')}


class Cause:
    """One field error, rendered like apimachinery's field.Error."""

    def __init__(self, field: str, kind: str, value=None, detail: str = ""):
        self.field, self.kind, self.value, self.detail = field, kind, value, detail

    def text(self) -> str:
        if self.kind in _CAUSE_TEXT:
            msg = _CAUSE_TEXT[self.kind][1].format(self.value)
        else:
            msg = f'Invalid value: "{self.value}"' if isinstance(self.value, str) else f"Invalid value: {self.value}"
        return f"{msg}: {self.detail}" if self.detail else msg

    def as_cause(self) -> dict:
        reason = _CAUSE_TEXT.get(self.kind, ("FieldValueInvalid",))[0]
        return {"reason": reason, "message": self.text(), "field": self.field}


def invalid(kind: str, name: str, causes: list[Cause], group: str = "") -> ApiError:
    parts = [f"{c.field}: {c.text()}" for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = {"name": name, "kind": kind, **({"group": group} if group else {}),
               "causes": [c.as_cause() for c in causes]}
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {joined}', details)


def raise_if(kind: str, name: str, causes: list[Cause], group: str = ""):
    if causes:
        raise invalid(kind, name, causes, group)
