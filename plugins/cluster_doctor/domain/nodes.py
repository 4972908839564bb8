"""Node names and node-range expressions as SREs write them.

An expression is a list of terms separated by commas or whitespace (outside brackets). A term is
either a Slurm hostlist (``gpu-[001-064,100]``, ``rack[1-2]-gpu[01-08]``, expanded by the maintained
python-hostlist library) or, when it contains ``*`` or ``?``, a shell glob (``gpu-a*``,
``gpu-0[0-4]?``). An empty expression means every node.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

import hostlist

MAX_EXPANSION = 100_000  # a sane cap: the Kubernetes scalability limit is 5,000 nodes
# Always used with fullmatch: `$` in re also matches before a trailing newline.
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_GLOB_CHARS = re.compile(r"[a-z0-9.\-*?\[\]!]+")
# The apiserver validates node names as an RFC 1123 subdomain (IsDNS1123Subdomain): the pattern and
# at most 253 characters in all. It does not bound each dot-separated part, so neither do we.
MAX_NODE_NAME = 253
MAX_EXPRESSION = 10_000  # a node-range expression is typed by a person or pasted from a list


def shown(value: object, limit: int = 80) -> str:
    """A bounded, escaped rendering of untrusted input for one-line error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


class InvalidNodeName(ValueError):
    pass


class InvalidNodeRange(ValueError):
    pass


def validate_node_name(name: object) -> str:
    """Return ``name`` if it is a valid Kubernetes node name (RFC 1123 subdomain), else raise.

    Node names reach pod specs (node affinity), label values and SQL parameters; checking them here
    keeps anything odd out of all three."""
    if not isinstance(name, str) or not name:
        raise InvalidNodeName(f"invalid Kubernetes node name {shown(name)}: must be a non-empty string")
    if len(name) > MAX_NODE_NAME or not _NODE_NAME.fullmatch(name):
        raise InvalidNodeName(
            f"invalid Kubernetes node name {shown(name)}: lowercase letters, digits, '-' and '.', "
            f"starting and ending with a letter or digit, at most {MAX_NODE_NAME} characters"
        )
    return name


def _split_terms(expression: str) -> list[str]:
    terms, depth, current = [], 0, []
    for ch in expression:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InvalidNodeRange(f"invalid node range {shown(expression)}: unbalanced ']'")
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise InvalidNodeRange(f"invalid node range {shown(expression)}: unbalanced '['")
    if current:
        terms.append("".join(current))
    return terms


class NodeRange:
    """A parsed node-range expression: explicit names plus glob patterns."""

    def __init__(self, expression: str | None = None):
        self.expression = (expression or "").strip()
        if len(self.expression) > MAX_EXPRESSION:
            raise InvalidNodeRange(f"node range is {len(self.expression)} characters long: at most {MAX_EXPRESSION}")
        self.names: frozenset[str] = frozenset()
        self.patterns: tuple[str, ...] = ()
        names: list[str] = []
        patterns: list[str] = []
        for term in _split_terms(self.expression):
            if "*" in term or "?" in term:
                patterns.append(self._check_glob(term))
            else:
                names.extend(self._expand(term, limit=MAX_EXPANSION - len(names)))
        self.names = frozenset(names)
        self.patterns = tuple(patterns)
        self._regex = re.compile("|".join(fnmatch.translate(p) for p in patterns)) if patterns else None

    @staticmethod
    def _check_glob(term: str) -> str:
        if not _GLOB_CHARS.fullmatch(term):
            bad = sorted({c for c in term if not _GLOB_CHARS.fullmatch(c)})
            raise InvalidNodeRange(f"invalid node range part {shown(term)}: unexpected character(s) {''.join(bad)!r}")
        return term

    @staticmethod
    def _expand(term: str, limit: int) -> list[str]:
        try:
            expanded = hostlist.expand_hostlist(term)
        except hostlist.BadHostlist as exc:
            detail = str(exc)
            if "too large" in detail:
                detail = f"expands to more than {MAX_EXPANSION} names"
            raise InvalidNodeRange(f"invalid node range part {shown(term)}: {detail}") from None
        if len(expanded) > limit:
            raise InvalidNodeRange(
                f"invalid node range part {shown(term)}: the expression expands to more than {MAX_EXPANSION} names"
            )
        for name in expanded:
            try:
                validate_node_name(name)
            except InvalidNodeName:
                raise InvalidNodeRange(
                    f"invalid node range part {shown(term)}: {shown(name)} is not a valid Kubernetes node name"
                ) from None
        return expanded

    @property
    def is_all(self) -> bool:
        return not self.expression

    @property
    def has_patterns(self) -> bool:
        return bool(self.patterns)

    def matches(self, name: str) -> bool:
        if self.is_all:
            return True
        return name in self.names or bool(self._regex and self._regex.match(name))

    def filter(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if self.matches(n)]

    def expand(self) -> list[str]:
        """The explicit names, sorted naturally; globs need a node list to match against."""
        if self.patterns:
            raise InvalidNodeRange(
                f"node range {shown(self.expression)} contains glob pattern(s): "
                "it can only be matched against a list of nodes"
            )
        return hostlist.numerically_sorted(list(self.names))

    def __str__(self) -> str:
        return self.expression or "(all nodes)"

    def __repr__(self) -> str:
        return f"NodeRange({self.expression!r})"


# A coarse JSON-schema pattern for the trigger form (ECMAScript regex, checked in the browser and by
# Param validation at trigger time): names, globs and bracketed numeric ranges only, brackets closed.
# It refuses obvious typos at once; parse_node_range still validates fully at run time. Empty (or
# null) means every GPU node.
NODE_RANGE_PATTERN = r"^(?:[a-z0-9.*?,-]|\[[0-9a-z,-]+\])*$"


def parse_node_range(expression: str | None) -> NodeRange:
    if expression is not None and not isinstance(expression, str):
        raise InvalidNodeRange(f"node range must be text, got {type(expression).__name__}")
    return NodeRange(expression)


def compress(names: Iterable[str]) -> str:
    """Inverse of expansion, for display: ['gpu-001', 'gpu-002', 'gpu-004'] -> 'gpu-[001-002,004]'."""
    names = list(names)
    return hostlist.collect_hostlist(names) if names else ""


def expand(expression: str) -> list[str]:
    """Inverse of ``compress``: the names of a hostlist expression it wrote ('' is none)."""
    return hostlist.expand_hostlist(expression) if expression else []


def natural(name: str) -> tuple:
    """Sort key: gpu-2 before gpu-10 (hostlist's numeric order), ties broken by the plain name."""
    return hostlist.numeric_sort_key(name), name
