-- The Cluster Doctor results database, next to the Airflow metadata database on the same server,
-- owned by a role that can do nothing else.
--
-- docker-compose: postgres:16 runs this once, when it initialises an empty data volume
-- (/docker-entrypoint-initdb.d, psql as the superuser, connected to $POSTGRES_DB). It does NOT run
-- against an existing volume; see docs/deployment.md, "Troubleshooting".
-- Any other PostgreSQL >= 15 (an existing server, the Helm deployment): run it as a superuser,
--   CLUSTER_DOCTOR_DB_PASSWORD=... CLUSTER_DOCTOR_APP_DB_PASSWORD=... POSTGRES_DB=airflow \
--     psql -v ON_ERROR_STOP=1 "postgresql://postgres@db.example:5432/postgres" -f 10-results-db.sql
--
-- The passwords come from the environment, never from this file. Role and database names are the
-- fixed contract used by docker-compose.yaml's connection (change both together).

\set ON_ERROR_STOP on
\getenv results_password CLUSTER_DOCTOR_DB_PASSWORD
\getenv app_password CLUSTER_DOCTOR_APP_DB_PASSWORD
\getenv metadata_db POSTGRES_DB

\if :{?results_password}
\else
  \echo 'CLUSTER_DOCTOR_DB_PASSWORD is not set: refusing to create a role without a password'
  SELECT 1 / 0 AS cluster_doctor_db_password_missing;
\endif
\if :{?app_password}
\else
  \echo 'CLUSTER_DOCTOR_APP_DB_PASSWORD is not set: refusing to create a role without a password'
  SELECT 1 / 0 AS cluster_doctor_app_db_password_missing;
\endif

-- Least privilege: log in, own one database, nothing else (no superuser, no new databases or roles,
-- no replication, no RLS bypass). The connection limit keeps it from exhausting the server's
-- max_connections, which the Airflow metadata database shares.
CREATE ROLE cluster_doctor LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT 40 PASSWORD :'results_password';

-- The run-time role: what Airflow's connection validation_db logs in as. It gets its rights from the
-- owner after the migrations (`python -m cluster_doctor db grant-runtime cluster_doctor_app`, run by
-- airflow-init): SELECT, INSERT, UPDATE, DELETE on the rows and the sequences, nothing else.
CREATE ROLE cluster_doctor_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
    CONNECTION LIMIT 40 PASSWORD :'app_password';

-- As owner, the role can run the schema migrations (tables, the view, plpgsql triggers) with
-- `python -m cluster_doctor db upgrade`; on PostgreSQL >= 15 it also owns the public schema there.
CREATE DATABASE cluster_doctor OWNER cluster_doctor;
COMMENT ON DATABASE cluster_doctor IS 'Cluster Doctor validation results (validation_history, validation_latest)';

-- Nobody else connects to the results database unless granted (e.g. a read-only Grafana role:
-- docs/deployment.md), and the results role cannot connect to the Airflow metadata database.
REVOKE ALL ON DATABASE cluster_doctor FROM PUBLIC;
\if :{?metadata_db}
REVOKE CONNECT, TEMPORARY ON DATABASE :"metadata_db" FROM PUBLIC;
\endif
