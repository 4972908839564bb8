"""Small helpers shared by every module: JSON, timestamps in the apiserver's formats, quantities, names."""

from __future__ import annotations

import base64
import datetime
import json
import random
import re
import time
import uuid
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(obj) -> bytes:
    return _ENCODER.encode(obj).encode()


def jcopy(obj):
    """Deep copy of JSON data; several times faster than copy.deepcopy."""
    if isinstance(obj, dict):
        return {k: jcopy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [jcopy(v) for v in obj]
    return obj


def rfc3339(ts: float | None = None) -> str:
    """metav1.Time: second precision, always UTC with a Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def rfc3339_micro(ts: float | None = None) -> str:
    """metav1.MicroTime (events' eventTime)."""
    d = datetime.datetime.fromtimestamp(time.time() if ts is None else ts, datetime.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_nano(ts: float) -> str:
    """Go's time.RFC3339Nano as the kubelet prints log timestamps: trailing zeros trimmed."""
    d = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    frac = f"{d.microsecond:06d}000".rstrip("0")
    return d.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def parse_time(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp()  # 3.11 parses the trailing Z


def new_uid() -> str:
    return str(uuid.uuid4())


# The apiserver's generateName alphabet (no vowels, no confusable digits).
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_SUFFIX) for _ in range(n))


_QTY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_MULT = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity_milli(q) -> int:
    """A resource.Quantity as an integer number of milli-units (rounded up, like the scheduler does)."""
    if isinstance(q, (int, float)):
        q = str(q)
    m = _QTY.match(str(q).strip())
    if not m:
        raise ValueError(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    try:
        num = Decimal(m.group(1))
        if m.group(2):
            num = num * (Decimal(10) ** int(m.group(2)[1:]))
        value = num * _MULT[m.group(3)] * 1000
    except InvalidOperation as exc:  # pragma: no cover - regex already guards
        raise ValueError(str(exc)) from exc
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def format_milli(resource: str, milli: int) -> str:
    """Render milli-units the way kubectl/events show them (cpu in cores or m, others as integers)."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def qualified_name_error(key: str) -> str | None:
    """None when key is a valid label/annotation key (optional DNS prefix + name)."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return "prefix part " + SUBDOMAIN_MSG
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return None
