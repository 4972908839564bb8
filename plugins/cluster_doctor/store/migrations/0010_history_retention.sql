-- Issue 32: a retention for validation_history (cluster_doctor.store.retention, setting
-- history_retention_days), and deletes that recompute each pair once per statement instead of once
-- per deleted row.
--
-- Until now a DELETE of n attempts ran cluster_doctor_refresh_pair n times (a row-level trigger): a
-- retention pass over a day of hourly sweeps at 5,000 nodes would recompute 120,000 times what 20,000
-- pairs need once. Deletes now refresh every pair they touched once, at the end of the statement (when
-- row-level AFTER triggers fired too), taking the pairs' advisory locks in one order. Updates keep their
-- row-level trigger (an update can move an attempt to another pair).
--
-- The retention deletes only attempts older than both its cutoff and what each pair's state rests on
-- (the executed attempt before the current status streak, else the streak's first attempt; for a pair
-- that never executed, its latest attempt): recomputing such a pair gives the same state, so a
-- retention statement says so (SET LOCAL cluster_doctor.retention = 'on') and its deletes skip the
-- recomputation. Safe on a history of millions of rows: triggers and functions only.

CREATE OR REPLACE FUNCTION cluster_doctor_on_history_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('cluster_doctor.retention', true) = 'on' THEN
        RETURN NULL;  -- store.retention deletes only what no pair's state rests on
    END IF;
    PERFORM pg_advisory_xact_lock(4242, bucket)
       FROM (SELECT DISTINCT hashtext(node_name || '/' || test_name) & 1023 AS bucket FROM deleted_attempts) b
      ORDER BY bucket;
    PERFORM cluster_doctor_refresh_pair(node_name, test_name)
       FROM (SELECT DISTINCT node_name, test_name FROM deleted_attempts) p;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS validation_history_state_change ON validation_history;
CREATE OR REPLACE TRIGGER validation_history_state_update AFTER UPDATE ON validation_history
    FOR EACH ROW EXECUTE FUNCTION cluster_doctor_on_history_change();
CREATE OR REPLACE TRIGGER validation_history_state_delete AFTER DELETE ON validation_history
    REFERENCING OLD TABLE AS deleted_attempts FOR EACH STATEMENT EXECUTE FUNCTION cluster_doctor_on_history_delete();

COMMENT ON TABLE validation_history IS
    'Cluster Doctor: one row per validation attempt of a test on a node; attempts older than the setting history_retention_days are deleted daily, but for those a pair''s latest state rests on';
