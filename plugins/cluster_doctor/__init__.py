"""Cluster Doctor: continuous validation of GPU cluster nodes, orchestrated by Apache Airflow.

The package is importable by Airflow from ``plugins/``. Its scheduling core (``nodes``, ``priority``,
``attempts``, ``config``) is pure Python; Airflow-facing code lives in ``operator``, ``tasks`` and
``plugin`` and is imported only by the DAG files and the Airflow plugin manager.
"""

__version__ = "0.1.0"
