"""Injected API faults: the next requests to a path answer 429/5xx, or lose their connection.

A rule is {"path": "/api/v1/nodes", "method": "GET" (optional, any when absent), "sequence": [...],
"retry_after": 1, "message": None}. Each request that matches takes the next item of its sequence;
when the sequence is used up the rule is spent and requests are served normally. Items:

  429            Status TooManyRequests with details.retryAfterSeconds and a Retry-After header, as the
                 watch cache answers while it (re)initializes (``apierrors.NewTooManyRequests("storage
                 is (re)initializing", 1)``); ``retry_after`` 0 sends neither, like NewTooManyRequests(msg, 0)
  500            Status InternalError ("Internal error occurred: ..."), as ``apierrors.NewInternalError``
  503            Status ServiceUnavailable, as ``apierrors.NewServiceUnavailable``
  504            Status Timeout ("Timeout: request did not complete within requested timeout - ..."), as
                 the apiserver's request-timeout filter; the request may still have taken effect
  "reset"        the connection is reset before the request is handled (nothing happened)
  "reset-after"  the request is handled, then the connection is reset instead of the answer (it took
                 effect; the client cannot know)
  "cut"          the request is handled and its answer starts (status, headers, the first half of the
                 body), then the connection is reset: a large list cut off mid-body, as when the
                 apiserver or a proxy on the way goes away while it streams

Faulted requests are not in the API call counters (no handler ran, except for reset-after); each rule
counts its ``hits``.

Two faults follow time rather than a sequence, as an overloaded or restarting apiserver does:

* a **429 storm** {"verbs": ["get"], "resource": "pods", "namespace": None, "seconds": 10, "retry_after": 1}:
  for ``seconds``, every request of those verbs on that resource (a subresource is its own resource:
  "pods/log"; none: every resource) is refused by API Priority and Fairness before authorization, as
  its ``tooManyRequests`` answers: 429, ``Retry-After``, the plain-text body ``Too many requests, please
  try again later.`` (not a Status);
* an **apiserver restart** (``server.EmulatorHTTPServer.restart``): connections reset and refused while
  it is down, then, for ``forbidden_s``, every resource request answered 403 by an authorizer whose
  caches are not synced yet while ``/readyz`` fails, then normal. The 403 window is kept here
  (``authorizer_starting``).
"""

from __future__ import annotations

import threading
import time

from .errors import ApiError

