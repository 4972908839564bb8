"""Scripted outcomes ("fault injection") per node, optionally narrowed by pod labels.

A script is a dict: {"node": "gpu-3" | "gpu-*" | "*", "labels": {...} (optional), "once": bool,
"action": ..., action parameters}. Actions:
  exit               {exit_code=0, run_seconds=0, log="", termination_message=""}
  crash              {exit_code=139, run_seconds=0.2, log="Segmentation fault (core dumped)"}
  oom                {run_seconds=0.2}: exit 137, reason OOMKilled
  run                {run_seconds=None}: simulated container that runs (forever when None) then exits 0
  never_schedule     {message="Insufficient nvidia.com/gpu"}: the scheduler never picks this node for the pod
  never_start        bound, container stays Waiting/ContainerCreating
  image_pull_backoff {message=...}: ErrImagePull then ImagePullBackOff
  evict_after        {seconds=1}: kubelet node-pressure eviction (phase Failed, reason Evicted)
  preempt_after      {seconds=1}: the scheduler preempts the pod (DisruptionTarget + graceful delete)
  exec               force exec mode (run the container command locally) even if a wildcard script matches
A "once" script binds to the first pod it matches and from then on applies to that pod only.
Most specific wins: node+labels, then node, then glob, then "*"; the newest among equals.
"""

from __future__ import annotations

import fnmatch
import itertools
import threading

ACTIONS = {
    "exit",
    "crash",
    "oom",
    "run",
    "never_schedule",
    "never_start",
    "image_pull_backoff",
    "evict_after",
    "preempt_after",
    "exec",
}


class ScriptBook:
    def __init__(self):
        self._lock = threading.Lock()
        self._scripts: list[dict] = []
        self._seq = itertools.count(1)

    def add(self, script: dict) -> dict:
        s = dict(script)
        if s.get("action") not in ACTIONS:
            raise ValueError(f"unknown script action {s.get('action')!r}; one of {sorted(ACTIONS)}")
        s.setdefault("node", "*")
        s.setdefault("once", False)
        s["labels"] = dict(s.get("labels") or {})
        s["id"] = next(self._seq)
        s["claimed_by"] = None
        with self._lock:
            # setting a script for the same (node, labels) replaces the previous one
            self._scripts = [
                x
                for x in self._scripts
                if not (
                    x["node"] == s["node"] and x["labels"] == s["labels"] and not x["once"] and not s["once"]
                )
            ]
            self._scripts.append(s)
        return s

    def clear(self, node: str | None = None):
        with self._lock:
            self._scripts = [s for s in self._scripts if node is not None and s["node"] != node]

    def list(self) -> list[dict]:
        with self._lock:
            return [dict(s) for s in self._scripts]

    def match(self, node: str, labels: dict, pod_uid: str, actions: set | None = None) -> dict | None:
        """The script for this pod on this node (claims 'once' scripts for the pod)."""
        with self._lock:
            best, best_rank = None, None
            for s in self._scripts:
                if actions is not None and s["action"] not in actions:
                    continue
                if s["claimed_by"] not in (None, pod_uid):
                    continue
                if not fnmatch.fnmatchcase(node, s["node"]):
                    continue
                if any(labels.get(k) != v for k, v in s["labels"].items()):
                    continue
                specificity = (
                    1 if s["claimed_by"] == pod_uid else 0,
                    1 if s["labels"] else 0,
                    2 if s["node"] == node else (1 if s["node"] != "*" else 0),
                    s["id"],
                )
                if best_rank is None or specificity > best_rank:
                    best, best_rank = s, specificity
            if best is not None and best["once"]:
                best["claimed_by"] = pod_uid
            return dict(best) if best else None
