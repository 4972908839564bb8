"""include/k8s: schema validation against the Kubernetes API (kubernetes-validate, strict) and a
least-privilege check of the RBAC, plus the names the rest of Cluster Doctor relies on.

The RBAC checker is tested against mutated copies of the real manifests (a wildcard, Secrets, a
write verb cluster-wide, a binding to cluster-admin, ...), so a regression cannot pass silently.
"""

from __future__ import annotations

import copy
import pathlib
import subprocess

import kubernetes_validate
import pytest
import yaml
from cluster_doctor.domain.config import Settings

from tests.conftest import kubectl as find_kubectl

REPO = pathlib.Path(__file__).resolve().parents[2]
K8S = REPO / "include" / "k8s"
K8S_VERSION = "1.31"  # oldest Kubernetes minor still commonly run on GPU fleets; schema of that API
NAMESPACE = "cluster-doctor"
AIRFLOW_SA = "cluster-doctor-airflow"
VALIDATION_SA = "cluster-doctor-validation"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}

# What the Airflow side does, and therefore all it may do ("<resource>.<group>" outside the core group).
CLUSTER_READ = {"nodes": {"get", "list", "watch"}, "pods": {"get", "list", "watch"},
                "events": {"list"},  # the signals between validations: events on nodes
                "storageclasses.storage.k8s.io": {"get"}}
NAMESPACE_RULES = {
    "pods": {"create", "get", "list", "watch", "patch", "delete"},
    "pods/log": {"get"},
    "events": {"get", "list", "watch"},
    "configmaps": {"create", "get", "list", "delete"},
    "persistentvolumeclaims": {"get"},
}
# Read only by name: the results claim the validation pods mount (setting pvc).
NARROWED = {"persistentvolumeclaims": [Settings().pvc]}
DANGEROUS_VERBS = {"escalate", "bind", "impersonate", "*"}
DANGEROUS_RESOURCES = {"secrets", "pods/exec", "pods/attach", "pods/portforward", "pods/proxy", "nodes/proxy",
                       "serviceaccounts/token", "pods/ephemeralcontainers", "*"}


def load_manifests() -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                doc.setdefault("__file__", path.name)
                docs.append(doc)
    return docs


def strip(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "__file__"}


def ident(doc: dict) -> str:
    return f"{doc['__file__']}: {doc['kind']}/{doc['metadata']['name']}"


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    return load_manifests()


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


