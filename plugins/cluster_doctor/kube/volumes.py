"""Can the validation pods mount their PersistentVolumeClaims? Checked once per run, before any pod.

Every validation pod mounts the shared results claim (setting ``pvc``). A claim that is missing, Lost,
being deleted, or Pending with Immediate binding keeps every pod Pending ("pod has unbound immediate
PersistentVolumeClaims") until its pending timeout: every pair, every hour, with no diagnosis. So
discover reads each claim the planned pods would mount, once, and the pairs that need a broken one
are not planned; the run fails with one line saying why.

What counts as broken follows the PV controller (``IsDelayBindingMode``): a Pending claim of a
StorageClass with ``volumeBindingMode: WaitForFirstConsumer`` is waiting for its first pod, which is
normal; a Pending claim with no class, or whose class does not exist, or whose class binds
Immediately, is not going to bind for our pods. The StorageClass is read only to tell those apart;
when it cannot be read (RBAC), a Pending claim is "cannot tell" and the pods run.

Talks to the Kubernetes API through the client it is given; no Airflow imports.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import podspec
from cluster_doctor.kube.api import CoreV1

log = logging.getLogger(__name__)

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
# the PV controller still honours the pre-1.6 annotation over spec.storageClassName
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
_PROBE = "claim-probe"
# Stable codes of an unusable claim, in the run summary and the CTRF report (run level: a deployment
# problem, not a node's, so not in the suites' per-check catalog codes.yaml).
MISSING, NOT_BOUND, LOST, TERMINATING, UNREADABLE = (
    "PVC_MISSING", "PVC_NOT_BOUND", "PVC_LOST", "PVC_TERMINATING", "PVC_UNREADABLE")


@dataclasses.dataclass(frozen=True)
class ClaimState:
    namespace: str
    name: str
    usable: bool  # False: pods that mount it would stay Pending; do not create them
    detail: str  # one line, e.g. "is Bound to pv-1" or "is not bound (phase Pending, ...)"
    certain: bool = True  # False: usable only because we cannot tell (its StorageClass is unreadable)
    code: str | None = None  # why it is unusable (MISSING, NOT_BOUND, ...); None when usable

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        return f"PVC {self.ref} {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class VolumeCheck:
    claims: list[ClaimState]
    blocked_tests: list[str]  # tests whose pods mount an unusable claim: none of their pods is created

    @property
    def problem(self) -> str | None:
        """The one-line reason, or None when every claim is usable."""
        bad = [c.describe() for c in self.claims if not c.usable]
        return "; ".join(bad) or None

    def to_dict(self) -> dict[str, Any]:
        return {"claims": [c.to_dict() for c in self.claims], "blocked_tests": list(self.blocked_tests),
                "problem": self.problem, "codes": sorted({c.code for c in self.claims if c.code})}


# ---------------------------------------------------------------------------- which claims
def claims_by_test(settings: Settings, tests: Iterable[str]) -> dict[str, list[str]]:
    """The claims the pods of each test mount, as the operator will build them (the same podspec)."""
    out = {}
    for test in tests:
        pod = podspec.build_pod(settings, node_name=_PROBE, test_name=test, gpu_count=0, gpu_model=None,
                                run_id=_PROBE, configmap=_PROBE, suite_version=_PROBE)
        out[test] = sorted({v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes") or []
                            if v.get("persistentVolumeClaim")})
    return out


# ---------------------------------------------------------------------------- judging one claim (pure)
def storage_class_name(claim: Mapping[str, Any]) -> str:
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    if BETA_CLASS_ANNOTATION in annotations:
        return annotations[BETA_CLASS_ANNOTATION] or ""
    return (claim.get("spec") or {}).get("storageClassName") or ""


class Unreadable:
    """A StorageClass that exists or not, we cannot tell (e.g. 403): a Pending claim may be fine."""

    def __init__(self, why: str):
        self.why = why


def judge(namespace: str, name: str, claim: Mapping[str, Any] | None,
          storage_class: Mapping[str, Any] | Unreadable | None = None) -> ClaimState:
    """The state of a claim (None: it does not exist) given its StorageClass (None: none or not found)."""
    if claim is None:
        return ClaimState(namespace, name, False, "does not exist (create it: include/k8s/pvc.yaml, or set pvc)",
                          code=MISSING)
    meta, status = claim.get("metadata") or {}, claim.get("status") or {}
    phase = status.get("phase") or "Pending"
    volume = (claim.get("spec") or {}).get("volumeName")
    if meta.get("deletionTimestamp"):
        return ClaimState(namespace, name, False, "is being deleted (pods cannot use a terminating claim)",
                          code=TERMINATING)
    if phase == "Bound":
        return ClaimState(namespace, name, True, f"is Bound to {volume or 'a volume'}")
    if phase == "Lost":
        return ClaimState(namespace, name, False,
                          f"is Lost (its PersistentVolume {volume or '?'} is gone): recreate the claim", code=LOST)
    if phase != "Pending":
        return ClaimState(namespace, name, False, f"is not bound (phase {phase})", code=NOT_BOUND)
    class_name = storage_class_name(claim)
    if not class_name:
        return ClaimState(namespace, name, False, "is not bound (phase Pending, no StorageClass: only a "
                                                  "pre-created PersistentVolume can bind it, and none matches)",
                          code=NOT_BOUND)
    if isinstance(storage_class, Unreadable):
        return ClaimState(namespace, name, True, f"is Pending; StorageClass {class_name} could not be read "
                                                 f"({storage_class.why}): cannot tell if it waits for its first "
                                                 "pod, validation pods will run", certain=False)
    if storage_class is None:
        return ClaimState(namespace, name, False,
                          f"is not bound (phase Pending, StorageClass {class_name} does not exist)", code=NOT_BOUND)
    if storage_class.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER:
        return ClaimState(namespace, name, True, f"is Pending until its first pod (StorageClass {class_name} "
                                                 f"is {WAIT_FOR_FIRST_CONSUMER})")
    provisioner = storage_class.get("provisioner") or ""
    hint = "has no provisioner and no matching PersistentVolume" if provisioner in ("", NO_PROVISIONER) else \
        f"binds immediately: provisioner {provisioner} has not provisioned a volume"
    return ClaimState(namespace, name, False, f"is not bound (phase Pending, StorageClass {class_name} {hint})",
                      code=NOT_BOUND)


# ---------------------------------------------------------------------------- reading the cluster
def _api_error(exc: Any) -> str:
    return f"Kubernetes API {exc.status} {exc.reason}"


def read_claim(core_v1: CoreV1, storage_v1: Any, namespace: str, name: str) -> ClaimState:
    """GET the claim (and, for a Pending one with a class, its StorageClass); never raises on API errors:
    a claim that cannot be read is not usable, with the reason."""
    from kubernetes.client.exceptions import ApiException

    try:
        response = core_v1.read_namespaced_persistent_volume_claim(name, namespace, _preload_content=False)
        claim = json.loads(response.data)
    except ApiException as exc:
        if exc.status == 404:
            return judge(namespace, name, None)
        hint = (f": grant get on persistentvolumeclaims in namespace {namespace} "
                "(include/k8s/rbac-namespace.yaml)") if exc.status in (401, 403) else ""
        return ClaimState(namespace, name, False, f"could not be read ({_api_error(exc)}){hint}", code=UNREADABLE)
    storage_class: Mapping[str, Any] | Unreadable | None = None
    class_name = storage_class_name(claim)
    if ((claim.get("status") or {}).get("phase") or "Pending") == "Pending" and class_name:
        try:
            storage_class = json.loads(storage_v1.read_storage_class(class_name, _preload_content=False).data)
        except ApiException as exc:
            storage_class = None if exc.status == 404 else Unreadable(_api_error(exc))
    return judge(namespace, name, claim, storage_class)


def check(core_v1: CoreV1, settings: Settings, tests: Sequence[str], storage_v1: Any = None) -> VolumeCheck:
    """Read every claim the pods of ``tests`` would mount, once each; which tests must not run."""
    if storage_v1 is None:
        from kubernetes import client

        from cluster_doctor.kube import retry

        storage_v1 = retry.sibling(core_v1, client.StorageV1Api)
    by_test = claims_by_test(settings, tests)
    states = {name: read_claim(core_v1, storage_v1, settings.namespace, name)
              for name in sorted({c for names in by_test.values() for c in names})}
    for state in states.values():
        if state.usable:  # an unusable one is the caller's single error line, with what it stops
            log.log(logging.INFO if state.certain else logging.WARNING, "%s", state.describe())
    blocked = [t for t in tests if any(not states[c].usable for c in by_test[t])]
    return VolumeCheck(list(states.values()), blocked)
