"""Prometheus text (0.0.4 and 1.0.0) and OpenMetrics exposition written from text kept between scrapes:
the same bytes prometheus_client's encoders write, without their cost per sample.

A scrape is a list of ``Chunk``: a family of a few samples is written by the library's own encoder; a
family of thousands (the per-pair families: 90,000 samples at 5,000 nodes) brings its sample lines as
text, and only its ``# HELP``/``# TYPE`` lines come from the library (an empty family of the same name,
type and help). Sample lines are the same in both formats (labels sorted by name, values in Go's float
format, label values escaped alike); only the headers and OpenMetrics' ``# EOF`` differ. ``name[]``
filters as the library's restricted registry does: the samples of those names, families left without
samples dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import struct
import threading
import zlib
from collections.abc import Iterable, Sequence

from prometheus_client.exposition import choose_encoder
from prometheus_client.exposition import generate_latest as text_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.utils import floatToGoString

OPENMETRICS_TYPE = "application/openmetrics-text"
EOF = "# EOF\n"


def go(value: float) -> str:
    """A sample value as the library writes it (``floatToGoString``), with its common case inline:
    below 1e6 (and not -Inf or NaN) Go's format is Python's repr."""
    if -math.inf < value < 1e6:
        return repr(float(value))
    return floatToGoString(value)


def escape(value: str) -> str:
    """A label value, escaped as both formats require (backslash, newline, double quote)."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


@dataclasses.dataclass(frozen=True)
class Series:
    """How the lines of one family's samples begin: its sample name and label names, sorted as the
    library writes them, with where each sorted label sits in the family's label order."""

    sample_name: str
    labels: tuple[str, ...]

    @functools.cached_property
    def _sorted(self) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((name, i) for i, name in enumerate(self.labels)))

    def prefix(self, values: Sequence[str]) -> str:
        """``name{a="x",b="y"} `` for label values in the family's label order."""
        if not values:
            return f"{self.sample_name} "
        inner = ",".join(f'{name}="{escape(values[i])}"' for name, i in self._sorted)
        return f"{self.sample_name}{{{inner}}} "

    def line(self, values: Sequence[str], value: float) -> str:
        return f"{self.prefix(values)}{go(value)}\n"


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One family of a scrape: ``family`` holds its name, type and help (and its samples, when ``body``
    is None); ``body`` its sample lines as UTF-8 text, all named ``sample_name``."""

    family: Metric
    body: bytes | None = None
    sample_name: str | None = None


class _Families:
    """A collector over a fixed list of families (what the library's encoders iterate)."""

    def __init__(self, families: Sequence[Metric]):
        self.families = families

    def collect(self) -> Sequence[Metric]:
        return self.families


def is_openmetrics(content_type: str) -> bool:
    return content_type.startswith(OPENMETRICS_TYPE)


def negotiate(accept: str | None) -> tuple[bool, str]:
    """(OpenMetrics?, content type) for an Accept header, as the library's WSGI app decides."""
    _, content_type = choose_encoder(accept or "")
    return is_openmetrics(content_type), content_type


def library_text(families: Sequence[Metric], openmetrics: bool) -> bytes:
    """Families written by the library's encoder (without OpenMetrics' closing ``# EOF``)."""
    if openmetrics:
        return openmetrics_latest(_Families(families))[: -len(EOF)]
    return text_latest(_Families(families))


@functools.lru_cache(maxsize=256)
def _header(name: str, kind: str, documentation: str, openmetrics: bool) -> bytes:
    return library_text([Metric(name, documentation, kind)], openmetrics)


def _restricted(family: Metric, names: frozenset[str]) -> Metric | None:
    kept = [s for s in family.samples if s.name in names]
    if not kept:
        return None
    out = Metric(family.name, family.documentation, family.type, family.unit)
    out.samples = kept
    return out


def segments(chunks: Iterable[Chunk], *, openmetrics: bool, names: Iterable[str] | None = None) -> list[bytes]:
    """The exposition of ``chunks`` in one of the two formats, as consecutive pieces (a kept family's text
    is the same bytes object from one scrape to the next); ``names``: only samples of these names."""
    wanted = frozenset(names) if names is not None else None
    out: list[bytes] = []
    small: list[Metric] = []  # consecutive small families go to the library together
    for chunk in chunks:
        if chunk.body is None:
            family = chunk.family if wanted is None else _restricted(chunk.family, wanted)
            if family is not None:
                small.append(family)
            continue
        if wanted is not None and (chunk.sample_name not in wanted or not chunk.body):
            continue
        family = chunk.family
        out.append(b"".join([library_text(small, openmetrics) if small else b"",
                             _header(family.name, family.type, family.documentation, openmetrics)]))
        small = []
        out.append(chunk.body)
    if small or openmetrics:
        out.append((library_text(small, openmetrics) if small else b"") + (EOF.encode() if openmetrics else b""))
    return out


def encode(chunks: Iterable[Chunk], *, openmetrics: bool, names: Iterable[str] | None = None) -> bytes:
    """The exposition of ``chunks`` as one body (see ``segments``)."""
    return b"".join(segments(chunks, openmetrics=openmetrics, names=names))


class Gzip:
    """gzip of a scrape's pieces that compresses again only the pieces that changed since the previous
    one: each piece is its own run of raw deflate ended by a full flush (no back-reference crosses it),
    so the runs of unchanged pieces are reused as they are; then the closing block, the CRC-32 and the
    length make it one gzip member, as any gzip reader (Prometheus's included) reads it."""

    HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no time, unknown OS
    LAST = b"\x03\x00"  # an empty final block

    def __init__(self, level: int):
        self.level = level
        self.kept: list[tuple[bytes, bytes]] = []  # (piece, its deflate run) by place, from the previous call
        self.lock = threading.Lock()

    def _run(self, piece: bytes) -> bytes:
        deflate = zlib.compressobj(self.level, zlib.DEFLATED, -15)
        return deflate.compress(piece) + deflate.flush(zlib.Z_FULL_FLUSH)

    def compress(self, pieces: Sequence[bytes]) -> bytes:
        out, kept, crc, size = [self.HEADER], [], 0, 0
        with self.lock:
            previous = self.kept
            for i, piece in enumerate(pieces):
                hit = previous[i] if i < len(previous) else None
                run = hit[1] if hit is not None and hit[0] is piece else self._run(piece)
                kept.append((piece, run))
                out.append(run)
                crc = zlib.crc32(piece, crc)
                size += len(piece)
            self.kept = kept
        out += [self.LAST, struct.pack("<LL", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)]
        return b"".join(out)
