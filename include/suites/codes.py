"""Stable codes of non-pass checks (codes.yaml): lookup, default resolution, the recommended action
of each code and the docs table.

    python -m cluster_doctor_suites.codes          # prints the markdown table (FAULTS.md embeds it)
"""

from __future__ import annotations

import fnmatch
import functools
import os
import sys
from collections.abc import Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
CODES_FILE = os.path.join(HERE, "codes.yaml")
STATUSES = ("fail", "error", "warn", "skip")
# The fixed set of recommended actions, least to most severe (the summary carries the most severe of
# its findings). check_storage / check_fabric point outside the node; reset_gpu < reboot <
# drain_and_service (a person must look: RMA, reseat, an error nobody recognised).
ACTIONS = ("none", "retest", "check_storage", "check_fabric", "reset_gpu", "reboot", "drain_and_service")
# the code of a non-pass check no entry of codes.yaml matches; tests keep it out of every suite
UNCLASSIFIED = "UNCLASSIFIED"


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, dict]:
    """{code: {status, checks, meaning, action, advice}} in file order (`action` is the token of
    ACTIONS, from the file's `recommended_action`; `advice` the text, the file's `action`). An
    unreadable file yields {} (the suites then report UNCLASSIFIED rather than fail to report)."""
    try:
        import yaml

        with open(CODES_FILE, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except Exception:  # noqa: BLE001 - a broken codes file must never break a verdict
        return {}
    out: dict[str, dict] = {}
    for code, spec in (data.get("codes") or {}).items():
        if not isinstance(spec, dict):
            continue
        out[str(code)] = {
            "status": [str(s) for s in spec.get("status") or []],
            "checks": [str(c) for c in spec.get("checks") or []],
            "meaning": str(spec.get("meaning", "")),
            "action": str(spec.get("recommended_action", "")),
            "advice": str(spec.get("action", "")),
        }
    return out


def resolve(name: str, status: str) -> str | None:
    """The default code of a check by name and status; None for passing checks."""
    if status == "pass":
        return None
    for code, spec in registry().items():
        if status in spec["status"] and any(fnmatch.fnmatchcase(name, p) for p in spec["checks"]):
            return code
    return UNCLASSIFIED


def action(code: str | None) -> str:
    """The recommended action of a code; drain_and_service for a code nobody knows (fail closed)."""
    spec = registry().get(code or "")
    return spec["action"] if spec and spec["action"] in ACTIONS else "drain_and_service"


def advice(code: str | None) -> str | None:
    spec = registry().get(code or "")
    return spec["advice"] if spec else None


def most_severe(actions: Iterable[str | None]) -> str | None:
    ranked = [a for a in actions if a in ACTIONS]
    return max(ranked, key=ACTIONS.index) if ranked else None


def markdown_table() -> str:
    lines = ["| code | status | meaning | action | advice |", "|---|---|---|---|---|"]
    for code, spec in registry().items():
        lines.append(
            f"| `{code}` | {', '.join(spec['status'])} | {spec['meaning']} | `{spec['action']}` | {spec['advice']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
