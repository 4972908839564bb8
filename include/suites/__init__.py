"""Cluster Doctor validation suites: the code that runs inside the validation pods (or under Slurm).

A harness (harness/), one checker per GPU health concern (checkers/), dl_unit's test groups (dl/) and one
module per suite; shipped as a Kubernetes ConfigMap (a subfolder's '/' spelled '__' in its keys); no
Airflow, nothing of cluster_doctor.
Each suite is a module run as `python -m cluster_doctor_suites.<name>`: dl_unit, nccl_loopback, storage_fio, gpu_health,
nvbandwidth, ib_health, and the peer test fabric_peer (two pods on two nodes).
See README.md in this folder for the checks, the result contract and the exit codes.
"""

SUITES = ("dl_unit", "nccl_loopback", "storage_fio", "gpu_health", "nvbandwidth", "ib_health", "fabric_peer")
SCHEMA_VERSION = "1"
