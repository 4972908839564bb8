"""The suite code in the cluster: an immutable ConfigMap named after its content hash, shipped once
per run and mounted by every validation pod; old versions pruned.

ConfigMap keys are flat (``[-._a-zA-Z0-9]+``) while the suites package has subfolders: each file's
path relative to the package is its name here (and in the suite_version hash), its key the path with
"/" spelled "__" (``checkers/xid.py`` -> ``checkers__xid.py``); the pod's volume ``items`` map each
key back to its path (kube/podspec.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import pathlib
import re
from collections.abc import Mapping

from cluster_doctor.kube.api import CoreV1
from cluster_doctor_suites.version import HASHED_SUFFIXES, digest, package_files
from kubernetes.client.exceptions import ApiException

from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.suites import DEFAULT_SUITES_DIR

log = logging.getLogger(__name__)

SHIPPED_SUFFIXES = HASHED_SUFFIXES  # what ships is what the suite_version covers
CONFIGMAP_LIMIT = 1_000_000  # bytes; Kubernetes refuses ConfigMaps over 1 MiB
KEEP_SUITE_VERSIONS = 3


@dataclasses.dataclass(frozen=True)
class Shipped:
    configmap: str
    version: str
    files: tuple[str, ...]


def ship(core_v1: CoreV1, settings: Settings) -> Shipped:
    """Make sure this code's ConfigMap exists (created once, never changed), prune old ones."""
    directory = suites_dir(settings)
    files = shipped_files(directory)
    version = digest(files.items())
    name = configmap_name(settings, version)
    ensure_configmap(core_v1, settings.namespace, name, files, version)
    prune_configmaps(core_v1, settings.namespace, keep=name)
    return Shipped(configmap=name, version=version, files=tuple(sorted(files)))


def suites_dir(settings: Settings) -> pathlib.Path:
    return pathlib.Path(settings.suites_dir) if settings.suites_dir else DEFAULT_SUITES_DIR


def shipped_files(directory: pathlib.Path) -> dict[str, bytes]:
    """The files that make up the suite code, by path relative to the package ("checkers/xid.py"):
    the suites' own walk (cluster_doctor_suites.version.package_files), so both sides hash the same set."""
    files = package_files(directory)
    if not files:
        raise FileNotFoundError(f"no suite code found in {directory}")
    keys = [configmap_key(name) for name in files]
    if len(set(keys)) != len(keys):
        raise ValueError(f"suite files in {directory} collide as ConfigMap keys: {sorted(keys)}")
    size = sum(len(k) + len(v) for k, v in zip(keys, files.values()))
    if size > CONFIGMAP_LIMIT:
        raise ValueError(f"suite code in {directory} is {size} bytes, over the ConfigMap limit of 1 MiB")
    return files


_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def configmap_key(relative_path: str) -> str:
    """The ConfigMap key of a file of the package: its relative path with "/" spelled "__"."""
    key = relative_path.replace("/", "__")
    if not _KEY.fullmatch(key):
        raise ValueError(f"suite file {relative_path!r} cannot be a ConfigMap key ({key!r})")
    return key


def content_hash(directory: pathlib.Path) -> str:
    """suite_version: the suites' own algorithm (cluster_doctor_suites.version) over what ships."""
    return digest(shipped_files(directory).items())


def configmap_name(settings: Settings, version: str) -> str:
    return f"{settings.suites_configmap_prefix}-{version.split(':', 1)[-1]}"


def ensure_configmap(core_v1: CoreV1, namespace: str, name: str, files: Mapping[str, bytes], version: str) -> bool:
    """Create the ConfigMap unless it exists; True when created."""
    body = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "cluster-doctor", "app.kubernetes.io/component": "suites"},
                     "annotations": {"cluster-doctor.io/suite-version": version}},
        "immutable": True,
        "data": {configmap_key(k): v.decode("utf-8") for k, v in files.items()},
    }
    try:
        core_v1.create_namespaced_config_map(namespace, body)
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise
    log.info("suite code %s shipped as ConfigMap %s/%s (%d files)", version, namespace, name, len(files))
    return True


def prune_configmaps(core_v1: CoreV1, namespace: str, *, keep: str, versions: int = KEEP_SUITE_VERSIONS) -> list[str]:
    """Delete old suite ConfigMaps, keeping the current one and the newest few (a pod of an earlier run
    may still be starting with its version)."""
    listed = core_v1.list_namespaced_config_map(
        namespace, label_selector="app.kubernetes.io/name=cluster-doctor,app.kubernetes.io/component=suites")
    items = sorted(listed.items, key=lambda cm: cm.metadata.creation_timestamp or dt.datetime.min.replace(tzinfo=dt.UTC),
                   reverse=True)
    kept = {keep} | {cm.metadata.name for cm in items[:versions]}
    deleted = []
    for cm in items:
        if cm.metadata.name in kept:
            continue
        try:
            core_v1.delete_namespaced_config_map(cm.metadata.name, namespace)
            deleted.append(cm.metadata.name)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("could not delete old suite ConfigMap %s: %s", cm.metadata.name, exc.reason)
    if deleted:
        log.info("removed %d old suite ConfigMap(s): %s", len(deleted), ", ".join(deleted))
    return deleted
