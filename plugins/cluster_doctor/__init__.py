"""Cluster Doctor: continuous validation of GPU cluster nodes, orchestrated by Apache Airflow.

A folder per layer; dependencies point down only (checked by import-linter in ``make test``)::

    cli       the cluster-doctor command                         (outermost)
    airflow   plugin, operator, task bodies: the Airflow glue    (imports Airflow)
    web       the fleet health page (FastAPI)                    (imports Airflow's auth manager)
    reports   run summary, CTRF, daily report, metrics, charts
    kube      the Kubernetes API: discovery, pod spec, guards, orphans, quarantine
    store     the Postgres results database
    domain    pure: statuses, records, settings, priority, planning, coverage, policies

The suites that run inside validation pods are a separate package, ``cluster_doctor_suites``
(include/suites), which imports nothing from here and no Airflow.
"""

__version__ = "0.3.0"
