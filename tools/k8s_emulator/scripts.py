"""Scripted outcomes ("fault injection") per node, optionally narrowed by pod labels.

A script is a dict: {"node": "gpu-3" | "gpu-*" | "*", "labels": {...} (optional), "once": bool,
"action": ..., action parameters}. Actions:
  exit               {exit_code=0, run_seconds=0, log="", termination_message=""}
  crash              {exit_code=139, run_seconds=0.2, log="Segmentation fault (core dumped)"}
  oom                {run_seconds=0.2}: exit 137, reason OOMKilled
  run                {run_seconds=None}: a simulated container that runs (forever when None), then exits 0
  never_schedule     {message="Insufficient nvidia.com/gpu"}: the scheduler never picks this node for the pod
  never_start        bound, the container stays Waiting/ContainerCreating
  exec               {env={}}: run the container command locally even where a wildcard script matches,
                     with these variables added to its environment (e.g. PATH to a node's own tools)
A "once" script binds to the first pod it matches and from then on applies to that pod only.
The most specific wins: claimed, then with labels, then the exact node, then a glob, then "*"; then the newest.
"""

from __future__ import annotations

import fnmatch
import itertools
import threading

ACTIONS = {"exit", "crash", "oom", "run", "never_schedule", "never_start", "exec"}


class ScriptBook:
    def __init__(self):
        self._lock, self._scripts, self._seq = threading.Lock(), [], itertools.count(1)

    def add(self, script: dict) -> dict:
        s = {"node": "*", "once": False, **script, "labels": dict(script.get("labels") or {}),
             "id": next(self._seq), "claimed_by": None}
        if s.get("action") not in ACTIONS:
            raise ValueError(f"unknown script action {s.get('action')!r}; one of {sorted(ACTIONS)}")
        with self._lock:  # a sticky script for the same (node, labels) replaces the previous one
            self._scripts = [x for x in self._scripts if x["once"] or s["once"] or
                             (x["node"], x["labels"]) != (s["node"], s["labels"])] + [s]
        return s

    def clear(self, node: str | None = None):
        with self._lock:
            self._scripts = [s for s in self._scripts if node is not None and s["node"] != node]

    def list(self) -> list[dict]:
        with self._lock:
            return [dict(s) for s in self._scripts]

    def match(self, node: str, labels: dict, pod_uid: str, actions: set | None = None) -> dict | None:
        """The script for this pod on this node (claims a 'once' script for the pod)."""
        with self._lock:
            candidates = [s for s in self._scripts if (actions is None or s["action"] in actions)
                          and s["claimed_by"] in (None, pod_uid) and fnmatch.fnmatchcase(node, s["node"])
                          and all(labels.get(k) == v for k, v in s["labels"].items())]
            if not candidates:
                return None
            best = max(candidates, key=lambda s: (s["claimed_by"] == pod_uid, bool(s["labels"]),
                                                  2 if s["node"] == node else s["node"] != "*", s["id"]))
            if best["once"]:
                best["claimed_by"] = pod_uid
            return dict(best)
