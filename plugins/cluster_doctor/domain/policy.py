"""The common shape of an opt-in policy setting (reservation, quarantine, acceptance, node_conditions,
fleet_verdicts): a frozen pydantic model that ``Settings`` holds already parsed, so every reader uses
``settings.<policy>`` and no one parses the JSON again.

Each policy's own checks are its field validators, run on the raw value (``mode="before"``) so that
pydantic never coerces what the check refuses (``true`` as 1, ``"3"`` as 3), and each says what is
wrong in one line. A problem names its key from the policy's setting (``quarantine.max_nodes: ...``),
whether the policy is built alone (``from_mapping``, its constructor) or inside ``Settings``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from cluster_doctor.domain.errors import one_line


class Policy(BaseModel):
    """A policy setting. Subclasses set ``setting`` (the Settings field it is read from) and ``error``
    (the ValueError their problems raise when built alone)."""

    # extra keys are refused by _known_keys, naming every known one, rather than by pydantic
    model_config = ConfigDict(frozen=True, extra="ignore")

    setting: ClassVar[str]
    error: ClassVar[type[ValueError]]

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise self.error(self.describe(exc)) from None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> Self:
        """From the setting's JSON object (None: the defaults); a problem raises ``cls.error``."""
        return cls(**dict(values or {}))

    @classmethod
    def describe(cls, exc: ValidationError) -> str:
        parts = []
        for error in exc.errors(include_url=False):
            message = error["msg"].removeprefix("Value error, ")
            path = ".".join([cls.setting, *map(str, error.get("loc") or ())])
            parts.append(message if message.startswith(cls.setting) else f"{path}: {message}")
        return one_line("; ".join(parts), 1000)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, values: Any) -> Any:
        if isinstance(values, Policy):
            return values
        if not isinstance(values, Mapping):
            raise ValueError(f"{cls.setting}: must be a JSON object, got {one_line(repr(values), 120)}")
        known = set(cls.model_fields)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{cls.setting}: unknown key(s) {', '.join(map(str, unknown))} "
                             f"(known: {', '.join(sorted(known))})")
        return values

    def given(self) -> dict[str, Any]:
        """The keys set, as JSON: what ``Settings.to_dict`` carries, as the setting was written."""
        return self.model_dump(mode="json", exclude_unset=True)


# ---------------------------------------------------------------------------- the checks
def flag(value: Any) -> Any:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def positive(value: Any) -> Any:
    """A finite number > 0."""
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a number > 0, got {value!r}")
    return value


def above_zero(value: Any) -> Any:
    """A number > 0, infinity included (a window that never closes)."""
    if not is_number(value) or not value > 0:
        raise ValueError(f"must be a number > 0, got {value!r}")
    return value


def count(value: Any) -> Any:
    """An integer >= 1 (never true/false)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be an integer >= 1, got {value!r}")
    return value


def share(value: Any) -> Any:
    """A share in (0, 1]."""
    if not is_number(value) or not 0 < value <= 1:
        raise ValueError(f"must be a share in (0, 1], got {value!r}")
    return value
