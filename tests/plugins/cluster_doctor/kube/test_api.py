"""cluster_doctor.kube.api.CoreV1, the type of the Kubernetes client our code is handed, against what
is true: every method it lists is kubernetes' CoreV1Api's, with the same positional parameters; every
call the product makes on a ``core_v1`` is one it lists; every permission its methods need is granted
by the RBAC manifests in include/k8s. Each checker is also shown to find what it looks for."""

from __future__ import annotations

import ast
import inspect
import pathlib
import textwrap
from typing import Any, Protocol

import pytest
import yaml
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube.api import CoreV1
from kubernetes import client

from tests.conftest import REPO

PACKAGE = REPO / "plugins" / "cluster_doctor"
K8S = REPO / "include" / "k8s"
NAMESPACE = "cluster-doctor"
# Retrying's own property, read by retry.sibling only once it knows the client is a Retrying
NOT_THE_API = {"retry_policy"}


def members(protocol: type) -> tuple[dict[str, Any], set[str]]:
    """A Protocol's methods (name -> function) and its data attributes."""
    methods = {name: value for name, value in vars(protocol).items()
               if inspect.isfunction(value) and not name.startswith("_")}
    return methods, set(getattr(protocol, "__annotations__", {}))


def positional(function: Any) -> tuple[list[str], bool]:
    """The parameters after self that a call may pass by position, and whether it takes **kwargs."""
    params = list(inspect.signature(function).parameters.values())[1:]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def mismatches(protocol: type, api: type, instance: Any) -> list[str]:
    """How ``protocol`` differs from ``api``: a method it lacks, other positional parameters, no
    **kwargs where the protocol passes them on, a data attribute the instance does not have."""
    problems = []
    methods, attributes = members(protocol)
    for name, declared in sorted(methods.items()):
        real = getattr(api, name, None)
        if not callable(real):
            problems.append(f"{name}: not a method of {api.__name__}")
            continue
        (want, want_kwargs), (have, have_kwargs) = positional(declared), positional(real)
        if want != have:
            problems.append(f"{name}: positional parameters {want}, {api.__name__}'s are {have}")
        if want_kwargs and not have_kwargs:
            problems.append(f"{name}: {api.__name__}'s takes no **kwargs")
    for name in sorted(attributes):
        if not hasattr(instance, name):
            problems.append(f"{name}: not an attribute of a {api.__name__}")
    return problems


@pytest.fixture(scope="module")
def core_v1_api():
    api_client = client.ApiClient(client.Configuration())  # no request is made
    yield client.CoreV1Api(api_client)
    api_client.close()


def test_every_method_of_the_protocol_is_core_v1_apis_with_its_parameters(core_v1_api):
    assert mismatches(CoreV1, client.CoreV1Api, core_v1_api) == []


def test_the_signature_check_finds_a_method_that_does_not_exist_or_takes_other_parameters(core_v1_api):
    class Wrong(Protocol):
        api_client: Any
        pool_size: int

        def read_node(self, node: str, **kwargs: Any) -> Any: ...

        def list_nodes(self, **kwargs: Any) -> Any: ...

        def patch_node(self, name: str, **kwargs: Any) -> Any: ...

    assert mismatches(Wrong, client.CoreV1Api, core_v1_api) == [
        "list_nodes: not a method of CoreV1Api",
        "patch_node: positional parameters ['name'], CoreV1Api's are ['name', 'body']",
        "read_node: positional parameters ['node'], CoreV1Api's are ['name']",
        "pool_size: not an attribute of a CoreV1Api"]


# ------------------------------------------------------------------------------ the product's calls
def _core_v1_api_methods() -> set[str]:
    return {name for name in dir(client.CoreV1Api) if not name.startswith("_")}


def _receiver_is_the_client(node: ast.expr) -> bool:
    """``core_v1``, or ``retry.with_policy(core_v1, ...)`` (the same client under another bound)."""
    if isinstance(node, ast.Name):
        return node.id == "core_v1"
    if isinstance(node, ast.Call) and node.args:
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        return name == "with_policy" and _receiver_is_the_client(node.args[0])
    return False


def uses_of_the_client(package: pathlib.Path) -> dict[str, list[str]]:
    """Every name the code reads on the client (``core_v1.list_node(``, a method passed on as
    ``core_v1.list_node``), and every CoreV1Api method it names in a string (retry's per-method
    policies, a getattr): name -> where."""
    api_methods = _core_v1_api_methods()
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and _receiver_is_the_client(node.value):
                found.setdefault(node.attr, []).append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in api_methods:
                found.setdefault(node.value, []).append(f"{rel}:{node.lineno}")
    return found


def unlisted(uses: dict[str, list[str]], protocol: type = CoreV1) -> list[str]:
    methods, attributes = members(protocol)
    return [f"{name} ({', '.join(where)})" for name, where in sorted(uses.items())
            if name not in methods and name not in attributes and name not in NOT_THE_API]


def test_every_call_on_the_client_names_a_method_of_the_protocol():
    uses = uses_of_the_client(PACKAGE)
    assert unlisted(uses) == [], "add the method to cluster_doctor.kube.api.CoreV1 (and its permission)"
    # the scan sees the calls (not an empty tree): one of each kind the code makes
    assert {"list_node", "patch_node_status", "read_namespaced_pod_log", "api_client"} <= set(uses)


