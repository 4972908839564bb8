"""k8s_emulator: a small Kubernetes API emulator (nodes, pods, events, configmaps, priority classes) with a
simulated scheduler and kubelet, served over HTTP for the real kubernetes client and KubernetesPodOperator.
See README.md next to this file."""

from .process import EmulatorError, EmulatorProcess, default_executables

__all__ = ["EmulatorError", "EmulatorProcess", "default_executables"]
