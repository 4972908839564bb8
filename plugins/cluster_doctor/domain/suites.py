"""The suite catalog the DAG reads: what each validation suite is, how it runs, what it costs.

The suite code itself lives in ``include/suites/`` (package ``cluster_doctor_suites``; no Airflow there:
it runs in the validation image, on bare metal or under Slurm). ``cluster_doctor.kube.suite_code``
ships it to the pods as an immutable ConfigMap named after its content hash, which is also the
``suite_version`` recorded with every result.
"""

from __future__ import annotations

import dataclasses
from importlib import resources

from cluster_doctor.domain import fail_slow
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.peers import PEER_SUITE

# Package data of the installed distribution (its result schema, codes and baselines are read from
# here too). setuptools installs packages as plain directories (editable or not), so this is a real
# pathlib.Path the ConfigMap builder (cluster_doctor.kube.suite_code) can list; resolving it reads
# nothing.
DEFAULT_SUITES_DIR = resources.files("cluster_doctor_suites")


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
        description="Seconds, no load: GPU count, PCIe generation/width and NVLinks per GPU vs what the node's "
                    "model should have; Xids judged by NVIDIA's catalog and every other driver error in the "
                    "kernel log (fail-closed); uncorrected ECC, row remapping / retired pages, the driver's "
                    "recovery action, throttle reasons and thermal throttling under load since the previous run "
                    "(NVML's violation counter), NVSwitch fabric; DCGM diag level 1 (not run: said so); on the sweeps that probe the node, "
                    "a few seconds of GEMM and HBM copy per GPU, judged against the model's floor and the fleet.",
        # 4Gi: the speed probe's torch and its 8192x8192 GEMM inputs, made on the host (about 1.5 GiB)
        module="cluster_doctor_suites.gpu_health", cpu="1", memory="4Gi",
        key_metrics=("gpus_visible", "xid_events", *fail_slow.PROBE_METRICS),
    ),
    Suite(
        name="dl_unit",
        title="DL numerical unit test",
        description="Per GPU: DL layers (matmul fp32/tf32/bf16/fp16, conv, norms, attention, losses, backward) "
                    "against a float64 reference, bit-for-bit agreement across GPUs and between runs, GEMM "
                    "TFLOPS and memory bandwidth vs the model baseline and the node's best GPU with every GEMM "
                    "result compared bit for bit under load, a training smoke test, a memory pattern test.",
        module="cluster_doctor_suites.dl_unit", cpu="8", memory="64Gi",
        key_metrics=("gemm_bf16_tflops_min", "mem_bw_gbps_min"),
    ),
    Suite(
        name="nccl_loopback",
        title="NCCL loop-back all-reduce",
        description="All GPUs of the node in one all-reduce with P2P and SHM disabled, so traffic leaves "
                    "through the node's HCAs; HCAs NCCL found vs the node's expected count, bus bandwidth vs a "
                    "floor from that count, transport proven IB from NCCL's log, reduced values verified.",
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
    Suite(
        name="nvbandwidth",
        title="GPU link bandwidth (nvbandwidth)",
        description="NVIDIA's nvbandwidth on all GPUs: copy bandwidth of every GPU pair (copy engine and SM; "
                    "NVLink or PCIe) and each GPU's host link vs the model's floors (published link rates and "
                    "public measurements) and the node's own median; a slow pair named by its two GPUs; every "
                    "copy verified by the tool.",
        module="cluster_doctor_suites.nvbandwidth", cpu="4", memory="16Gi",
        key_metrics=("nvbw_d2d_read_ce_min_gbps", "nvbw_h2d_ce_min_gbps"),
    ),
    Suite(
        name="ib_health",
        title="InfiniBand / RoCE ports",
        description="Seconds, no load: every HCA port the model should have present, Active/LinkUp at the "
                    "expected rate and width (sysfs); link-downed, symbol and other error counters judged by "
                    "their growth since the previous run; RoCE ports through the mlx5 ethtool statistics.",
        module="cluster_doctor_suites.ib_health", cpu="1", memory="1Gi",
        key_metrics=("ib_ports_active", "ib_counter_growth"),
    ),
    # Not one of a node's suites (never in `tests`): two nodes run it together, planned by peer cadence
    # (cluster_doctor.domain.peers, settings peer_*); each side's row names the other in `peer`.
    Suite(
        name=PEER_SUITE,
        title="Fabric between two nodes (peer test)",
        description="Two free nodes of one GPU model: a two-node NCCL all-reduce forced onto the network "
                    "(P2P, SHM and NVLS off) and an ib_write_bw per rail between them, against floors from the "
                    "HCA rate; a failure is blamed on a node only once a third node was tried with each side "
                    "(until then both are suspect).",
        module="cluster_doctor_suites.fabric_peer", cpu="8", memory="64Gi",
        key_metrics=("allreduce_busbw_gbps", "ib_write_bw_gbps_min"),  # what include/suites/fabric_peer.py reports
    ),
)}
PEER_SUITES = (PEER_SUITE,)


def get(name: str) -> Suite:
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(f"unknown suite {name!r} (known: {', '.join(CATALOG)})") from None
