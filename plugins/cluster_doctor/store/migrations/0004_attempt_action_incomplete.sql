-- Issue 20: every attempt keeps its recommended action (cluster_doctor.domain.actions) and whether a
-- check could not run, in the history, the per-pair state and validation_latest.
--
-- Safe on a history of millions of rows: nullable columns without a default are a catalog change
-- (no rewrite), the CHECK constraints are NOT VALID (new rows are checked, old ones are not scanned),
-- and the history is not backfilled. An old row's action stays NULL, read as "unknown" (never as
-- "none"); its not-run count is derived from its stored checks where it is read (the ``skip``
-- checks), so an old pass that skipped a check does not become a clean pass. Only the per-pair state
-- (one row per node and test) is backfilled that way, here. Every statement is idempotent.

ALTER TABLE validation_history
    ADD COLUMN IF NOT EXISTS action         text,
    ADD COLUMN IF NOT EXISTS incomplete     boolean,
    ADD COLUMN IF NOT EXISTS checks_not_run integer;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'validation_history_action_check') THEN
        ALTER TABLE validation_history ADD CONSTRAINT validation_history_action_check
            CHECK (action IS NULL OR action IN ('none', 'retest', 'check_storage', 'check_fabric', 'reset_gpu',
                                                'reboot', 'drain_and_service')) NOT VALID;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'validation_history_checks_not_run_check') THEN
        ALTER TABLE validation_history ADD CONSTRAINT validation_history_checks_not_run_check
            CHECK (checks_not_run IS NULL OR checks_not_run >= 0) NOT VALID;
    END IF;
END;
$$;

COMMENT ON COLUMN validation_history.action IS
    'recommended action: none|retest|check_storage|check_fabric|reset_gpu|reboot|drain_and_service; NULL = unknown (recorded before it was kept)';
COMMENT ON COLUMN validation_history.incomplete IS
    'a check could not run (skip): a pass that is not a clean pass; NULL for attempts that never executed, or recorded before it was kept';
COMMENT ON COLUMN validation_history.checks_not_run IS 'how many checks could not run (the suite''s skip count)';

ALTER TABLE validation_pair_state
    ADD COLUMN IF NOT EXISTS action         text,
    ADD COLUMN IF NOT EXISTS incomplete     boolean,
    ADD COLUMN IF NOT EXISTS checks_not_run integer;

-- The not-run count of an executed attempt: the stored one, else (a row from before this migration)
-- its skip checks. NULL for attempts that never executed.
CREATE OR REPLACE FUNCTION cluster_doctor_checks_not_run(p_status text, p_stored integer, p_checks jsonb)
RETURNS integer LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_status IS NULL OR p_status NOT IN ('pass', 'fail', 'error') THEN NULL
        WHEN p_stored IS NOT NULL THEN p_stored
        WHEN jsonb_typeof(p_checks) <> 'array' THEN 0
        ELSE (SELECT count(*)::integer FROM jsonb_array_elements(p_checks) c
               WHERE jsonb_typeof(c) = 'object' AND c->>'status' = 'skip')
    END
$$;

