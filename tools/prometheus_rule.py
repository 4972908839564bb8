"""Write or check include/k8s/monitoring/prometheusrule.yaml: the groups of
deploy/monitoring/cluster-doctor.rules.yaml as a PrometheusRule for the Prometheus operator.

    python tools/prometheus_rule.py          # rewrite it from the rules file
    python tools/prometheus_rule.py --check  # exit 1 when it differs
"""

from __future__ import annotations

import pathlib
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "monitoring" / "cluster-doctor.rules.yaml"
TARGET = REPO / "include" / "k8s" / "monitoring" / "prometheusrule.yaml"
HEAD = ("# The alert rules of deploy/monitoring/cluster-doctor.rules.yaml as a PrometheusRule (the Prometheus\n"
        "# operator). Same groups, kept equal by tests/deploy/test_monitoring.py: edit the rules file, then\n"
        "# python tools/prometheus_rule.py.\n")


def render() -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "cluster-doctor", "namespace": "cluster-doctor",
                        "labels": {"app.kubernetes.io/name": "cluster-doctor"}},
           "spec": {"groups": groups}}
    return HEAD + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        same = TARGET.read_text() == render()
        if not same:
            print(f"{TARGET.relative_to(REPO)} is stale: run python tools/prometheus_rule.py", file=sys.stderr)
        return 0 if same else 1
    TARGET.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
