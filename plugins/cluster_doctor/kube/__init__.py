"""Everything that calls the Kubernetes API: discovery of free GPU nodes, the validation pod spec,
the suite-code ConfigMap, volume checks, orphaned pods, node quarantine.

May import: ``cluster_doctor.domain``, ``cluster_doctor.store`` (to record what it finds), the
kubernetes client. Never Airflow: the API client comes in as an argument.
"""