-- Incomplete: the stored flag, else derived from the count (same rule as above).
CREATE OR REPLACE FUNCTION cluster_doctor_incomplete(p_status text, p_stored boolean, p_not_run integer, p_checks jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_status IS NULL OR p_status NOT IN ('pass', 'fail', 'error') THEN NULL
        WHEN p_stored IS NOT NULL THEN p_stored
        ELSE cluster_doctor_checks_not_run(p_status, p_not_run, p_checks) > 0
    END
$$;

-- 0001's functions again, carrying the three columns of the pair's latest executed attempt.
CREATE OR REPLACE FUNCTION cluster_doctor_refresh_pair(p_node text, p_test text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    e  validation_history%ROWTYPE;
    a  validation_history%ROWTYPE;
    d  validation_history%ROWTYPE;
    since timestamptz;
BEGIN
    SELECT * INTO a FROM validation_history
     WHERE node_name = p_node AND test_name = p_test
     ORDER BY finished_at DESC, id DESC LIMIT 1;
    IF NOT FOUND THEN
        DELETE FROM validation_pair_state WHERE node_name = p_node AND test_name = p_test;
        RETURN;
    END IF;
    SELECT * INTO e FROM validation_history
     WHERE node_name = p_node AND test_name = p_test AND status IN ('pass', 'fail', 'error')
     ORDER BY finished_at DESC, id DESC LIMIT 1;
    IF FOUND THEN
        -- the latest executed attempt with a different status ends the current streak
        SELECT * INTO d FROM validation_history
         WHERE node_name = p_node AND test_name = p_test AND status IN ('pass', 'fail', 'error')
           AND status <> e.status AND (finished_at, id) < (e.finished_at, e.id)
         ORDER BY finished_at DESC, id DESC LIMIT 1;
        IF FOUND THEN
            SELECT min(finished_at) INTO since FROM validation_history
             WHERE node_name = p_node AND test_name = p_test AND status = e.status
               AND (finished_at, id) > (d.finished_at, d.id);
        ELSE
            SELECT min(finished_at) INTO since FROM validation_history
             WHERE node_name = p_node AND test_name = p_test AND status = e.status;
        END IF;
    END IF;
    INSERT INTO validation_pair_state AS s (
        node_name, test_name, history_id, status, started_at, finished_at, duration_s, metrics, checks,
        reason, log_path, pod_name, gpu_model, suite_version, dag_id, run_id, status_since,
        previous_status, last_attempt_id, last_attempt_at, last_attempt_status, last_attempt_reason,
        action, incomplete, checks_not_run)
    VALUES (
        p_node, p_test, e.id, e.status, e.started_at, e.finished_at, e.duration_s, e.metrics::json, e.checks::json,
        e.reason, e.log_path, e.pod_name, e.gpu_model, e.suite_version, e.dag_id, e.run_id, since,
        d.status, a.id, a.finished_at, a.status, a.reason,
        e.action, cluster_doctor_incomplete(e.status, e.incomplete, e.checks_not_run, e.checks),
        cluster_doctor_checks_not_run(e.status, e.checks_not_run, e.checks))
    ON CONFLICT (node_name, test_name) DO UPDATE SET
        history_id = EXCLUDED.history_id, status = EXCLUDED.status, started_at = EXCLUDED.started_at,
        finished_at = EXCLUDED.finished_at, duration_s = EXCLUDED.duration_s,
        metrics = EXCLUDED.metrics, checks = EXCLUDED.checks, reason = EXCLUDED.reason,
        log_path = EXCLUDED.log_path, pod_name = EXCLUDED.pod_name, gpu_model = EXCLUDED.gpu_model,
        suite_version = EXCLUDED.suite_version, dag_id = EXCLUDED.dag_id, run_id = EXCLUDED.run_id,
        status_since = EXCLUDED.status_since, previous_status = EXCLUDED.previous_status,
        last_attempt_id = EXCLUDED.last_attempt_id, last_attempt_at = EXCLUDED.last_attempt_at,
        last_attempt_status = EXCLUDED.last_attempt_status,
        last_attempt_reason = EXCLUDED.last_attempt_reason,
        action = EXCLUDED.action, incomplete = EXCLUDED.incomplete, checks_not_run = EXCLUDED.checks_not_run;
END;
$$;

CREATE OR REPLACE FUNCTION cluster_doctor_on_history_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    s validation_pair_state%ROWTYPE;
    executed boolean := NEW.status IN ('pass', 'fail', 'error');
BEGIN
    PERFORM pg_advisory_xact_lock(4242, hashtext(NEW.node_name || '/' || NEW.test_name) & 1023);
    SELECT * INTO s FROM validation_pair_state WHERE node_name = NEW.node_name AND test_name = NEW.test_name;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM validation_history
                    WHERE node_name = NEW.node_name AND test_name = NEW.test_name AND id <> NEW.id) THEN
            PERFORM cluster_doctor_refresh_pair(NEW.node_name, NEW.test_name);
            RETURN NULL;
        END IF;
        INSERT INTO validation_pair_state (
            node_name, test_name, history_id, status, started_at, finished_at, duration_s, metrics,
            checks, reason, log_path, pod_name, gpu_model, suite_version, dag_id, run_id, status_since,
            previous_status, last_attempt_id, last_attempt_at, last_attempt_status, last_attempt_reason,
            action, incomplete, checks_not_run)
        SELECT NEW.node_name, NEW.test_name,
               CASE WHEN executed THEN NEW.id END, CASE WHEN executed THEN NEW.status END,
               CASE WHEN executed THEN NEW.started_at END, CASE WHEN executed THEN NEW.finished_at END,
               CASE WHEN executed THEN NEW.duration_s END, CASE WHEN executed THEN NEW.metrics::json END,
               CASE WHEN executed THEN NEW.checks::json END, CASE WHEN executed THEN NEW.reason END,
               CASE WHEN executed THEN NEW.log_path END, CASE WHEN executed THEN NEW.pod_name END,
               CASE WHEN executed THEN NEW.gpu_model END, CASE WHEN executed THEN NEW.suite_version END,
               CASE WHEN executed THEN NEW.dag_id END, CASE WHEN executed THEN NEW.run_id END,
               CASE WHEN executed THEN NEW.finished_at END, NULL,
               NEW.id, NEW.finished_at, NEW.status, NEW.reason,
               CASE WHEN executed THEN NEW.action END,
               cluster_doctor_incomplete(NEW.status, NEW.incomplete, NEW.checks_not_run, NEW.checks),
               cluster_doctor_checks_not_run(NEW.status, NEW.checks_not_run, NEW.checks);
        RETURN NULL;
    END IF;
    IF (NEW.finished_at, NEW.id) < (s.last_attempt_at, s.last_attempt_id) THEN
        -- arrived out of order (a delayed write of an older attempt): recompute exactly
        PERFORM cluster_doctor_refresh_pair(NEW.node_name, NEW.test_name);
        RETURN NULL;
    END IF;
    IF executed THEN
        UPDATE validation_pair_state SET
            history_id = NEW.id, status = NEW.status, started_at = NEW.started_at,
            finished_at = NEW.finished_at, duration_s = NEW.duration_s, metrics = NEW.metrics::json,
            checks = NEW.checks::json, reason = NEW.reason, log_path = NEW.log_path, pod_name = NEW.pod_name,
            gpu_model = NEW.gpu_model, suite_version = NEW.suite_version, dag_id = NEW.dag_id,
            run_id = NEW.run_id,
            status_since = CASE WHEN s.status = NEW.status THEN s.status_since ELSE NEW.finished_at END,
            previous_status = CASE WHEN s.status = NEW.status THEN s.previous_status ELSE s.status END,
            last_attempt_id = NEW.id, last_attempt_at = NEW.finished_at,
            last_attempt_status = NEW.status, last_attempt_reason = NEW.reason,
            action = NEW.action,
            incomplete = cluster_doctor_incomplete(NEW.status, NEW.incomplete, NEW.checks_not_run, NEW.checks),
            checks_not_run = cluster_doctor_checks_not_run(NEW.status, NEW.checks_not_run, NEW.checks)
        WHERE node_name = NEW.node_name AND test_name = NEW.test_name;
    ELSE
        UPDATE validation_pair_state SET
            last_attempt_id = NEW.id, last_attempt_at = NEW.finished_at,
            last_attempt_status = NEW.status, last_attempt_reason = NEW.reason
        WHERE node_name = NEW.node_name AND test_name = NEW.test_name;
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION cluster_doctor_rebuild_pair_state() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    LOCK TABLE validation_pair_state IN EXCLUSIVE MODE;
    DELETE FROM validation_pair_state;
    INSERT INTO validation_pair_state (
        node_name, test_name, history_id, status, started_at, finished_at, duration_s, metrics, checks,
        reason, log_path, pod_name, gpu_model, suite_version, dag_id, run_id, status_since,
        previous_status, last_attempt_id, last_attempt_at, last_attempt_status, last_attempt_reason,
        action, incomplete, checks_not_run)
    WITH executed AS (
        SELECT h.*,
               -- streak id: counts status changes, newest first
               row_number() OVER w_all - row_number() OVER w_status AS streak,
               row_number() OVER w_all AS rn
          FROM validation_history h
         WHERE status IN ('pass', 'fail', 'error')
        WINDOW w_all AS (PARTITION BY node_name, test_name ORDER BY finished_at DESC, id DESC),
               w_status AS (PARTITION BY node_name, test_name, status ORDER BY finished_at DESC, id DESC)
    ),
    latest AS (SELECT * FROM executed WHERE rn = 1),
    since AS (
        SELECT x.node_name, x.test_name, min(x.finished_at) AS status_since
          FROM executed x JOIN latest l USING (node_name, test_name)
         WHERE x.status = l.status AND x.streak = l.streak
         GROUP BY x.node_name, x.test_name
    ),
    previous AS (
        SELECT DISTINCT ON (x.node_name, x.test_name) x.node_name, x.test_name, x.status
          FROM executed x JOIN latest l USING (node_name, test_name)
         WHERE x.status <> l.status
         ORDER BY x.node_name, x.test_name, x.finished_at DESC, x.id DESC
    ),
    last_any AS (
        SELECT DISTINCT ON (node_name, test_name) node_name, test_name, id, finished_at, status, reason
          FROM validation_history
         ORDER BY node_name, test_name, finished_at DESC, id DESC
    )
    SELECT a.node_name, a.test_name, l.id, l.status, l.started_at, l.finished_at, l.duration_s, l.metrics::json,
           l.checks::json, l.reason, l.log_path, l.pod_name, l.gpu_model, l.suite_version, l.dag_id, l.run_id,
           s.status_since, p.status, a.id, a.finished_at, a.status, a.reason,
           l.action, cluster_doctor_incomplete(l.status, l.incomplete, l.checks_not_run, l.checks),
           cluster_doctor_checks_not_run(l.status, l.checks_not_run, l.checks)
      FROM last_any a
      LEFT JOIN latest l USING (node_name, test_name)
      LEFT JOIN since s USING (node_name, test_name)
      LEFT JOIN previous p USING (node_name, test_name);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;

-- The per-pair state's existing rows (one per node and test): their not-run count from their checks.
UPDATE validation_pair_state
   SET checks_not_run = cluster_doctor_checks_not_run(status, NULL, checks::jsonb),
       incomplete = cluster_doctor_checks_not_run(status, NULL, checks::jsonb) > 0
 WHERE status IS NOT NULL AND checks_not_run IS NULL;

-- New columns go last: CREATE OR REPLACE VIEW may only append.
CREATE OR REPLACE VIEW validation_latest AS
SELECT node_name, test_name, status, started_at, finished_at, metrics, checks, reason, gpu_model,
       history_id, status_since, previous_status, last_attempt_at, last_attempt_status, last_attempt_reason,
       action, incomplete, checks_not_run
  FROM validation_pair_state;

COMMENT ON VIEW validation_latest IS
    'Cluster Doctor: per (node, test) the most recent executed attempt (pass/fail/error) and the last attempt of any status; action NULL = unknown, incomplete = a check could not run';
