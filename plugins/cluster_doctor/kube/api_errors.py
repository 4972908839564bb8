"""Kubernetes API errors as one line: status, reason and the apiserver's message, never the whole
response (headers and body); a refusal (401/403) also names the permission it lacks."""

from __future__ import annotations

import json
import re

from kubernetes.client.exceptions import ApiException

from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.results import clean_text

# The RBAC authorizer's words: ... cannot <verb> resource "<resource>" in API group "<group>" in the
# namespace "<ns>" | at the cluster scope; for a non-resource URL: ... cannot <verb> path "<path>"
_CANNOT = re.compile(r'cannot (\w+) resource "([^"]+)" in API group "([^"]*)"(?: in the namespace "([^"]+)")?')
_CANNOT_PATH = re.compile(r'cannot (\w+) path "([^"]+)"')
RBAC_FILES = "include/k8s/rbac-namespace.yaml and rbac-cluster.yaml"


def _message(exc: ApiException) -> str | None:
    try:
        return json.loads(exc.body).get("message") if exc.body else None
    except (ValueError, AttributeError, TypeError):
        return None


def permission(exc: BaseException) -> str | None:
    """The permission a 403 says the caller lacks, as a Role's rule reads it ("create pods in
    namespace cluster-doctor", "list nodes (cluster-wide)"), or None when the answer does not say."""
    if not isinstance(exc, ApiException) or exc.status != 403:
        return None
    message = _message(exc) or ""
    found = _CANNOT.search(message)
    if found:
        verb, resource, group, namespace = found.groups()
        where = f" in namespace {namespace}" if namespace else " (cluster-wide)"
        return f"{verb} {resource}{'.' + group if group else ''}{where}"
    found = _CANNOT_PATH.search(message)
    return f"{found.group(1)} {found.group(2)}" if found else None


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException) and type(exc).__str__ is not ApiException.__str__:
        return clean_text(str(exc), 400)  # retry.GaveUp / OutOfTime: one line already
    if isinstance(exc, ApiException):
        message = _message(exc)
        text = f"Kubernetes API {exc.status} {exc.reason}" + (f": {message}" if message else "")
        missing = permission(exc)
        if missing:
            text = f"Kubernetes API {exc.status} {exc.reason}: missing permission: {missing} ({RBAC_FILES}): {message}"
        elif exc.status == 401:
            text += " (the apiserver refused the credentials)"
    else:
        text = one_line(exc, 10_000)
        detail = getattr(exc, "detail", None)  # the Airflow API client's errors keep the answer here
        if detail:
            text = f"{text}: {detail}"
    return clean_text(text, 400)
