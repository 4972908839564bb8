"""The results database (Postgres): connections, migrations, the attempt history and its latest
view, run claims, the attempt spool, fleet read queries, the daily report's reads, the coverage trend
and stored verdicts.

The one layer with SQL and the database driver: the others ask it by named functions and use the driver's
types and errors through ``store.database`` (``Connection``, ``Error``, ...).

May import: ``cluster_doctor.domain``, psycopg and the standard library. Never Kubernetes, never
Airflow (the Airflow connection is resolved in ``cluster_doctor.airflow`` and handed in as a
``Connector``).
"""