RESETS = ("reset", "reset-after", "cut")
STORM_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
# what the apiserver's APF filter writes (http.Error: the text and a newline, text/plain)
STORM_TEXT = "Too many requests, please try again later.\n"
_DEFAULTS = {
    429: ("TooManyRequests", "storage is (re)initializing"),
    500: ("InternalError", "etcdserver: request timed out"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within requested timeout - context deadline exceeded"),
}


def _check(rule: dict) -> dict:
    unknown = set(rule) - {"path", "method", "sequence", "retry_after", "message"}
    if unknown:
        raise ValueError(f"unknown fault fields {sorted(unknown)}")
    if not isinstance(rule.get("path"), str) or not rule["path"].startswith("/"):
        raise ValueError("a fault needs a path starting with / (e.g. /api/v1/nodes)")
    sequence = rule.get("sequence")
    if not isinstance(sequence, list) or not sequence:
        raise ValueError("a fault needs a non-empty sequence of status codes or 'reset'/'reset-after'/'cut'")
    for item in sequence:
        if item not in RESETS and item not in _DEFAULTS:
            raise ValueError(f"unsupported fault {item!r}: one of {sorted(_DEFAULTS)} or {list(RESETS)}")
    retry_after = rule.get("retry_after", 1)
    if not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 0:
        raise ValueError("retry_after must be a whole number of seconds >= 0")
    method = rule.get("method")
    return {"path": rule["path"].rstrip("/") or "/", "method": method.upper() if method else None,
            "sequence": list(sequence), "retry_after": retry_after, "message": rule.get("message"), "hits": 0}


def error_for(code: int, retry_after: int, message: str | None) -> ApiError:
    """The apiserver's Status for an injected status code; the server turns details.retryAfterSeconds
    into the Retry-After header, as the apiserver's ErrorNegotiated does."""
    reason, default = _DEFAULTS[code]
    text = message or default
    if code == 500:  # NewInternalError: the cause in details.causes, prefixed in the message
        return ApiError(500, reason, f"Internal error occurred: {text}", {"causes": [{"message": text}]})
    # NewTooManyRequests and NewTimeoutError always carry details (retryAfterSeconds omitted when 0)
    details = {"retryAfterSeconds": retry_after} if code == 429 and retry_after > 0 else {} if code in (429, 504) else None
    return ApiError(code, reason, text, details)


def _check_storm(rule: dict) -> dict:
    unknown = set(rule) - {"verbs", "resource", "namespace", "seconds", "retry_after"}
    if unknown:
        raise ValueError(f"unknown storm fields {sorted(unknown)}")
    verbs = rule.get("verbs")
    if not isinstance(verbs, list) or not verbs or any(v not in STORM_VERBS for v in verbs):
        raise ValueError(f"a storm needs verbs, a non-empty list of {list(STORM_VERBS)}")
    seconds = rule.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError("a storm needs seconds > 0")
    retry_after = rule.get("retry_after", 1)
    if not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 1:
        raise ValueError("retry_after must be a whole number of seconds >= 1 (APF always sends one)")
    for key in ("resource", "namespace"):
        if rule.get(key) is not None and not isinstance(rule[key], str):
            raise ValueError(f"{key} must be text")
    return {"verbs": list(verbs), "resource": rule.get("resource"), "namespace": rule.get("namespace"),
            "seconds": seconds, "retry_after": retry_after, "until": time.monotonic() + seconds, "hits": 0}


class FaultBook:
    def __init__(self):
        self._lock, self._rules, self._storms = threading.Lock(), [], []
        self._authorizer_ready_at = 0.0

    def add(self, rule: dict) -> dict:
        checked = _check(rule)
        with self._lock:
            self._rules.append(checked)
        return dict(checked)

    def take(self, method: str, path: str) -> tuple[object, dict] | None:
        """The next fault for this request (and its rule), or None."""
        path = path.rstrip("/") or "/"
        with self._lock:
            for rule in self._rules:
                if rule["path"] == path and rule["method"] in (None, method) and rule["hits"] < len(rule["sequence"]):
                    item = rule["sequence"][rule["hits"]]
                    rule["hits"] += 1
                    return item, dict(rule)
        return None

    def list(self) -> list[dict]:
        with self._lock:
            return [dict(r, remaining=len(r["sequence"]) - r["hits"]) for r in self._rules]

    def add_storm(self, rule: dict) -> dict:
        checked = _check_storm(rule)
        with self._lock:
            self._storms.append(checked)
        return _shown(checked)

    def storming(self, verb: str, resource: str, namespace: str | None) -> dict | None:
        """The storm that refuses this request now (its hit counted), or None."""
        now = time.monotonic()
        with self._lock:
            for storm in self._storms:
                if (now < storm["until"] and verb in storm["verbs"] and storm["resource"] in (None, resource)
                        and storm["namespace"] in (None, namespace)):
                    storm["hits"] += 1
                    return dict(storm)
        return None

    def storms(self) -> list[dict]:
        with self._lock:
            return [_shown(s) for s in self._storms]

    def authorizer_starts(self, seconds: float):
        """From now, for ``seconds``, the authorizer refuses every resource request (an apiserver that
        has just come back: its RBAC caches are not synced, /readyz fails)."""
        with self._lock:
            self._authorizer_ready_at = time.monotonic() + max(0.0, seconds)

    def authorizer_starting(self) -> bool:
        return time.monotonic() < self._authorizer_ready_at

    def clear(self):
        with self._lock:
            self._rules.clear()
            self._storms.clear()
            self._authorizer_ready_at = 0.0


def _shown(storm: dict) -> dict:
    """A storm as the control API shows it: seconds left instead of the monotonic end."""
    out = {k: v for k, v in storm.items() if k != "until"}
    out["remaining_s"] = round(max(0.0, storm["until"] - time.monotonic()), 3)
    return out