# ------------------------------------------------------------------------------ the RBAC checker
def rbac_violations(docs: list[dict]) -> list[str]:
    """Every way the manifests grant more than Cluster Doctor needs; empty when least-privilege."""
    problems: list[str] = []
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("Role", "ClusterRole")}

    def check_rules(doc: dict, allowed: dict[str, set[str]], exact: bool) -> None:
        if doc.get("aggregationRule"):
            problems.append(f"{ident(doc)}: aggregationRule pulls in permissions from elsewhere")
        granted: dict[str, set[str]] = {}
        for rule in doc.get("rules") or []:
            if rule.get("nonResourceURLs"):
                problems.append(f"{ident(doc)}: nonResourceURLs {rule['nonResourceURLs']}")
            groups, resources = rule.get("apiGroups", []), rule.get("resources", [])
            verbs = rule.get("verbs", [])
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                if any("*" in str(v) for v in rule.get(field) or []):
                    problems.append(f"{ident(doc)}: wildcard in {field}: {rule[field]}")
            for verb in set(verbs) & DANGEROUS_VERBS:
                problems.append(f"{ident(doc)}: verb {verb!r}")
            for resource in resources:
                if resource in DANGEROUS_RESOURCES or resource.split("/")[0] == "secrets":
                    problems.append(f"{ident(doc)}: resource {resource!r}")
                if resource in NARROWED and rule.get("resourceNames") != NARROWED[resource]:
                    problems.append(f"{ident(doc)}: {resource} must be limited to resourceNames {NARROWED[resource]}")
                for group in groups:
                    granted.setdefault(f"{resource}.{group}" if group else resource, set()).update(verbs)
        for resource, verbs in granted.items():
            if resource not in allowed:
                problems.append(f"{ident(doc)}: resource {resource!r} is not needed")
            elif extra := verbs - allowed[resource]:
                problems.append(f"{ident(doc)}: {resource} verbs {sorted(extra)} are not needed")
        if exact:
            for resource, verbs in allowed.items():
                if granted.get(resource, set()) != verbs:
                    problems.append(f"{ident(doc)}: {resource} must grant exactly {sorted(verbs)}, "
                                    f"grants {sorted(granted.get(resource, set()))}")

    for doc in by_kind(docs, "ClusterRole"):
        check_rules(doc, CLUSTER_READ, exact=True)
    for doc in by_kind(docs, "Role"):
        if doc["metadata"].get("namespace") != NAMESPACE:
            problems.append(f"{ident(doc)}: Role outside the validation namespace {NAMESPACE}")
        check_rules(doc, NAMESPACE_RULES, exact=True)

    for doc in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding"):
        ref = doc["roleRef"]
        if (ref["kind"], ref["name"]) not in roles:
            # e.g. cluster-admin, edit, admin: roles these manifests do not define and this test cannot see
            problems.append(f"{ident(doc)}: binds {ref['kind']}/{ref['name']}, not a role defined here")
        if doc["kind"] == "RoleBinding" and ref["kind"] != "Role":
            problems.append(f"{ident(doc)}: a RoleBinding should bind the namespaced Role")
        for subject in doc.get("subjects") or []:
            if (subject.get("kind"), subject.get("name"), subject.get("namespace")) != (
                    "ServiceAccount", AIRFLOW_SA, NAMESPACE):
                problems.append(f"{ident(doc)}: subject {subject} (only {NAMESPACE}/{AIRFLOW_SA} needs it)")

    for doc in by_kind(docs, "ServiceAccount"):
        if doc["metadata"]["name"] == VALIDATION_SA and doc.get("automountServiceAccountToken") is not False:
            problems.append(f"{ident(doc)}: validation pods need no API token "
                            "(automountServiceAccountToken: false)")
    for doc in docs:
        if doc["kind"] == "Secret":
            problems.append(f"{ident(doc)}: no Secrets in the manifests")
        if doc["kind"] not in CLUSTER_SCOPED and doc["metadata"].get("namespace") != NAMESPACE:
            problems.append(f"{ident(doc)}: namespaced object outside {NAMESPACE}")
        if doc["kind"] in CLUSTER_SCOPED and "namespace" in doc["metadata"]:
            problems.append(f"{ident(doc)}: cluster-scoped object with a namespace")
    return problems


# ------------------------------------------------------------------------------------- the tests
def test_kustomization_lists_exactly_the_manifests():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    files = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files
    assert len(kustomization["resources"]) == len(set(kustomization["resources"]))


def test_the_expected_objects_exist(manifests):
    names = sorted((d["kind"], d["metadata"]["name"]) for d in manifests)
    assert names == sorted([
        ("Namespace", NAMESPACE),
        ("ServiceAccount", AIRFLOW_SA), ("ServiceAccount", VALIDATION_SA),
        ("ClusterRole", "cluster-doctor-discovery"), ("ClusterRoleBinding", "cluster-doctor-discovery"),
        ("Role", "cluster-doctor-airflow"), ("RoleBinding", "cluster-doctor-airflow"),
        ("PriorityClass", "cluster-doctor-preemptible"),
        ("PersistentVolumeClaim", "cluster-doctor-results"),
    ])


@pytest.mark.parametrize("doc", load_manifests(), ids=ident)
def test_manifest_validates_against_the_kubernetes_schema(doc):
    assert kubernetes_validate.validate(strip(doc), K8S_VERSION, strict=True) == K8S_VERSION


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["rules"][0].update(verb=["get"]), "Additional properties"),    # typo'd key, strict mode
    (lambda d: d["rules"][0].update(verbs="get"), "is not of type"),            # a string, not a list
    (lambda d: d["rules"][0].pop("verbs"), "'verbs' is a required property"),   # a required field
], ids=["unknown-key", "string-not-list", "required-field-missing"])
def test_schema_validation_rejects_a_broken_role(manifests, mutate, message):
    role = copy.deepcopy(strip(by_kind(manifests, "Role")[0]))
    mutate(role)
    with pytest.raises(kubernetes_validate.ValidationError) as info:
        kubernetes_validate.validate(role, K8S_VERSION, strict=True)
    assert message in str(info.value.message) or message in str(info.value)


def test_rbac_is_least_privilege(manifests):
    assert rbac_violations(manifests) == []


def _role(docs):
    return by_kind(docs, "Role")[0]


def _cluster_role(docs):
    return by_kind(docs, "ClusterRole")[0]


