"""include/k8s/conditions: the opt-in permission of the node_conditions setting grants exactly `patch`
on `nodes/status` to the Airflow ServiceAccount; `kubectl auth can-i --list`, asked of an apiserver
(the emulator) that grants the Airflow side what its manifests bind, lists exactly that next to the
discovery role's reads, and the node conditions are written with nothing more."""

from __future__ import annotations

import pathlib
import subprocess

import kubernetes_validate
import pytest
import yaml
from k8s_emulator import EmulatorProcess

from tests.conftest import kubectl

REPO = pathlib.Path(__file__).resolve().parents[2]
K8S = REPO / "include" / "k8s"
CONDITIONS = K8S / "conditions"
K8S_VERSION = "1.31"
EXACT = [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]
BINDING = {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-doctor-conditions"},
           "subjects": [{"kind": "ServiceAccount", "name": "cluster-doctor-airflow", "namespace": "cluster-doctor"}]}


def docs(path: pathlib.Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def violations(objs: list[dict]) -> list[str]:
    problems = []
    for d in objs:
        name = f"{d['kind']}/{d['metadata']['name']}"
        if d["kind"] == "ClusterRole":
            if d.get("aggregationRule") or d["rules"] != EXACT:
                problems.append(f"{name}: must grant exactly patch on nodes/status, grants {d['rules']}")
        elif d["kind"] == "ClusterRoleBinding":
            if {k: d[k] for k in BINDING} != BINDING:
                problems.append(f"{name}: binds {d['roleRef']} to {d['subjects']}")
        else:
            problems.append(f"{name}: unexpected object in the conditions RBAC")
    return problems


def test_the_role_is_opt_in_and_grants_exactly_patch_on_node_status():
    objs = docs(CONDITIONS / "conditions-rbac.yaml")
    assert sorted((d["kind"], d["metadata"]["name"]) for d in objs) == [
        ("ClusterRole", "cluster-doctor-conditions"), ("ClusterRoleBinding", "cluster-doctor-conditions")]
    assert violations(objs) == []
    for d in objs:
        assert kubernetes_validate.validate(d, K8S_VERSION, strict=True) == K8S_VERSION
    assert "conditions" not in str(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    built = subprocess.run([kubectl(), "kustomize", str(CONDITIONS)], capture_output=True, text=True, check=True)
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(built.stdout) if d] == ["cluster-doctor-conditions"] * 2


@pytest.mark.parametrize("mutate", [
    lambda d: d[0]["rules"][0]["verbs"].append("update"),
    lambda d: d[0]["rules"][0]["resources"].append("nodes"),
    lambda d: d[0]["rules"][0]["resources"].__setitem__(0, "*/status"),
    lambda d: d[1]["subjects"].append({"kind": "ServiceAccount", "name": "cluster-doctor-validation",
                                       "namespace": "cluster-doctor"}),
], ids=["update", "nodes", "every-status", "validation-pods-bound"])
def test_the_checker_catches(mutate):
    objs = docs(CONDITIONS / "conditions-rbac.yaml")
    mutate(objs)
    assert violations(objs)


def _rules(path: pathlib.Path) -> list[dict]:
    return [r for d in docs(path) if d["kind"] == "ClusterRole" for r in d["rules"]]


def test_kubectl_auth_can_i_lists_exactly_what_is_needed(tmp_path):
    granted = _rules(K8S / "rbac-cluster.yaml") + _rules(CONDITIONS / "conditions-rbac.yaml")
    with EmulatorProcess(state_dir=str(tmp_path / "emu")) as emu:
        emu.configure(rbac_rules=granted)
        out = subprocess.run([kubectl(), "--kubeconfig", emu.kubeconfig_path, "auth", "can-i", "--list"],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {tuple(line.split()) for line in out.stdout.splitlines()[1:] if line.split() and not line.startswith(" ")}
    writes = {r for r in rows if set(r[-1].strip("[]").split()) - {"get", "list", "watch"}
              and not r[0].startswith("selfsubject")}  # every user may create its own reviews
    assert writes == {("nodes/status", "[]", "[]", "[patch]")}
    assert ("nodes", "[]", "[]", "[get", "list", "watch]") in rows
