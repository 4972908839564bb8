"""The Airflow plugin of Cluster Doctor: the fleet health page in the Airflow UI.

Registered through the ``airflow.plugins`` entry point of the installed distribution, so an image
that runs ``pip install cluster-doctor`` needs no plugins-folder copy.

- ``fastapi_apps``: the page, the node history and ``/metrics``, served by the api-server under
  ``/cluster-doctor`` and authenticated with the UI's own login (see ``cluster_doctor.web.app``).
- ``external_views``: a "Fleet" entry in the navigation bar that shows the page in the UI at
  ``/plugin/fleet-health`` (the bar's buttons cut a longer label: "Fleet health" read "Fleet he…"), and a
  "Report" entry, the daily report live (``/plugin/daily-report``).
- ``listeners``: each continuous_validation run's note says what it did or why it planned nothing
  (``cluster_doctor.airflow.listener``).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from cluster_doctor.airflow import runtime, storage
from cluster_doctor.airflow.listener import RunNotes
from cluster_doctor.web import app as webapp
from cluster_doctor.web import daily_page


def _connector(settings):
    """The provider's PostgresHook for the connection the settings name (``validation_db``)."""
    return runtime.hook_connector(settings.validation_db_conn_id)


# What the navigation bar shows: its buttons are an icon's width, so a label of more than about six
# characters is cut with an ellipsis. The page's own title says "Fleet health".
NAV_LABEL = "Fleet"
REPORT_LABEL = "Report"  # the daily report ("Daily report" would be cut too)


class ClusterDoctorPlugin(AirflowPlugin):
    name = "cluster_doctor"
    fastapi_apps = [
        {"app": webapp.create_app(connector_provider=_connector, settings_provider=runtime.load_settings,
                                  spool_provider=lambda settings: storage.spool(settings).status()),
         "url_prefix": webapp.MOUNT_PREFIX, "name": "Cluster Doctor fleet health"},
    ]
    listeners = [RunNotes()]
    external_views = [
        {
            "name": NAV_LABEL,
            # relative (no leading slash): the UI resolves it against its <base href>, so a
            # deployment under [api] base_url=/airflow/ still reaches /airflow/cluster-doctor/
            "href": webapp.MOUNT_PREFIX.lstrip("/") + "/",
            "destination": "nav",  # no category: a top-level entry of the navigation bar
            # top level by name: the UI folds two or more plugin entries into a "Plugins" menu otherwise
            "nav_top_level": True,
            "url_route": webapp.URL_ROUTE,
        },
        {
            "name": REPORT_LABEL,  # today's or yesterday's, live from the results DB (web.daily_page)
            "href": webapp.MOUNT_PREFIX.lstrip("/") + "/reports/daily",
            "destination": "nav",
            "nav_top_level": True,
            "url_route": daily_page.URL_ROUTE,
        },
    ]
