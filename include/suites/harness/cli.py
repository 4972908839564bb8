"""The common command line of every suite; each option reads an environment variable by default, so
a pod spec, a Slurm script and a shell all configure the suites the same way."""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from .files import DEFAULT_TERMINATION_LOG

# The shared log layout of seed 000: the PVC in validation pods (the orchestrator also sets
# CLUSTER_DOCTOR_OUTPUT_DIR), or a shared mount on Slurm nodes. Elsewhere — a laptop, a bare node
# without it — a directory the user can write, never a root-owned path.
SHARED_OUTPUT_DIR = "/data/continuous_validation"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package directory


def default_output_dir() -> str:
    if os.path.isdir(SHARED_OUTPUT_DIR) and os.access(SHARED_OUTPUT_DIR, os.W_OK | os.X_OK):
        return SHARED_OUTPUT_DIR
    return os.path.join(os.path.expanduser("~"), "cluster-doctor-results")


def _env(name: str, default: Any = None) -> Any:
    v = os.environ.get(name)
    return v if v not in (None, "") else default


def _expect(text: str) -> dict[str, int]:
    from ..baselines import parse_expect  # baselines imports the harness: resolve at call time

    try:
        return parse_expect(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse API
        raise _ArgError(message)


def make_parser(suite: str, description: str) -> argparse.ArgumentParser:
    # Long: one add_argument per common option, flat.
    p = _Parser(
        prog=f"python -m cluster_doctor_suites.{suite}",
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("common options (environment variables in brackets)")
    g.add_argument(
        "--node",
        default=_env("NODE_NAME", _env("SLURMD_NODENAME", socket.gethostname())),
        help="node name used in paths and results [NODE_NAME, SLURMD_NODENAME, else hostname]",
    )
    g.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=_env("CLUSTER_DOCTOR_DEVICE", "cuda"),
        help="cuda on GPU nodes; cpu is the explicit CPU mode for tests and laptops [CLUSTER_DOCTOR_DEVICE]",
    )
    g.add_argument(
        "--output-dir",
        default=_env("CLUSTER_DOCTOR_OUTPUT_DIR") or default_output_dir(),
        help=f"base directory of results and logs [CLUSTER_DOCTOR_OUTPUT_DIR; default {SHARED_OUTPUT_DIR} "
        "when it exists and is writable, else ~/cluster-doctor-results]",
    )
    g.add_argument(
        "--termination-log",
        default=_env("CLUSTER_DOCTOR_TERMINATION_LOG", DEFAULT_TERMINATION_LOG),
        help="where the < 4 KiB summary goes; '' disables; the default is only written when "
        "it exists (inside a Kubernetes container) [CLUSTER_DOCTOR_TERMINATION_LOG]",
    )
    g.add_argument(
        "--baselines",
        default=_env("CLUSTER_DOCTOR_BASELINES", os.path.join(HERE, "baselines.yaml")),
        help="baseline file [CLUSTER_DOCTOR_BASELINES]",
    )
    # string defaults go through type=, so a bad environment value becomes an "invalid arguments" error
    g.add_argument(
        "--expected-gpus",
        type=int,
        default=_env("CLUSTER_DOCTOR_EXPECTED_GPUS"),
        help="GPUs the node must show; under Kubernetes the GPUs the pod was given (the node's allocatable "
        "count), judged against --node-gpus when that is set [CLUSTER_DOCTOR_EXPECTED_GPUS]",
    )
    g.add_argument(
        "--node-gpus",
        type=int,
        default=_env("CLUSTER_DOCTOR_NODE_GPUS"),
        help="GPUs the node has: its nvidia.com/gpu capacity or GPU Feature Discovery's nvidia.com/gpu.count "
        "label (set by the orchestrator; does not drop when a GPU is marked unhealthy); raises the GPU count's "
        "bar above the SKU's, never lowers it (--expect gpus=N does) [CLUSTER_DOCTOR_NODE_GPUS]",
    )
    g.add_argument(
        "--expect",
        type=_expect,
        default=_env("CLUSTER_DOCTOR_EXPECT", ""),
        metavar="KEY=N[,KEY=N]",
        help="what this node pool's nodes must show, overriding baselines.yaml: gpus, hcas, "
        "nvlinks_per_gpu, pcie_gen, pcie_width, ib_rate_gbps, ib_width, e.g. 'hcas=4,nvlinks_per_gpu=12' "
        "[CLUSTER_DOCTOR_EXPECT]",
    )
    g.add_argument(
        "--gpu-model",
        default=_env("CLUSTER_DOCTOR_GPU_MODEL"),
        help="GPU model, e.g. the nvidia.com/gpu.product label; else detected [CLUSTER_DOCTOR_GPU_MODEL]",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=_env("CLUSTER_DOCTOR_TIMEOUT"),
        help="seconds before the suite gives up with an error result (watchdog) [CLUSTER_DOCTOR_TIMEOUT]",
    )
    return p


def _fallback_args(suite: str) -> argparse.Namespace:
    """Arguments good enough to report an error when the command line itself is invalid."""
    return argparse.Namespace(
        node=_env("NODE_NAME", _env("SLURMD_NODENAME", socket.gethostname())),
        device=_env("CLUSTER_DOCTOR_DEVICE", "cuda"),
        output_dir=_env("CLUSTER_DOCTOR_OUTPUT_DIR") or default_output_dir(),
        termination_log=_env("CLUSTER_DOCTOR_TERMINATION_LOG", DEFAULT_TERMINATION_LOG),
        baselines=None,
        expected_gpus=None,
        node_gpus=None,
        expect={},
        gpu_model=_env("CLUSTER_DOCTOR_GPU_MODEL"),
        timeout=None,
    )

