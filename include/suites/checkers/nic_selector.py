"""NCCL_IB_HCA read as NCCL reads it: one parser for every suite that selects HCAs (ib_health,
nccl_loopback, fabric_peer), so a selector cannot mean one thing to the check and another to NCCL.

The grammar is NCCL's own (docs: Environment Variables, NCCL_IB_HCA; code: src/transport/net_ib.cc and
src/misc/utils.cc parseStringList / matchIfList): a leading `^` excludes, then a leading `=` makes
every item an exact device name instead of a prefix; items are separated by `,`; an item `name:port`
names one port (atoi of what follows the colon; without one, every port). `mlx5` selects every port of
every device whose name starts with mlx5; `mlx5_1` also selects mlx5_10..mlx5_19; an empty list
selects everything (and `^` with an empty list nothing, as NCCL's XOR does). No whitespace is
stripped: NCCL does not strip it either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_ITEMS = 32  # NCCL's MAX_IB_DEVS: parseStringList stops after this many items
_ATOI = re.compile(r"^[ \t\n\v\f\r]*([+-]?\d+)")


@dataclass(frozen=True)
class Item:
    name: str  # a prefix, or the exact device name when the selector is exact
    port: int  # -1: any port

    def __str__(self) -> str:
        return self.name if self.port == -1 else f"{self.name}:{self.port}"


@dataclass(frozen=True)
class NicSelector:
    text: str
    exclude: bool
    exact: bool
    items: tuple[Item, ...]

    @property
    def inclusive(self) -> bool:
        return not self.exclude and bool(self.items)

    @property
    def names_each(self) -> bool:
        """Every item names one device (an inclusive exact list): each must be present."""
        return self.inclusive and self.exact

    def selects(self, device: str, port: int | None) -> bool:
        """Whether NCCL would use this device's port. Port None or 0 (a device whose ports cannot be
        read) matches by name whatever port an item names: it is the device that is in question."""
        p = -1 if not port else port
        hit = not self.items or any(_name_matches(device, i.name, self.exact) and _port_matches(p, i.port)
                                    for i in self.items)
        return hit != self.exclude

    def item_matches(self, item: Item, device: str, port: int | None) -> bool:
        p = -1 if not port else port
        return _name_matches(device, item.name, self.exact) and _port_matches(p, item.port)

    def select(self, ports: Iterable[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
        return [(d, p) for d, p in ports if self.selects(d, p)]

    def describe(self) -> str:
        what = "exclude" if self.exclude else "use"
        how = "exactly" if self.exact else "by prefix"
        items = ", ".join(str(i) for i in self.items) or "(none)"
        return f"NCCL_IB_HCA {self.text!r}: {what} {how} {items}"


def parse(text: str | None) -> NicSelector | None:
    """None when nothing is set (NCCL then uses every device it finds)."""
    if text is None:
        return None
    s = text
    exclude = s.startswith("^")
    if exclude:
        s = s[1:]
    exact = s.startswith("=")
    if exact:
        s = s[1:]
    return NicSelector(text, exclude, exact, tuple(_items(s)))


def _items(s: str) -> list[Item]:
    """parseStringList: one leading `^` or `=` more is skipped; an item ends at `,`; `:` ends the
    name and the rest up to the next `,` is the port (atoi: no digits is 0); empty names are dropped."""
    if s[:1] in ("^", "="):
        s = s[1:]
    out: list[Item] = []
    for chunk in s.split(","):
        if len(out) >= MAX_ITEMS:
            break
        name, colon, rest = chunk.partition(":")
        if not name:
            continue
        out.append(Item(name, _atoi(rest) if colon else -1))
    return out


def _atoi(s: str) -> int:
    m = _ATOI.match(s)
    return int(m.group(1)) if m else 0


def _name_matches(device: str, ref: str, exact: bool) -> bool:
    return device == ref if exact else device.startswith(ref)


def _port_matches(port: int, want: int) -> bool:
    return port == -1 or want == -1 or port == want
