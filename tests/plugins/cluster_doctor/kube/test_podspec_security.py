"""Every suite's rendered validation pod: Kubernetes schema (kubernetes-validate), securityContext, the
Pod Security level it meets, and the results volume narrowed to the pod's own directory.

``pss_violations`` implements the Pod Security Standards checks that can apply to these pods
(kubernetes.io/docs/concepts/security/pod-security-standards/, baseline and restricted); it is tested
on mutated pods below, so a regression in it cannot pass silently.
"""

from __future__ import annotations

import copy
import pathlib

import kubernetes_validate
import pytest
import yaml
from cluster_doctor.domain import suites
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import podspec

REPO = pathlib.Path(__file__).resolve().parents[4]
K8S_VERSION = "1.31"
BASE = dict(gpu_count=8, gpu_model="NVIDIA-H100-80GB-HBM3", run_id="scheduled__2026-11-22T10:00:00+00:00",
            configmap="cluster-doctor-suites-0123456789abcdef", suite_version="sha256:0123456789abcdef",
            suite_files=["__init__.py", "common.py"])

# ------------------------------------------------------------------ Pod Security Standards
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                 "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}


def _containers(spec):
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or [])]


def pss_violations(pod: dict, level: str) -> list[str]:
    """What keeps ``pod`` from the Pod Security Standards ``level`` (baseline or restricted)."""
    spec, out = pod["spec"], []
    psc = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"{key}")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out.append(f"hostPath volume {v['name']}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            out.append(f"sysctl {sysctl['name']}")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("hostProcess")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    for c in _containers(spec):
        sc, name = c.get("securityContext") or {}, c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{name}: hostProcess")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{name}: hostPort")
        caps = sc.get("capabilities") or {}
        for cap in caps.get("add") or []:
            if cap not in BASELINE_CAPS:
                out.append(f"{name}: capability {cap} beyond baseline")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"{name}: procMount")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp == "Unconfined":
            out.append(f"{name}: seccomp Unconfined")
        selinux = sc.get("seLinuxOptions") or psc.get("seLinuxOptions") or {}
        if selinux.get("type") not in (None, "", "container_t", "container_init_t", "container_kvm_t") \
                or selinux.get("user") or selinux.get("role"):
            out.append(f"{name}: seLinuxOptions")
        if level == "restricted":
            if sc.get("allowPrivilegeEscalation") is not False:
                out.append(f"{name}: allowPrivilegeEscalation not false")
            non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
            if non_root is not True:
                out.append(f"{name}: runAsNonRoot not true")
            if sc.get("runAsUser", psc.get("runAsUser")) == 0:
                out.append(f"{name}: runAsUser 0")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                out.append(f"{name}: seccomp not RuntimeDefault/Localhost")
            if "ALL" not in (caps.get("drop") or []):
                out.append(f"{name}: capabilities not drop ALL")
            if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
                out.append(f"{name}: adds capabilities {caps['add']}")
    if level == "restricted":
        for v in spec.get("volumes") or []:
            kinds = set(v) - {"name"}
            if not kinds <= RESTRICTED_VOLUMES:
                out.append(f"volume {v['name']} of type {sorted(kinds)}")
    return out


def pss_level(pod: dict) -> str:
    if not pss_violations(pod, "restricted"):
        return "restricted"
    return "baseline" if not pss_violations(pod, "baseline") else "privileged"


LEVELS = ["restricted", "baseline", "privileged"]


def render(test_name, settings=None, node="gpu-017"):
    return podspec.build_pod(settings or Settings(), node_name=node, test_name=test_name, **BASE)


def base(pod):
    return next(c for c in pod["spec"]["containers"] if c["name"] == "base")


def namespace_labels():
    doc = yaml.safe_load((REPO / "include" / "k8s" / "namespace.yaml").read_text())
    return doc["metadata"]["labels"]


# ------------------------------------------------------------------ every suite's pod
@pytest.mark.parametrize("test_name", list(suites.CATALOG))
def test_every_suites_pod_validates_against_the_kubernetes_schema(test_name):
    for settings in (Settings(), Settings(pod_capabilities=[])):
        assert kubernetes_validate.validate(render(test_name, settings), K8S_VERSION, strict=True) == K8S_VERSION


def test_the_schema_check_catches_a_broken_security_context():
    pod = render("dl_unit")
    base(pod)["securityContext"]["capabilities"]["drop"] = "ALL"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


