"""What people read: the run summary, the CTRF report, the daily report, Prometheus metrics,
text tables and SVG charts, and the one Jinja2 environment.

May import: ``cluster_doctor.domain``, ``cluster_doctor.store``, ``cluster_doctor.kube``. Never Airflow,
never the database driver: the store's named functions read what a report shows (no SQL here).
"""
