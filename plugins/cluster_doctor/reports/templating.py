"""The one Jinja2 environment of every HTML page and report (fleet page, node page, daily report).

Autoescaping is always on: node names, reasons, GPU models and check messages are data written by
validation pods and must never become markup.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jinja2
import markupsafe

# Control characters (terminal escapes, NUL, bidi overrides) never reach a page; newlines and tabs
# stay (reasons are shown pre-wrapped).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _finalize(value: Any) -> Any:
    if isinstance(value, markupsafe.Markup) or not isinstance(value, str):
        return value  # already-rendered markup (a macro's output) is not data
    return _CONTROL.sub("", value)


@functools.cache
def environment(*packages: str) -> jinja2.Environment:
    """The environment for the reports' templates, with the ``templates`` folders of ``packages``
    (e.g. ``cluster_doctor.web``) searched first: every page extends the reports' base.html."""
    loaders = [jinja2.PackageLoader(p, "templates") for p in (*packages, "cluster_doctor.reports")]
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=True,
        # lenient on purpose: checks and metrics are suite-defined JSON, a missing key renders empty
        undefined=jinja2.Undefined,
        trim_blocks=True, lstrip_blocks=True,
        finalize=_finalize,
    )