@pytest.mark.parametrize("test_name", list(suites.CATALOG))
def test_every_suites_pod_is_hardened(test_name):
    pod = render(test_name)
    psc, sc = pod["spec"]["securityContext"], base(pod)["securityContext"]
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["capabilities"].get("add", []) == list(podspec.SUITE_CAPABILITIES[test_name])
    if podspec.SUITE_CAPABILITIES[test_name]:
        assert psc["runAsUser"] == 0 and psc["runAsNonRoot"] is False  # capabilities reach UID 0 only
    else:
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] == psc["runAsGroup"] == podspec.NONROOT_ID
    assert pod["spec"]["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m for m in base(pod)["volumeMounts"]}
    assert "/tmp" in mounts, "a writable /tmp on the read-only root filesystem"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]


def test_which_suite_needs_which_capability():
    assert podspec.SUITE_CAPABILITIES == {"gpu_health": ("SYSLOG",), "nccl_loopback": ("IPC_LOCK",),
                                          "dl_unit": (), "storage_fio": (), "nvbandwidth": (), "ib_health": (),
                                          "fabric_peer": ("IPC_LOCK",)}
    assert set(podspec.SUITE_CAPABILITIES) == set(suites.CATALOG)


def test_capabilities_the_deployment_does_not_allow_are_never_added():
    settings = Settings(pod_capabilities=["SYSLOG"])
    assert base(render("nccl_loopback", settings))["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert render("nccl_loopback", settings)["spec"]["securityContext"]["runAsNonRoot"] is True
    assert base(render("gpu_health", settings))["securityContext"]["capabilities"]["add"] == ["SYSLOG"]


def test_a_template_cannot_weaken_the_hardening(tmp_path):
    template = yaml.safe_load(podspec.DEFAULT_POD_TEMPLATE.read_text())
    base(template)["securityContext"] = {"allowPrivilegeEscalation": True, "runAsUser": 0,
                                         "capabilities": {"add": ["SYS_ADMIN"]}, "procMount": "Unmasked"}
    template["spec"]["securityContext"] = {"seccompProfile": {"type": "Unconfined"}, "runAsUser": 0,
                                           "sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
    pod = podspec.build_pod(Settings(), node_name="gpu-017", test_name="dl_unit", template=template, **BASE)
    assert pss_level(pod) == "restricted"


def with_extra_containers(template):
    """A site's template: an init container, a native sidecar (init with restartPolicy Always), a log
    shipper beside the suite and an ephemeral debug container, each asking for more than it should."""
    loose = {"runAsUser": 0, "allowPrivilegeEscalation": True, "capabilities": {"add": ["NET_ADMIN", "SYS_PTRACE"]},
             "seccompProfile": {"type": "Unconfined"}, "readOnlyRootFilesystem": False}
    spec = template["spec"]
    spec["initContainers"] = [{"name": "fetch", "image": "busybox", "securityContext": dict(loose)},
                              {"name": "proxy", "image": "envoy", "restartPolicy": "Always",
                               "securityContext": dict(loose)}]
    spec["containers"].append({"name": "shipper", "image": "fluent-bit"})
    spec["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "securityContext": dict(loose)}]
    return template


@pytest.mark.parametrize("test_name", sorted(suites.CATALOG))
def test_every_container_of_the_pod_is_hardened_not_only_the_suites(test_name):
    template = with_extra_containers(yaml.safe_load(podspec.DEFAULT_POD_TEMPLATE.read_text()))
    pod = podspec.build_pod(Settings(), node_name="gpu-017", test_name=test_name, template=template, **BASE)
    spec = pod["spec"]
    others = [c for c in _containers(spec) if c["name"] != "base"]
    assert sorted(c["name"] for c in others) == ["debug", "fetch", "proxy", "shipper"]
    for c in others:
        sc = c["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]  # never the suite's capabilities
        assert (sc["privileged"], sc["allowPrivilegeEscalation"], sc["readOnlyRootFilesystem"]) == (False, False, True)
        assert (sc["runAsNonRoot"], sc["runAsUser"], sc["runAsGroup"]) == (True, podspec.NONROOT_ID, podspec.NONROOT_ID)
        assert "seccompProfile" not in sc and spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # the extra containers never lower the pod's level: restricted without capabilities, as before
    no_caps = podspec.build_pod(Settings(pod_capabilities=[]), node_name="gpu-017", test_name=test_name,
                                template=with_extra_containers(yaml.safe_load(podspec.DEFAULT_POD_TEMPLATE.read_text())),
                                **BASE)
    assert pss_level(no_caps) == "restricted", pss_violations(no_caps, "restricted")


HOST_ACCESS = {
    "hostPID": (lambda t: t["spec"].update(hostPID=True), "spec.hostPID"),
    "hostNetwork": (lambda t: t["spec"].update(hostNetwork=True), "spec.hostNetwork"),
    "hostIPC": (lambda t: t["spec"].update(hostIPC=True), "spec.hostIPC"),
    "hostPath": (lambda t: t["spec"]["volumes"].append({"name": "dev", "hostPath": {"path": "/dev"}}),
                 "spec.volumes[4].hostPath (dev)"),
    "privileged": (lambda t: t["spec"].setdefault("initContainers", []).append(
        {"name": "tuner", "image": "busybox", "securityContext": {"privileged": True}}),
        "spec.initContainers[0].securityContext.privileged (tuner)"),
}


@pytest.mark.parametrize("field", sorted(HOST_ACCESS))
def test_a_template_asking_for_host_access_is_refused_naming_the_field_unless_allowed(field, tmp_path):
    add, where = HOST_ACCESS[field]
    template = yaml.safe_load(podspec.DEFAULT_POD_TEMPLATE.read_text())
    add(template)
    path = tmp_path / "site-pod.yaml"
    path.write_text(yaml.safe_dump(template))
    with pytest.raises(podspec.PodTemplateRefused) as exc:
        render("gpu_health", Settings(pod_template_file=str(path)))
    message = str(exc.value)
    assert "\n" not in message and where in message and str(path) in message
    assert f"CLUSTER_DOCTOR_POD_ALLOWED_HOST_FIELDS={field}" in message
    # another field allowed is not this one
    other = next(f for f in HOST_ACCESS if f != field)
    with pytest.raises(podspec.PodTemplateRefused):
        render("gpu_health", Settings(pod_template_file=str(path), pod_allowed_host_fields=[other]))
    # allowed on purpose: kept as the template says, everything else still hardened
    pod = render("gpu_health", Settings(pod_template_file=str(path), pod_allowed_host_fields=[field]))
    assert field in " ".join(pss_violations(pod, "baseline"))
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert base(pod)["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}


def test_the_discover_task_refuses_a_host_access_template_before_any_pod(tmp_path):
    from cluster_doctor.kube import volumes

    template = yaml.safe_load(podspec.DEFAULT_POD_TEMPLATE.read_text())
    template["spec"]["hostPID"] = True
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(template))
    with pytest.raises(podspec.PodTemplateRefused, match="spec.hostPID"):
        volumes.claims_by_test(Settings(pod_template_file=str(path)), ["dl_unit"])  # discover's once-per-run check


# ------------------------------------------------------------------ Pod Security level of the namespace
def test_the_namespace_admits_every_pod_at_its_documented_level():
    labels = namespace_labels()
    enforce = labels["pod-security.kubernetes.io/enforce"]
    pods = [render(t) for t in suites.CATALOG]
    assert max(LEVELS.index(pss_level(p)) for p in pods) <= LEVELS.index(enforce)
    # and no looser than needed: the default capabilities (IPC_LOCK, SYSLOG) are beyond baseline
    assert enforce == LEVELS[max(LEVELS.index(pss_level(p)) for p in pods)]


def test_without_extra_capabilities_every_pod_meets_baseline_and_most_restricted():
    settings = Settings(pod_capabilities=[])
    assert {t: pss_level(render(t, settings)) for t in suites.CATALOG} == {t: "restricted" for t in suites.CATALOG}
    defaults = {t: pss_level(render(t)) for t in suites.CATALOG}
    assert defaults == {"dl_unit": "restricted", "storage_fio": "restricted", "gpu_health": "privileged",
                        "nccl_loopback": "privileged", "nvbandwidth": "restricted", "ib_health": "restricted",
                        "fabric_peer": "privileged"}


def test_the_namespace_audits_against_the_strictest_level():
    labels = namespace_labels()
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"


PSS_MUTATIONS = {
    "privileged": (lambda p: base(p)["securityContext"].update(privileged=True), "baseline"),
    "hostNetwork": (lambda p: p["spec"].update(hostNetwork=True), "baseline"),
    "hostPID": (lambda p: p["spec"].update(hostPID=True), "baseline"),
    "hostPath": (lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "baseline"),
    "SYS_ADMIN": (lambda p: base(p)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "baseline"),
    "hostPort": (lambda p: base(p).update(ports=[{"containerPort": 80, "hostPort": 80}]), "baseline"),
    "unconfined seccomp": (lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
                           "baseline"),
    "unsafe sysctl": (lambda p: p["spec"]["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
                      "baseline"),
    "root user": (lambda p: p["spec"]["securityContext"].update(runAsUser=0), "restricted"),
    "escalation": (lambda p: base(p)["securityContext"].update(allowPrivilegeEscalation=True), "restricted"),
    "CHOWN": (lambda p: base(p)["securityContext"]["capabilities"].update(add=["CHOWN"]), "restricted"),
    "no drop ALL": (lambda p: base(p)["securityContext"]["capabilities"].update(drop=[]), "restricted"),
    "nfs volume": (lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
                   "restricted"),
}


@pytest.mark.parametrize("name", list(PSS_MUTATIONS))
def test_the_pod_security_checker_catches(name):
    pod = copy.deepcopy(render("dl_unit", Settings(pod_capabilities=[])))
    assert pss_violations(pod, "restricted") == []
    mutate, broken_level = PSS_MUTATIONS[name]
    mutate(pod)
    assert pss_violations(pod, broken_level), f"the checker missed: {name}"


# ------------------------------------------------------------------ the shared results volume
@pytest.mark.parametrize("test_name", list(suites.CATALOG))
def test_each_pod_sees_only_its_own_directory_of_the_shared_volume(test_name):
    pods = {node: render(test_name, node=node) for node in ("gpu-001", "gpu-002")}
    seen = set()
    for node, pod in pods.items():
        results = [m for m in base(pod)["volumeMounts"] if m["name"] == "results"]
        assert len(results) == 1
        assert results[0]["subPath"] == f"{test_name}/{node}"
        assert results[0]["mountPath"] == f"/data/continuous_validation/{test_name}/{node}"
        seen.add(results[0]["subPath"])
        for c in _containers(pod["spec"]):  # no other container mounts the whole volume
            for m in c.get("volumeMounts") or []:
                if m["name"] == "results":
                    assert m.get("subPath") == f"{test_name}/{node}"
    assert len(seen) == 2


def test_fio_scratch_stays_in_the_pods_own_directory():
    env = {e["name"]: e.get("value") for e in base(render("storage_fio"))["env"]}
    assert env["CLUSTER_DOCTOR_FIO_DIR"] == "/data/continuous_validation/storage_fio/gpu-017"
    assert env["CLUSTER_DOCTOR_OUTPUT_DIR"] == "/data/continuous_validation"


# ------------------------------------------------------------------ resources (issue: CPU never applied)
@pytest.mark.parametrize("test_name", list(suites.CATALOG))
def test_the_suites_own_cpu_and_memory_requests_are_applied(test_name):
    suite = suites.get(test_name)
    resources = base(render(test_name))["resources"]
    assert resources["requests"]["cpu"] == suite.cpu, "the template's generic cpu must not win"
    assert resources["requests"]["memory"] == suite.memory
    limit, request = podspec._quantity(resources["limits"]["memory"]), podspec._quantity(suite.memory)
    assert limit >= request


def test_a_memory_limit_below_the_suites_request_is_raised(tmp_path):
    template = yaml.safe_load(podspec.DEFAULT_POD_TEMPLATE.read_text())
    base(template)["resources"]["limits"]["memory"] = "4Gi"
    pod = podspec.build_pod(Settings(), node_name="gpu-017", test_name="dl_unit", template=template, **BASE)
    assert base(pod)["resources"]["limits"]["memory"] == suites.get("dl_unit").memory


def test_the_deployment_guide_states_what_the_code_does():
    from cluster_doctor.domain.config import DEPLOYMENT_ONLY

    doc = (REPO / "docs" / "deployment.md").read_text()
    section = doc[doc.index("## 6. Hardening"):doc.index("## 7. Troubleshooting")]
    for suite, caps in podspec.SUITE_CAPABILITIES.items():
        for cap in caps:
            assert f"| `{suite}` | `{cap}` |" in section
    assert "`dl_unit`, `storage_fio` | none" in section
    for name in DEPLOYMENT_ONLY:
        assert f"`{name}`" in section, name
    assert f"UID/GID {podspec.NONROOT_ID}" in section
    assert "enforce: privileged" in section and namespace_labels()["pod-security.kubernetes.io/enforce"] == "privileged"
