"""The suite code in the cluster: an immutable ConfigMap named after its content hash, shipped once
per run and mounted by every validation pod; old versions pruned."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import pathlib
from collections.abc import Mapping
from typing import Any

from cluster_doctor_suites.version import HASHED_SUFFIXES, digest
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


def ship(core_v1: Any, settings: Settings) -> Shipped:
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
    """The flat set of files that make up the suite code (the ConfigMap's data), by name."""
    files = {}
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        if path.is_file() and path.name.endswith(SHIPPED_SUFFIXES):
            files[path.name] = path.read_bytes()
    if not files:
        raise FileNotFoundError(f"no suite code found in {directory}")
    size = sum(len(k) + len(v) for k, v in files.items())
    if size > CONFIGMAP_LIMIT:
        raise ValueError(f"suite code in {directory} is {size} bytes, over the ConfigMap limit of 1 MiB")
    return files


def content_hash(directory: pathlib.Path) -> str:
    """suite_version: the suites' own algorithm (cluster_doctor_suites.version) over what ships."""
    return digest(shipped_files(directory).items())


def configmap_name(settings: Settings, version: str) -> str:
    return f"{settings.suites_configmap_prefix}-{version.split(':', 1)[-1]}"


def ensure_configmap(core_v1: Any, namespace: str, name: str, files: Mapping[str, bytes], version: str) -> bool:
    """Create the ConfigMap unless it exists; True when created."""
    body = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "cluster-doctor", "app.kubernetes.io/component": "suites"},
                     "annotations": {"cluster-doctor.io/suite-version": version}},
        "immutable": True,
        "data": {k: v.decode("utf-8") for k, v in files.items()},
    }
    try:
        core_v1.create_namespaced_config_map(namespace, body)
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise
    log.info("suite code %s shipped as ConfigMap %s/%s (%d files)", version, namespace, name, len(files))
    return True


def prune_configmaps(core_v1: Any, namespace: str, *, keep: str, versions: int = KEEP_SUITE_VERSIONS) -> list[str]:
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
