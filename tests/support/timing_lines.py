"""The timing line `make demo` and `make up` end with (tools/timing.py), parsed and checked: every phase
the command marks, in order, adding up to the total, and the machine's CPUs and load."""

from __future__ import annotations

import re

PHASES = {
    "make demo finished": ["start", "database", "airflow", "cluster", "DAG runs", "report", "status", "stop"],
    "make up ready": ["start", "PostgreSQL", "cluster start", "results DB", "airflow db migrate",
                      "components healthy", "cluster ready", "DAG parsed", "unpaused"],
}
LINE = re.compile(r"(?P<what>make demo finished|make up ready) in (?P<total>\d+) s \((?P<phases>.+); "
                  r"(?P<cpus>\d+) CPUs, load (?P<load1>[\d.]+) \(1 min\) / (?P<load5>[\d.]+) \(5 min\)\)")


def timing_line(text: str) -> dict | None:
    """A command's timing line parsed (what, total, phases as (name, seconds), cpus, load), or None."""
    m = LINE.fullmatch(text.strip())
    if m is None:
        return None
    phases = [(name, int(secs)) for name, secs in re.findall(r"([A-Za-z][A-Za-z ]*?) (\d+) s", m["phases"])]
    return {"what": m["what"], "total": int(m["total"]), "phases": phases, "cpus": int(m["cpus"]),
            "load": float(m["load1"])}


def assert_timing_line(text: str, what: str) -> dict:
    parsed = timing_line(text)
    assert parsed is not None and parsed["what"] == what, text
    assert [name for name, _ in parsed["phases"]] == PHASES[what], text
    # each phase rounded to a second: they add up to the total within their rounding
    assert abs(sum(s for _, s in parsed["phases"]) - parsed["total"]) <= len(parsed["phases"]) // 2 + 1, text
    return parsed
