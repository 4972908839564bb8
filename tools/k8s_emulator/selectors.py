"""Label and field selectors with the apiserver's grammar, and the node-selector-term matching the
scheduler uses for nodeAffinity."""

from __future__ import annotations

import re

from .errors import bad_request
from .util import LABEL_VALUE, LABEL_VALUE_MSG, qualified_name_error

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_REQ = re.compile(rf"\s*(?:!\s*(?P<absent>{_KEY})|(?P<key>{_KEY})\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,()=!<>]*)"
                  rf"|\s(?P<set>in|notin)\s*\((?P<values>[^()]*)\)|(?P<cmp>[<>])\s*(?P<num>[^\s,]*))?)\s*(?:,|$)")


def _fail(msg: str):
    raise bad_request(f"unable to parse requirement: {msg}")


class LabelSelector:
    """Requirements are (key, op, values); op in: exists, !, =, !=, in, notin, gt, lt."""

    def __init__(self, reqs: list[tuple[str, str, tuple]]):
        self.reqs = reqs
        self.empty = not reqs

    def matches(self, labels: dict | None) -> bool:
        labels = labels or {}
        for key, op, values in self.reqs:
            value = labels.get(key)
            if op == "exists":
                ok = key in labels
            elif op == "!":
                ok = key not in labels
            elif op in ("=", "in"):
                ok = key in labels and value in values
            elif op in ("!=", "notin"):
                ok = value not in values or key not in labels
            else:
                ok = value is not None and value.lstrip("-").isdigit() and (
                    int(value) > values[0] if op == "gt" else int(value) < values[0])
            if not ok:
                return False
        return True


def parse_label_selector(text: str | None) -> LabelSelector:
    """The apiserver's selector grammar: k, !k, k=v, k==v, k!=v, k in (a,b), k notin (a), k>1, k<1."""
    reqs, pos, text = [], 0, (text or "").strip()
    while pos < len(text):
        m = _REQ.match(text, pos)
        if not m or m.end() == pos:
            _fail(f"found '{text[pos:]}', expected: !, identifier, or 'end of string'")
        pos, g = m.end(), m.groupdict()
        key = g["absent"] or g["key"]
        if err := qualified_name_error(key):
            _fail(f'<nil>: Invalid value: "{key}": {err}')
        if g["absent"]:
            reqs.append((key, "!", ()))
        elif g["op"]:
            reqs.append((key, "!=" if g["op"] == "!=" else "=", (g["value"],)))
        elif g["set"]:
            values = tuple(v.strip() for v in g["values"].split(","))
            if values == ("",):
                _fail("for 'in', 'notin' operators, values set can't be empty")
            reqs.append((key, g["set"], values))
        elif g["cmp"]:
            if not g["num"].lstrip("-").isdigit():
                _fail("for 'Gt', 'Lt' operators, the value must be an integer")
            reqs.append((key, "gt" if g["cmp"] == ">" else "lt", (int(g["num"]),)))
        else:
            reqs.append((key, "exists", ()))
        for v in reqs[-1][2] if reqs[-1][1] not in ("gt", "lt") else ():
            if len(v) > 63 or not LABEL_VALUE.match(v):
                _fail(f'values[0]: Invalid value: "{v}": {LABEL_VALUE_MSG}')
        if pos == len(text) and text.endswith(","):
            _fail("found 'end of string', expected: identifier")
    return LabelSelector(reqs)


class FieldSelector:
    """Terms are (field, op, value) with op '=' or '!='."""

    def __init__(self, terms: list[tuple[str, str, str]]):
        self.terms = terms
        self.empty = not terms

    def matches(self, values: tuple, index: dict[str, int]) -> bool:
        return all((values[index[f]] == v) == (op == "=") for f, op, v in self.terms)

    def matcher(self, index: dict[str, int]):
        """``matches`` for one kind's field index, resolved once: a list scans every object with it."""
        terms = [(index[f], v, op == "=") for f, op, v in self.terms]

        def match(values: tuple) -> bool:
            for i, v, equal in terms:
                if (values[i] == v) is not equal:
                    return False
            return True

        return match

    def equality(self, field: str) -> str | None:
        return next((v for f, op, v in self.terms if f == field and op == "="), None)


_TERM = re.compile(r"((?:\\.|[^,\\])*)(?:,|$)")
_OP = re.compile(r"^((?:\\.|[^!=\\])*)(!=|==|=)(.*)$")


def parse_field_selector(text: str | None, supported: dict[str, int]) -> FieldSelector:
    terms = []
    for part in _TERM.findall(text or ""):
        if not part:
            continue
        m = _OP.match(part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field = m.group(1).strip()
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")
        terms.append((field, "!=" if m.group(2) == "!=" else "=", re.sub(r"\\(.)", r"\1", m.group(3))))
    return FieldSelector(terms)


def node_selector_term_matches(term: dict, labels: dict, name: str) -> bool:
    """One v1.NodeSelectorTerm: all its matchExpressions (labels) and matchFields (metadata.name) hold."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no objects
    return all(_node_req(e, labels.get(e["key"]), e["key"] in labels) for e in exprs) and all(
        f.get("key") == "metadata.name" and _node_req(f, name, True) for f in fields)


def _node_req(req: dict, value, present: bool) -> bool:
    op, values = req.get("operator"), req.get("values") or []
    if op in ("Gt", "Lt"):
        try:
            a, b = int(value), int(values[0])
        except (TypeError, ValueError, IndexError):
            return False
        return a > b if op == "Gt" else a < b
    return {"In": present and value in values, "NotIn": not present or value not in values,
            "Exists": present, "DoesNotExist": not present}.get(op, False)
