"""docs/deployment.md: the snippets people copy must parse, build and name real things."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import kubernetes_validate
import yaml

from tests.conftest import kubectl as find_kubectl

REPO = pathlib.Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "deployment.md"


def code_blocks(language: str) -> list[str]:
    text = DOC.read_text()
    blocks = []
    for match in re.finditer(r"^( *)```" + language + r"\n(.*?)^\1```", text, re.S | re.M):
        indent = len(match.group(1))
        blocks.append("\n".join(line[indent:] for line in match.group(2).splitlines()))
    return blocks


def yaml_blocks() -> list[dict]:
    return [yaml.safe_load(block) for block in code_blocks("yaml")]


def test_every_yaml_snippet_parses():
    blocks = code_blocks("yaml")
    assert len(blocks) >= 2
    for block in blocks:
        assert isinstance(yaml.safe_load(block), dict), block[:200]


def test_helm_values_snippet_uses_the_chart_keys_and_sets_up_pool_and_connections():
    (values,) = [b for b in yaml_blocks() if "executor" in b]
    sync = values["dags"]["gitSync"]
    assert sync["enabled"] is True and sync["subPath"] == "dags" and sync["repo"].endswith(".git")
    env = {e["name"]: e.get("value") for e in values["env"]}
    assert '"in_cluster": true' in env["AIRFLOW_CONN_KUBERNETES_DEFAULT"]
    assert values["secret"] == [{"envName": "AIRFLOW_CONN_VALIDATION_DB",
                                 "secretName": "cluster-doctor-connections",
                                 "secretKey": "AIRFLOW_CONN_VALIDATION_DB"}]
    (init,) = values["scheduler"]["extraInitContainers"]
    script = init["args"][-1]
    assert "cluster-doctor db upgrade" in script
    # migrations as the owner, then the run-time role tasks log in as gets its rows-only rights
    assert 'AIRFLOW_CONN_VALIDATION_DB="$CLUSTER_DOCTOR_OWNER_DB_URL" cluster-doctor db upgrade' in script
    assert "cluster-doctor db grant-runtime cluster_doctor_app" in script
    assert "airflow pools set gpu_validation" in script and "--include-deferred" in script
    assert "command" not in init, "args keep the image entrypoint (it waits for the metadata DB)"
    assert {e["name"] for e in init["env"]} == {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                                                "CLUSTER_DOCTOR_OWNER_DB_URL"}
    image = values["images"]["airflow"]
    assert init["image"] == f"{image['repository']}:{image['tag']}", "the same image as Airflow itself"


def test_the_rbac_overlay_snippet_builds(tmp_path):
    (overlay,) = [b for b in code_blocks("yaml") if "kind: Kustomization" in b]
    kubectl = find_kubectl()
    shutil.copytree(REPO / "include" / "k8s", tmp_path / "include" / "k8s")
    target = tmp_path / "deploy" / "my-cluster"
    target.mkdir(parents=True)
    (target / "kustomization.yaml").write_text(overlay)
    result = subprocess.run([kubectl, "kustomize", str(target)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d]
    bindings = [d for d in built if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert len(bindings) == 2
    for binding in bindings:
        assert {s["namespace"] for s in binding["subjects"]} == {"airflow"}
        kubernetes_validate.validate(binding, "1.31", strict=True)


def test_paths_named_in_the_doc_exist():
    path = r"`((?:deploy|include/k8s|tests/deploy|plugins/cluster_doctor)/[\w./-]+|docker-compose\.yaml)`"
    named = set(re.findall(path, DOC.read_text()))
    assert named, "the doc names its files"
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert missing == []