def test_the_protocol_lists_nothing_the_product_does_not_call():
    methods, _ = members(CoreV1)
    called = set(uses_of_the_client(PACKAGE))
    # a create that is retried may be read back (retry.Retrying._read_back): its read is used too
    read_back = {"read_" + name.removeprefix("create_") for name in called if name.startswith("create_")}
    assert sorted(set(methods) - called - read_back) == []
    assert read_back <= set(methods)


def test_the_call_scan_finds_a_method_the_protocol_does_not_list(tmp_path):
    (tmp_path / "kube").mkdir()
    (tmp_path / "kube" / "x.py").write_text(textwrap.dedent("""\
        from cluster_doctor.kube import retry

        def f(core_v1, other):
            core_v1.list_node(label_selector="a")
            core_v1.list_namespaced_secret("ns")
            retry.with_policy(core_v1, retry.BEST_EFFORT_POLICY).read_namespaced_service("s", "ns")
            other.list_namespaced_endpoints("ns")  # not the client
            pages = core_v1.list_persistent_volume
            POLICIES = {"connect_get_namespaced_pod_exec": None}
        """))
    assert unlisted(uses_of_the_client(tmp_path)) == [
        "connect_get_namespaced_pod_exec (kube/x.py:9)",
        "list_namespaced_secret (kube/x.py:5)",
        "list_persistent_volume (kube/x.py:8)",
        "read_namespaced_service (kube/x.py:6)"]


# ------------------------------------------------------------------------------ the RBAC it needs
VERBS = {"list": "list", "read": "get", "create": "create", "patch": "patch", "delete": "delete"}
SUBRESOURCES = ("log", "status")


def permission(method: str) -> tuple[str, str, bool]:
    """(verb, resource, cluster-wide) a CoreV1Api method needs: ``read_namespaced_pod_log`` -> get
    pods/log in a namespace, ``list_pod_for_all_namespaces`` -> list pods cluster-wide, ``patch_node_status``
    -> patch nodes/status (nodes are cluster-scoped)."""
    action, _, rest = method.partition("_")
    namespaced = rest.startswith("namespaced_")
    rest = rest.removeprefix("namespaced_")
    all_namespaces = rest.endswith("_for_all_namespaces")
    rest = rest.removesuffix("_for_all_namespaces")
    subresource = next((s for s in SUBRESOURCES if rest.endswith("_" + s)), None)
    if subresource:
        rest = rest.removesuffix("_" + subresource)
    resource = rest.replace("_", "") + "s"
    return VERBS[action], resource + (f"/{subresource}" if subresource else ""), not namespaced or all_namespaces


def grants(docs: list[dict]) -> set[tuple[str, str, bool]]:
    """(verb, core-group resource, cluster-wide) every Role (in the validation namespace) and ClusterRole grants."""
    granted = set()
    for doc in docs:
        if doc.get("kind") == "ClusterRole":
            cluster_wide = True
        elif doc.get("kind") == "Role" and doc["metadata"].get("namespace") == NAMESPACE:
            cluster_wide = False
        else:
            continue
        for rule in doc.get("rules") or []:
            if "" not in rule.get("apiGroups", []):
                continue
            names = rule.get("resourceNames")
            if names is not None and names != [Settings().pvc]:  # the only object read by name: the results claim
                continue
            granted |= {(v, r, cluster_wide) for v in rule.get("verbs", []) for r in rule.get("resources", [])}
    return granted


def missing_permissions(protocol: type, docs: list[dict]) -> list[str]:
    granted = grants(docs)
    problems = []
    for method in sorted(members(protocol)[0]):
        verb, resource, cluster_wide = permission(method)
        # a namespaced call is allowed by the namespace's Role or by a ClusterRole
        if (verb, resource, True) not in granted and (cluster_wide or (verb, resource, False) not in granted):
            problems.append(f"{method}: {verb} {resource}" + (" cluster-wide" if cluster_wide else f" in {NAMESPACE}"))
    return problems


def manifests() -> list[dict]:
    """Every document of include/k8s, the opt-in folders (conditions, quarantine, ...) included."""
    docs = []
    for path in sorted(K8S.rglob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return docs


@pytest.mark.parametrize("method, needs", [
    ("list_node", ("list", "nodes", True)),
    ("patch_node_status", ("patch", "nodes/status", True)),
    ("list_pod_for_all_namespaces", ("list", "pods", True)),
    ("read_namespaced_pod_log", ("get", "pods/log", False)),
    ("create_namespaced_config_map", ("create", "configmaps", False)),
    ("read_namespaced_persistent_volume_claim", ("get", "persistentvolumeclaims", False)),
])
def test_a_method_needs_its_verb_on_its_resource(method, needs):
    assert permission(method) == needs


def test_every_permission_the_protocol_implies_is_granted():
    docs = manifests()
    assert {d["kind"] for d in docs} >= {"Role", "ClusterRole"}
    assert missing_permissions(CoreV1, docs) == []


def test_the_permission_check_finds_a_verb_not_granted_and_a_grant_in_the_wrong_scope():
    docs = manifests()
    for doc in docs:
        if doc["kind"] == "Role":
            for rule in doc["rules"]:
                if "configmaps" in rule["resources"]:
                    rule["verbs"].remove("delete")
        if doc["kind"] == "ClusterRole":  # the namespace's Role still lists events: not every namespace's
            doc["rules"] = [r for r in doc["rules"] if "events" not in r["resources"]]
    assert missing_permissions(CoreV1, docs) == [
        "delete_namespaced_config_map: delete configmaps in cluster-doctor",
        "list_event_for_all_namespaces: list events cluster-wide"]
