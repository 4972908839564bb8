"""Small helpers shared by every module: JSON, timestamps in the apiserver's formats, quantities, names."""

from __future__ import annotations

import base64
import datetime
import json
import random
import re
import time
import uuid
from decimal import ROUND_CEILING, Decimal

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
    """metav1.Time: second precision, UTC with a Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def rfc3339_micro(ts: float | None = None) -> str:
    """metav1.MicroTime (an event's eventTime)."""
    d = datetime.datetime.fromtimestamp(time.time() if ts is None else ts, datetime.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_nano(ts: float) -> str:
    """Go's RFC3339Nano as the kubelet prints log timestamps: trailing zeros trimmed."""
    d = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    frac = f"{d.microsecond:06d}000".rstrip("0")
    return d.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def parse_time(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp()


def new_uid() -> str:
    return str(uuid.uuid4())


SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(SUFFIX_ALPHABET) for _ in range(n))


_QTY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_SUFFIXES = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def quantity_milli(q) -> int:
    """A resource.Quantity as an integer number of milli-units, rounded up as the scheduler does."""
    m = _QTY.match(str(q).strip())
    if not m:
        raise ValueError(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    num, exp, suffix = Decimal(m.group(1)), m.group(2), m.group(3)
    if exp:
        num *= Decimal(10) ** int(exp)
    elif suffix and suffix.endswith("i"):
        num *= Decimal(2) ** (10 * ("KMGTPE".index(suffix[0]) + 1))
    elif suffix:
        num *= Decimal(10) ** _SUFFIXES[suffix]
    return int((num * 1000).to_integral_value(rounding=ROUND_CEILING))


def format_milli(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


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
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
QUALIFIED_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


def qualified_name_error(key: str) -> str | None:
    """None when key is a valid label/annotation key (optional DNS prefix + name)."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return "prefix part " + SUBDOMAIN_MSG
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        return QUALIFIED_MSG
    return None
