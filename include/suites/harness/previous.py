"""The sample a suite kept in its previous result on this node, for counters judged by their growth
(ib_health's port error counters, gpu_health's thermal violation time): the result named by
--previous, else the newest result of the node in `<output-dir>/<suite>/<node>/` (in pods the shared
results volume, the same on any executor) — and the kernel's boot id, which says whether the
counters of that sample still count on."""

from __future__ import annotations

import glob
import json
import os
from typing import Callable

from .files import safe_name
from .text import one_line, read_line

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def previous_sample(ctx, suite: str, key: str, explicit: str | None,
                    usable: Callable[[dict], bool] = bool) -> tuple[dict | None, str]:
    """(`environment[key]` of the previous result, "") — its path noted in `environment[key + "_previous"]`
    — or (None, why there is none). Results without a usable sample (an older suite version, a run
    that could not read the counters) are passed over for the next older one."""
    a = ctx.args
    node = safe_name(a.node)
    if explicit:
        paths = [explicit]
    else:
        paths = sorted(glob.glob(os.path.join(a.output_dir, suite, node, f"{suite}_{node}_*.json")),
                       key=_stamp, reverse=True)
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            ctx.warn(f"previous {suite} result {path} unreadable: {one_line(exc, 120)}")
            continue
        sample = (data.get("environment") or {}).get(key) if isinstance(data, dict) else None
        if isinstance(sample, dict) and usable(sample) and data.get("node") in (None, a.node):
            ctx.environment[key + "_previous"] = path
            return sample, ""
    where = explicit or os.path.join(a.output_dir, suite, node)
    return None, f"no previous {suite} sample of this node ({where})"


def _stamp(path: str) -> int:
    tail = os.path.basename(path).rsplit("_", 1)[-1].split(".", 1)[0]
    return int(tail) if tail.isdigit() else 0


def read_boot_id(path: str) -> str | None:
    """The kernel's boot id (a new one after every reboot); None when it cannot be read."""
    return read_line(path)
