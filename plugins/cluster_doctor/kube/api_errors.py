"""Kubernetes API errors as one line: status, reason and the apiserver's message, never the whole
response (headers and body)."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.results import clean_text


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body).get("message") if exc.body else None
        except (ValueError, AttributeError):
            message = None
        text = f"Kubernetes API {exc.status} {exc.reason}" + (f": {message}" if message else "")
    else:
        text = one_line(exc, 10_000)
        detail = getattr(exc, "detail", None)  # the Airflow API client's errors keep the answer here
        if detail:
            text = f"{text}: {detail}"
    return clean_text(text, 400)
