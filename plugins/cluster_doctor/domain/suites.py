"""The suite catalog the DAG reads: what each validation suite is, how it runs, what it costs.

The suite code itself lives in ``include/suites/`` (no Airflow there; it runs in the validation
image, on bare metal or under Slurm). It reaches the pods as an immutable ConfigMap named after its
content hash, which is also the ``suite_version`` recorded with every result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
from importlib import resources

from cluster_doctor.domain.config import Settings

# Both are package data of the installed distribution. setuptools installs packages as plain
# directories (editable or not), so the resources are real paths the ConfigMap builder can list.
DEFAULT_SUITES_DIR = pathlib.Path(str(resources.files("cluster_doctor_suites")))
DEFAULT_POD_TEMPLATE = pathlib.Path(str(resources.files("cluster_doctor.pod_templates") / "validation-pod.yaml"))
SHIPPED_SUFFIXES = (".py", ".yaml", ".yml", ".json")
CONFIGMAP_LIMIT = 1_000_000  # bytes; Kubernetes refuses ConfigMaps over 1 MiB


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str
    title: str
    description: str
    module: str
    cpu: str
    memory: str
    key_metrics: tuple[str, ...]
    extra_args: tuple[str, ...] = ()

    def command(self, settings: Settings) -> list[str]:
        return ["python", "-m", self.module, "--device", settings.suite_device, *self.extra_args]

    def image(self, settings: Settings) -> str:
        return settings.suite_images.get(self.name, settings.image)


CATALOG: dict[str, Suite] = {s.name: s for s in (
    Suite(
        name="gpu_health",
        title="GPU health",
        description="Seconds, no load: GPU count vs expected, XID events, uncorrected ECC, retired/remapped "
                    "rows, throttle reasons, PCIe link and NVLink state, DCGM diag level 1 when present.",
        module="cluster_doctor_suites.gpu_health", cpu="1", memory="2Gi",
        key_metrics=("gpus_visible", "xid_events"),
    ),
    Suite(
        name="dl_unit",
        title="DL numerical unit test",
        description="Per GPU: DL layers (matmul fp32/tf32/bf16/fp16, conv, norms, attention, losses, backward) "
                    "against a float64 reference, bit-for-bit agreement across GPUs, GEMM TFLOPS and memory "
                    "bandwidth vs the model baseline and the node's best GPU, a training smoke test, a memory "
                    "pattern test.",
        module="cluster_doctor_suites.dl_unit", cpu="8", memory="64Gi",
        key_metrics=("gemm_bf16_tflops_min", "mem_bw_gbps_min"),
    ),
    Suite(
        name="nccl_loopback",
        title="NCCL loop-back all-reduce",
        description="All GPUs of the node in one all-reduce with P2P and SHM disabled, so traffic leaves "
                    "through the node's HCAs; bus bandwidth vs baseline, transport proven IB from NCCL's log, "
                    "reduced values verified.",
        module="cluster_doctor_suites.nccl_loopback", cpu="8", memory="64Gi",
        key_metrics=("nccl_busbw_gbps",),
    ),
    Suite(
        name="storage_fio",
        title="Storage I/O (fio)",
        description="fio sequential and random read/write on the shared volume in a per-node scratch "
                    "directory; bandwidth, IOPS and p99 latency vs floors.",
        module="cluster_doctor_suites.storage_fio", cpu="4", memory="8Gi",
        key_metrics=("fio_seq_read_mibps", "fio_seq_write_mibps", "fio_rand_read_iops", "fio_rand_write_iops"),
    ),
)}


def get(name: str) -> Suite:
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(f"unknown suite {name!r} (known: {', '.join(CATALOG)})") from None


def suites_dir(settings: Settings) -> pathlib.Path:
    return pathlib.Path(settings.suites_dir) if settings.suites_dir else DEFAULT_SUITES_DIR


def pod_template_file(settings: Settings) -> pathlib.Path:
    return pathlib.Path(settings.pod_template_file) if settings.pod_template_file else DEFAULT_POD_TEMPLATE


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
    """suite_version: the same algorithm as include/suites/version.py (a test keeps them equal)."""
    digest = hashlib.sha256()
    for name, content in shipped_files(directory).items():
        digest.update(name.encode() + b"\0" + content + b"\0")
    return "sha256:" + digest.hexdigest()[:16]


def configmap_name(settings: Settings, version: str) -> str:
    return f"{settings.suites_configmap_prefix}-{version.split(':', 1)[-1]}"
