"""Plugins-folder entry of Cluster Doctor, for deployments that mount plugins/ instead of installing it.

Airflow loads plugins from both the plugins folder and the ``airflow.plugins`` entry points, and
reports a second plugin of the same name as an import error. So this file defines the plugin only
when the installed distribution does not already register it through its entry point.

Airflow's plugin manager imports every ``*.py`` under ``plugins/`` that ``plugins/.airflowignore``
does not exclude; the ``cluster_doctor`` package itself is excluded there (it is a library imported
by name, not a set of plugin files), so this module is the only plugin file.
"""

from __future__ import annotations

from importlib.metadata import entry_points

ENTRY_POINT = "cluster_doctor.airflow.plugin:ClusterDoctorPlugin"

if not any(ep.value == ENTRY_POINT for ep in entry_points(group="airflow.plugins")):
    from cluster_doctor.airflow.plugin import ClusterDoctorPlugin  # noqa: F401  (found by the plugin manager)
