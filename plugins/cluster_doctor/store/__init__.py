"""The results database (Postgres): connections, migrations, the attempt history and its latest
view, run claims, the attempt spool, fleet read queries and stored verdicts.

May import: ``cluster_doctor.domain``, psycopg and the standard library. Never Kubernetes, never
Airflow (the Airflow connection is resolved in ``cluster_doctor.airflow`` and handed in as a
``Connector``).
"""
