"""Label and field selectors with the apiserver's grammar (k8s.io/apimachinery/pkg/labels and /fields),
plus the node-selector-term matching the scheduler uses for nodeAffinity."""

from __future__ import annotations

from .errors import bad_request
from .util import LABEL_VALUE, qualified_name_error

_SPECIAL = set("(),=!<> \t\n")


def _lex(text: str) -> list[str]:
    tokens, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\n":
            i += 1
        elif ch in "(),<>":
            tokens.append(ch)
            i += 1
        elif ch in "!=":
            if i + 1 < n and text[i + 1] == "=":
                tokens.append(ch + "=")
                i += 2
            else:
                tokens.append(ch)
                i += 1
        else:
            j = i
            while j < n and text[j] not in _SPECIAL:
                j += 1
            tokens.append("\0" + text[i:j])  # \0 marks an identifier (keywords are resolved by the parser)
            i = j
    return tokens


def _ident(tok: str | None) -> str | None:
    return tok[1:] if tok and tok.startswith("\0") else None


def _shown(tok: str | None) -> str:
    return "end of string" if tok is None else (tok.removeprefix("\0"))


class LabelSelector:
    """Requirements are (key, op, values); op in: exists, !, =, !=, in, notin, gt, lt."""

    def __init__(self, reqs: list[tuple[str, str, tuple]]):
        self.reqs = reqs

    @property
    def empty(self) -> bool:
        return not self.reqs

    def matches(self, labels: dict | None) -> bool:
        labels = labels or {}
        for key, op, values in self.reqs:
            present = key in labels
            if op == "exists":
                ok = present
            elif op == "!":
                ok = not present
            elif op in ("=", "in"):
                ok = present and labels[key] in values
            elif op in ("!=", "notin"):
                ok = not present or labels[key] not in values
            else:
                try:
                    v = int(labels[key]) if present else None
                except ValueError:
                    v = None
                ok = v is not None and (v > values[0] if op == "gt" else v < values[0])
            if not ok:
                return False
        return True


def _fail(msg: str):
    raise bad_request(f"unable to parse requirement: {msg}")


def _check_key(key: str):
    err = qualified_name_error(key)
    if err:
        _fail(f'<nil>: Invalid value: "{key}": {err}')


def _check_value(value: str):
    if len(value) > 63 or not LABEL_VALUE.match(value):
        _fail(
            f'values[0][{value}]: Invalid value: "{value}": must be no more than 63 characters'
            if len(value) > 63
            else f'values[0]: Invalid value: "{value}": a valid label must be an empty string '
            "or consist of alphanumeric characters, '-', '_' or '.'"
        )


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return LabelSelector([])
    toks = _lex(text)
    reqs, i = [], 0

    def peek(k=0):
        return toks[i + k] if i + k < len(toks) else None

    while True:
        tok = peek()
        if tok == "!":
            key = _ident(peek(1))
            if key is None:
                _fail(f"found '{_shown(peek(1))}', expected: identifier")
            _check_key(key)
            reqs.append((key, "!", ()))
            i += 2
        elif _ident(tok) is not None:
            key = _ident(tok)
            _check_key(key)
            op = peek(1)
            i += 1
            if op is None or op == ",":
                reqs.append((key, "exists", ()))
            elif op in ("=", "==", "!="):
                val = _ident(peek(1))
                if val is None and peek(1) not in (None, ","):
                    _fail(f"found '{_shown(peek(1))}', expected: identifier")
                val = val or ""
                _check_value(val)
                reqs.append((key, "!=" if op == "!=" else "=", (val,)))
                i += 2 if _ident(peek(1)) is not None else 1
            elif _ident(op) in ("in", "notin"):
                if peek(1) != "(":
                    _fail(f"found '{_shown(peek(1))}', expected: '('")
                i += 2
                values, expect_value = [], True
                while True:
                    t = peek()
                    if expect_value:
                        if t == ")" and not values:
                            _fail("for 'in', 'notin' operators, values set can't be empty")
                        if _ident(t) is not None:
                            values.append(_ident(t))
                            i += 1
                        elif t in (",", ")"):
                            values.append("")
                        else:
                            _fail(f"found '{_shown(t)}', expected: ',', ')' or identifier")
                        expect_value = False
                    elif t == ",":
                        i += 1
                        expect_value = True
                    elif t == ")":
                        i += 1
                        break
                    else:
                        _fail(f"found '{_shown(t)}', expected: ',' or ')'")
                for v in values:
                    _check_value(v)
                reqs.append((key, _ident(op), tuple(values)))
            elif op in ("<", ">"):
                val = _ident(peek(1))
                try:
                    num = int(val or "")
                except ValueError:
                    _fail("for 'Gt', 'Lt' operators, the value must be an integer")
                reqs.append((key, "gt" if op == ">" else "lt", (num,)))
                i += 2
            else:
                _fail(f"found '{_shown(op)}', expected: in, notin, =, ==, !=, gt, lt")
        else:
            _fail(f"found '{_shown(tok)}', expected: !, identifier, or 'end of string'")
        nxt = peek()
        if nxt is None:
            break
        if nxt != ",":
            _fail(f"found '{_shown(nxt)}', expected: ',' or 'end of string'")
        i += 1
    return LabelSelector(reqs)


def selector_from_label_selector_object(sel: dict | None) -> LabelSelector:
    """metav1.LabelSelector (matchLabels + matchExpressions) as a LabelSelector."""
    reqs = []
    for k, v in ((sel or {}).get("matchLabels") or {}).items():
        reqs.append((k, "=", (v,)))
    for e in (sel or {}).get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}[e["operator"]]
        reqs.append((e["key"], op, tuple(e.get("values") or ())))
    return LabelSelector(reqs)


class FieldSelector:
    """Terms are (field, op, value) with op '=' or '!='."""

    def __init__(self, terms: list[tuple[str, str, str]]):
        self.terms = terms

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, values: tuple, index: dict[str, int]) -> bool:
        for field, op, value in self.terms:
            actual = values[index[field]]
            if (actual == value) != (op == "="):
                return False
        return True

    def equality(self, field: str) -> str | None:
        for f, op, v in self.terms:
            if f == field and op == "=":
                return v
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _find_op(term: str) -> tuple[int, str] | None:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return i, op
        i += 1
    return None


def parse_field_selector(text: str | None, supported: dict[str, int]) -> FieldSelector:
    if not text or not text.strip():
        return FieldSelector([])
    terms = []
    for part in _split_unescaped(text, ","):
        if not part:
            continue
        found = _find_op(part)
        if found is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        pos, op = found
        field, value = part[:pos].strip(), _unescape(part[pos + len(op) :])
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")
        terms.append((field, "!=" if op == "!=" else "=", value))
    return FieldSelector(terms)


def node_selector_term_matches(term: dict, labels: dict, name: str) -> bool:
    """One v1.NodeSelectorTerm: all its matchExpressions (labels) and matchFields (metadata.name) hold."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no objects (k8s semantics)
    for e in exprs:
        if not _node_req(e, labels.get(e["key"]), e["key"] in labels):
            return False
    for f in fields:
        if f.get("key") != "metadata.name" or not _node_req(f, name, True):
            return False
    return True


def _node_req(req: dict, value, present: bool) -> bool:
    op, values = req.get("operator"), req.get("values") or []
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        try:
            a, b = int(value), int(values[0])
        except (TypeError, ValueError, IndexError):
            return False
        return a > b if op == "Gt" else a < b
    return False
