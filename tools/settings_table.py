"""Write or check docs/configuration.md's settings table: generated from the settings model
(``cluster_doctor.domain.config.Settings``: names, types, defaults, descriptions, where each may be set).

    python tools/settings_table.py          # rewrite the table between the page's markers
    python tools/settings_table.py --check  # exit 1 when the page's table differs
"""

from __future__ import annotations

import json
import pathlib
import sys
import typing
from typing import Any

import annotated_types
from cluster_doctor.domain.config import DEPLOYMENT_ONLY, ENV_PREFIX, PARSE_TIME, Settings
from pydantic import BaseModel
from pydantic.fields import FieldInfo

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
START = "<!-- settings-table: generated from cluster_doctor.domain.config.Settings by tools/settings_table.py -->"
END = "<!-- /settings-table -->"


def _type(field: FieldInfo) -> str:
    annotation = field.annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin is list:
        return "list"
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "object"  # a policy: a JSON object of its keys
    name = {float: "number", int: "integer", str: "text"}.get(annotation, getattr(annotation, "__name__", "?"))
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Gt):
            name += f" > {bound.gt}"
        elif isinstance(bound, annotated_types.Ge):
            name += f" ≥ {bound.ge}"
    return name


def _default(value: Any) -> str:
    if value == "":
        return ""
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return f"`{text}`"


def _meaning(name: str, field: FieldInfo) -> str:
    text = field.description or ""
    variable = f"`{ENV_PREFIX}{name.upper()}`"
    if name in DEPLOYMENT_ONLY:
        text = f"*Deployment only* (environment {variable}). {text}"
    if name in PARSE_TIME:
        text += f" Read when the DAG is parsed: set it in the environment ({variable})."
    # the descriptions link docs/ pages from the repository root; the table lives in docs/ itself
    return text.replace("|", "\\|").replace("](docs/", "](")


def render() -> str:
    """The table, markers included."""
    rows = ["| setting | type | default | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        rows.append(f"| `{name}` | {_type(field)} | {_default(default)} | {_meaning(name, field)} |")
    return "\n".join([START, *rows, END])


def current(page: str) -> str:
    """The page's generated block, markers included."""
    if START not in page or END not in page:
        raise SystemExit(f"{PAGE.name} has no settings table markers ({START} ... {END})")
    head, rest = page.split(START, 1)
    return START + rest.split(END, 1)[0] + END


def main(argv: list[str]) -> int:
    page = PAGE.read_text()
    block, fresh = current(page), render()
    if "--check" in argv:
        if block != fresh:
            print("docs/configuration.md's settings table is not the one Settings generates: "
                  "run python tools/settings_table.py")
            return 1
        return 0
    PAGE.write_text(page.replace(block, fresh))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