MUTATIONS = {
    "wildcard verb in the Role": lambda d: _role(d)["rules"][0]["verbs"].append("*"),
    "wildcard resource in the Role": lambda d: _role(d)["rules"][0].update(resources=["*"]),
    "wildcard apiGroup": lambda d: _role(d)["rules"][1].update(apiGroups=["*"]),
    "secrets in the Role": lambda d: _role(d)["rules"].append(
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
    "pods/exec in the Role": lambda d: _role(d)["rules"].append(
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}),
    "update on configmaps": lambda d: _role(d)["rules"][3]["verbs"].append("update"),
    "a needed verb dropped": lambda d: _role(d)["rules"][0]["verbs"].remove("delete"),
    "write verb cluster-wide": lambda d: _cluster_role(d)["rules"][0]["verbs"].append("delete"),
    "configmaps cluster-wide": lambda d: _cluster_role(d)["rules"][0]["resources"].append("configmaps"),
    "secrets cluster-wide": lambda d: _cluster_role(d)["rules"].append(
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}),
    "apps group cluster-wide": lambda d: _cluster_role(d)["rules"].append(
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}),
    "escalate verb": lambda d: _cluster_role(d)["rules"][0]["verbs"].append("escalate"),
    "binding to cluster-admin": lambda d: by_kind(d, "ClusterRoleBinding")[0]["roleRef"].update(
        name="cluster-admin"),
    "RoleBinding to a ClusterRole": lambda d: by_kind(d, "RoleBinding")[0]["roleRef"].update(
        kind="ClusterRole", name="cluster-doctor-discovery"),
    "every authenticated user bound": lambda d: by_kind(d, "RoleBinding")[0]["subjects"].append(
        {"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}),
    "validation pods bound": lambda d: by_kind(d, "ClusterRoleBinding")[0]["subjects"].append(
        {"kind": "ServiceAccount", "name": VALIDATION_SA, "namespace": NAMESPACE}),
    "validation pods get a token": lambda d: [sa for sa in by_kind(d, "ServiceAccount")
                                              if sa["metadata"]["name"] == VALIDATION_SA][0].pop(
        "automountServiceAccountToken"),
    "Role in another namespace": lambda d: _role(d)["metadata"].update(namespace="kube-system"),
    "a Secret object": lambda d: d.append({"__file__": "x.yaml", "kind": "Secret", "apiVersion": "v1",
                                           "metadata": {"name": "x", "namespace": NAMESPACE}}),
    "aggregated ClusterRole": lambda d: _cluster_role(d).update(aggregationRule={"clusterRoleSelectors": []}),
    "storageclasses listed": lambda d: _cluster_role(d)["rules"][1]["verbs"].append("list"),
    "storageclasses in the core group": lambda d: _cluster_role(d)["rules"][1].update(apiGroups=[""]),
    "events watched cluster-wide": lambda d: _cluster_role(d)["rules"][2]["verbs"].append("watch"),
    "events written cluster-wide": lambda d: _cluster_role(d)["rules"][2]["verbs"].append("create"),
    "every claim of the namespace": lambda d: _role(d)["rules"][4].pop("resourceNames"),
    "claims created": lambda d: _role(d)["rules"][4]["verbs"].append("create"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_the_rbac_checker_catches(manifests, name):
    docs = copy.deepcopy(manifests)
    MUTATIONS[name](docs)
    assert rbac_violations(docs), f"the checker missed: {name}"


def test_validation_priority_class_never_preempts_and_loses_to_everything(manifests):
    (pc,) = by_kind(manifests, "PriorityClass")
    assert pc["value"] < 0, "below the default priority 0 of pods without a class"
    assert pc["value"] <= -10, "at or below the cluster-autoscaler's expendable cutoff"
    assert pc["preemptionPolicy"] == "Never"
    assert pc["globalDefault"] is False


def test_example_pvc_is_read_write_many_with_the_storage_class_left_to_the_user(manifests):
    (pvc,) = by_kind(manifests, "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "storageClassName" not in pvc["spec"], "the user picks an RWX class"
    assert "# storageClassName:" in (K8S / "pvc.yaml").read_text(), "with a commented hint where it goes"


def test_names_match_the_cluster_doctor_defaults(manifests):
    """The manifests create what the DAG looks for when no setting overrides it."""
    defaults = Settings()
    (ns,) = by_kind(manifests, "Namespace")
    assert ns["metadata"]["name"] == defaults.namespace
    assert by_kind(manifests, "PersistentVolumeClaim")[0]["metadata"]["name"] == defaults.pvc
    assert by_kind(manifests, "PriorityClass")[0]["metadata"]["name"] == defaults.priority_class


def test_kustomize_builds_the_same_objects(manifests):
    kubectl = find_kubectl()
    result = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in built) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in manifests)
    for doc in built:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# ------------------------------------------------------------------ opt-in quarantine permission
QUARANTINE = K8S / "quarantine"


def quarantine_docs() -> list[dict]:
    return [d for d in yaml.safe_load_all((QUARANTINE / "quarantine-rbac.yaml").read_text()) if d]


def quarantine_violations(docs: list[dict]) -> list[str]:
    """The quarantine role may only patch nodes, bound only to the Airflow ServiceAccount."""
    problems = []
    for doc in docs:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] == "ClusterRole":
            if doc.get("aggregationRule"):
                problems.append(f"{name}: aggregated")
            if doc["rules"] != [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]:
                problems.append(f"{name}: must grant exactly patch on nodes, grants {doc['rules']}")
        elif doc["kind"] == "ClusterRoleBinding":
            if doc["roleRef"] != {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "cluster-doctor-quarantine"}:
                problems.append(f"{name}: binds {doc['roleRef']}")
            if doc["subjects"] != [{"kind": "ServiceAccount", "name": AIRFLOW_SA, "namespace": NAMESPACE}]:
                problems.append(f"{name}: subjects {doc['subjects']}")
        else:
            problems.append(f"{name}: unexpected object in the quarantine RBAC")
    return problems


def test_quarantine_role_is_opt_in_and_only_patches_nodes():
    docs = quarantine_docs()
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("ClusterRole", "cluster-doctor-quarantine"), ("ClusterRoleBinding", "cluster-doctor-quarantine")]
    assert quarantine_violations(docs) == []
    for doc in docs:
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION
    assert yaml.safe_load((QUARANTINE / "kustomization.yaml").read_text())["resources"] == ["quarantine-rbac.yaml"]
    # not in the default set: applying include/k8s never grants it
    assert "quarantine" not in str(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])


