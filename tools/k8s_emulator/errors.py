"""API errors rendered as the apiserver's metav1.Status bodies, so the kubernetes client raises an
ApiException with the same .status/.reason/.body a real cluster would produce."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None, metadata=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details
        self.metadata = metadata or {}

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.metadata,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(name: str, resource: str, group: str) -> dict:
    d = {"name": name, "kind": resource}
    if group:
        d["group"] = group
    return d


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404, "NotFound", f'{_qualified(resource, group)} "{name}" not found', _details(name, resource, group)
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        _details(name, resource, group),
    )


def conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        _details(name, resource, group),
    )


def forbidden(resource: str, name: str, why: str, group: str = "") -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'{_qualified(resource, group)} "{name}" is forbidden: {why}',
        _details(name, resource, group),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str, continue_token: str | None = None) -> ApiError:
    meta = {"continue": continue_token} if continue_token else {}
    return ApiError(410, "Expired", message, metadata=meta)


def not_implemented(message: str) -> ApiError:
    return ApiError(501, "NotImplemented", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted "
        f"media types include: application/json-patch+json, application/merge-patch+json, "
        f"application/strategic-merge-patch+json (got {content_type})",
    )


class Cause:
    """One field error; renders like k8s.io/apimachinery/pkg/util/validation/field.Error."""

    def __init__(self, field: str, kind: str, value=None, detail: str = ""):
        self.field, self.kind, self.value, self.detail = field, kind, value, detail

    def text(self) -> str:
        if self.kind == "Required":
            msg = "Required value"
        elif self.kind == "Forbidden":
            msg = "Forbidden"
        elif self.kind == "NotFound":
            msg = f'Not found: "{self.value}"'
        elif self.kind == "Duplicate":
            msg = f'Duplicate value: "{self.value}"'
        elif self.kind == "Unsupported":
            msg = f'Unsupported value: "{self.value}"'
        else:
            v = self.value
            msg = f'Invalid value: "{v}"' if isinstance(v, str) else f"Invalid value: {v}"
        return f"{msg}: {self.detail}" if self.detail else msg

    def as_cause(self) -> dict:
        reason = {
            "Required": "FieldValueRequired",
            "Forbidden": "FieldValueForbidden",
            "NotFound": "FieldValueNotFound",
            "Duplicate": "FieldValueDuplicate",
            "Unsupported": "FieldValueNotSupported",
        }.get(self.kind, "FieldValueInvalid")
        return {"reason": reason, "message": self.text(), "field": self.field}


def invalid(
    kind: str, name: str, causes: list[Cause], group: str = "", resource: str | None = None
) -> ApiError:
    parts = [f"{c.field}: {c.text()}" for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    details["causes"] = [c.as_cause() for c in causes]
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {joined}', details)
