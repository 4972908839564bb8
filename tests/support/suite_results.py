"""Suite results as a validation pod reports them: the termination-message summary include/suites
writes (checked against its schema), scripted on an emulator node, and the validation pods it saw."""

from __future__ import annotations

import datetime as dt
import json

import jsonschema

from tests.conftest import REPO

SCHEMA = json.loads((REPO / "include" / "suites" / "result.schema.json").read_text())


def summary(node: str, suite: str = "gpu_health", status: str = "pass", *, checks=None, metrics=None,
            reason: str | None = None, gpu_model: str = "NVIDIA-H100-80GB-HBM3", gpu_count: int = 8) -> str:
    """A termination-message summary exactly as include/suites writes it (validated against its schema)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    checks = checks or [{"name": "gpu_count", "status": "pass", "value": gpu_count, "unit": "GPUs",
                         "threshold": f"== {gpu_count}"}]
    counts = {s: 0 for s in ("pass", "fail", "warn", "error", "skip")}
    for c in checks:
        counts[c["status"]] += 1
    failing = [c for c in checks if c["status"] in ("fail", "error")]
    data = {
        "schema_version": "1", "suite": suite, "node": node, "status": status,
        "reason": reason or (f"{failing[0]['name']}: {failing[0].get('message', 'failed')}" if failing
                             else f"all {len(checks)} checks passed"),
        "started_at": now, "finished_at": now, "duration_s": 1.5, "suite_version": "sha256:0000000000000000",
        "gpu_model": gpu_model, "gpu_count": gpu_count, "metrics": metrics or {"gpus_visible": gpu_count},
        "checks": checks, "check_counts": counts, "truncated": False,
        "log_path": f"/data/continuous_validation/{suite}/{node}/{suite}_{node}_1.log",
        "result_path": f"/data/continuous_validation/{suite}/{node}/{suite}_{node}_1.json",
    }
    jsonschema.validate(data, {**SCHEMA, "$ref": "#/$defs/summary"})
    return json.dumps(data, separators=(",", ":"))


def script_result(emulator, node: str, suite: str = "gpu_health", status: str = "pass", **kw) -> None:
    """The node's next validation pod ends with this suite result (exit code per the contract)."""
    exit_code = {"pass": 0, "fail": 1, "error": 2}[status]
    text = summary(node, suite, status, **kw)
    emulator.set_script(node, "exit", exit_code=exit_code, run_seconds=0.2, termination_message=text,
                        log=f"running {suite} on {node}\nCLUSTER_DOCTOR_RESULT {text}\n")


def validation_pods(emulator) -> list[dict]:
    return emulator.pod_history("app.kubernetes.io/name=cluster-doctor")