@pytest.mark.parametrize("mutate", [
    lambda d: d[0]["rules"][0]["verbs"].append("update"),
    lambda d: d[0]["rules"][0]["verbs"].append("delete"),
    lambda d: d[0]["rules"][0]["resources"].append("pods"),
    lambda d: d[0]["rules"][0]["resources"].append("nodes/status"),
    lambda d: d[1]["subjects"].append({"kind": "ServiceAccount", "name": VALIDATION_SA, "namespace": NAMESPACE}),
    lambda d: d[1]["roleRef"].update(name="cluster-admin"),
], ids=["update", "delete", "pods", "nodes-status", "validation-pods-bound", "cluster-admin"])
def test_the_quarantine_checker_catches(mutate):
    docs = quarantine_docs()
    mutate(docs)
    assert quarantine_violations(docs)


def test_quarantine_kustomization_builds(tmp_path):
    kubectl = find_kubectl()
    out = subprocess.run([kubectl, "kustomize", str(QUARANTINE)], capture_output=True, text=True, check=True)
    built = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted(d["metadata"]["name"] for d in built) == ["cluster-doctor-quarantine"] * 2


# ------------------------------------------------------------------ opt-in reservation and gate permissions
@pytest.mark.parametrize("overlay", ["reservation", "acceptance"])
def test_reservation_and_acceptance_roles_are_opt_in_and_only_patch_nodes(overlay):
    """Exactly the node patch the reservation's and the acceptance gate's taints
    need, bound to the Airflow side only, each in its own overlay."""
    folder, name = K8S / overlay, f"cluster-doctor-{overlay}"
    docs = [d for d in yaml.safe_load_all((folder / f"{overlay}-rbac.yaml").read_text()) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [("ClusterRole", name), ("ClusterRoleBinding", name)]
    role, binding = sorted(docs, key=lambda d: d["kind"])
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    assert not role.get("aggregationRule")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AIRFLOW_SA, "namespace": NAMESPACE}]
    for doc in docs:
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION
    assert overlay not in str(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    out = subprocess.run([find_kubectl(), "kustomize", str(folder)], capture_output=True, text=True, check=True)
    assert sorted(d["metadata"]["name"] for d in yaml.safe_load_all(out.stdout) if d) == [name] * 2
