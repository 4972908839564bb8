-- Issue 32: the GPU time validation spent, summed per hour (validation_gpu_time), kept by statement-level
-- triggers on validation_history, so that "validation GPU-hours over the last 7 days" (the fleet page,
-- the metrics: cluster_doctor.store.fleet.gpu_hours) reads 168 hourly sums and the attempts of the two
-- partial hours at the window's edges instead of every attempt of the window: 840,000 rows a week once
-- the health sweep adds a row per free node and hour at 5,000 nodes.
--
-- The sums follow the history exactly (transactional, same snapshot as any reader): inserted attempts
-- are added, deleted ones subtracted, updated ones both. An attempt counts when it held the node's GPUs
-- (pass, fail, error, preempted; store.fleet.GPU_TIME_STATUSES) and has a duration; its GPU-seconds are
-- duration x GPU count, left out (NULL) when either is beyond what an attempt can have (store.fleet's
-- GPU_SECONDS). Hours are UTC hours (date_bin from the Unix epoch: independent of the session's time zone).
--
-- The backfill reads the history once (a sequential scan: about half a minute at 30 million rows) while
-- this migration holds its lock: writers wait for it, readers do not. Every statement is idempotent.

CREATE TABLE IF NOT EXISTS validation_gpu_time (
    hour              timestamptz      PRIMARY KEY,
    gpu_seconds       double precision NOT NULL DEFAULT 0,
    attempts          bigint           NOT NULL DEFAULT 0,
    without_gpu_count bigint           NOT NULL DEFAULT 0
);
COMMENT ON TABLE validation_gpu_time IS
    'Cluster Doctor: GPU time of validation attempts per UTC hour (kept by triggers on validation_history)';

-- Each statement's attempts, grouped by hour: added (inserted), subtracted (deleted), both (updated).
CREATE OR REPLACE FUNCTION cluster_doctor_gpu_time_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO validation_gpu_time AS t (hour, gpu_seconds, attempts, without_gpu_count)
    SELECT date_bin('1 hour', finished_at, timestamptz '1970-01-01 00:00:00+00'),
           coalesce(sum(CASE WHEN duration_s <= 1e9 AND gpu_count <= 1e6 THEN duration_s * gpu_count END), 0),
           count(*), count(*) FILTER (WHERE gpu_count IS NULL)
      FROM new_attempts
     WHERE status IN ('pass', 'fail', 'error', 'preempted') AND duration_s IS NOT NULL
     GROUP BY 1 ORDER BY 1  -- hours in order: two writers never wait on each other's hours crosswise
    ON CONFLICT (hour) DO UPDATE SET gpu_seconds = t.gpu_seconds + EXCLUDED.gpu_seconds,
                                     attempts = t.attempts + EXCLUDED.attempts,
                                     without_gpu_count = t.without_gpu_count + EXCLUDED.without_gpu_count;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION cluster_doctor_gpu_time_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO validation_gpu_time AS t (hour, gpu_seconds, attempts, without_gpu_count)
    SELECT date_bin('1 hour', finished_at, timestamptz '1970-01-01 00:00:00+00'),
           -coalesce(sum(CASE WHEN duration_s <= 1e9 AND gpu_count <= 1e6 THEN duration_s * gpu_count END), 0),
           -count(*), -count(*) FILTER (WHERE gpu_count IS NULL)
      FROM old_attempts
     WHERE status IN ('pass', 'fail', 'error', 'preempted') AND duration_s IS NOT NULL
     GROUP BY 1 ORDER BY 1  -- hours in order: two writers never wait on each other's hours crosswise
    ON CONFLICT (hour) DO UPDATE SET gpu_seconds = t.gpu_seconds + EXCLUDED.gpu_seconds,
                                     attempts = t.attempts + EXCLUDED.attempts,
                                     without_gpu_count = t.without_gpu_count + EXCLUDED.without_gpu_count;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION cluster_doctor_gpu_time_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO validation_gpu_time AS t (hour, gpu_seconds, attempts, without_gpu_count)
    SELECT date_bin('1 hour', finished_at, timestamptz '1970-01-01 00:00:00+00'),
           -coalesce(sum(CASE WHEN duration_s <= 1e9 AND gpu_count <= 1e6 THEN duration_s * gpu_count END), 0),
           -count(*), -count(*) FILTER (WHERE gpu_count IS NULL)
      FROM old_attempts
     WHERE status IN ('pass', 'fail', 'error', 'preempted') AND duration_s IS NOT NULL
     GROUP BY 1 ORDER BY 1  -- hours in order: two writers never wait on each other's hours crosswise
    ON CONFLICT (hour) DO UPDATE SET gpu_seconds = t.gpu_seconds + EXCLUDED.gpu_seconds,
                                     attempts = t.attempts + EXCLUDED.attempts,
                                     without_gpu_count = t.without_gpu_count + EXCLUDED.without_gpu_count;
    INSERT INTO validation_gpu_time AS t (hour, gpu_seconds, attempts, without_gpu_count)
    SELECT date_bin('1 hour', finished_at, timestamptz '1970-01-01 00:00:00+00'),
           coalesce(sum(CASE WHEN duration_s <= 1e9 AND gpu_count <= 1e6 THEN duration_s * gpu_count END), 0),
           count(*), count(*) FILTER (WHERE gpu_count IS NULL)
      FROM new_attempts
     WHERE status IN ('pass', 'fail', 'error', 'preempted') AND duration_s IS NOT NULL
     GROUP BY 1 ORDER BY 1  -- hours in order: two writers never wait on each other's hours crosswise
    ON CONFLICT (hour) DO UPDATE SET gpu_seconds = t.gpu_seconds + EXCLUDED.gpu_seconds,
                                     attempts = t.attempts + EXCLUDED.attempts,
                                     without_gpu_count = t.without_gpu_count + EXCLUDED.without_gpu_count;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION cluster_doctor_gpu_time_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE validation_gpu_time;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER validation_history_gpu_time_insert AFTER INSERT ON validation_history
    REFERENCING NEW TABLE AS new_attempts FOR EACH STATEMENT EXECUTE FUNCTION cluster_doctor_gpu_time_inserted();
CREATE OR REPLACE TRIGGER validation_history_gpu_time_delete AFTER DELETE ON validation_history
    REFERENCING OLD TABLE AS old_attempts FOR EACH STATEMENT EXECUTE FUNCTION cluster_doctor_gpu_time_deleted();
CREATE OR REPLACE TRIGGER validation_history_gpu_time_update AFTER UPDATE ON validation_history
    REFERENCING OLD TABLE AS old_attempts NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION cluster_doctor_gpu_time_updated();
CREATE OR REPLACE TRIGGER validation_history_gpu_time_truncate AFTER TRUNCATE ON validation_history
    FOR EACH STATEMENT EXECUTE FUNCTION cluster_doctor_gpu_time_truncated();
-- bulk loads under session_replication_role = replica keep the sums too
ALTER TABLE validation_history ENABLE ALWAYS TRIGGER validation_history_gpu_time_insert;
ALTER TABLE validation_history ENABLE ALWAYS TRIGGER validation_history_gpu_time_delete;
ALTER TABLE validation_history ENABLE ALWAYS TRIGGER validation_history_gpu_time_update;
ALTER TABLE validation_history ENABLE ALWAYS TRIGGER validation_history_gpu_time_truncate;

-- the history so far
DELETE FROM validation_gpu_time;
    INSERT INTO validation_gpu_time AS t (hour, gpu_seconds, attempts, without_gpu_count)
    SELECT date_bin('1 hour', finished_at, timestamptz '1970-01-01 00:00:00+00'),
           coalesce(sum(CASE WHEN duration_s <= 1e9 AND gpu_count <= 1e6 THEN duration_s * gpu_count END), 0),
           count(*), count(*) FILTER (WHERE gpu_count IS NULL)
      FROM validation_history
     WHERE status IN ('pass', 'fail', 'error', 'preempted') AND duration_s IS NOT NULL
     GROUP BY 1 ORDER BY 1  -- hours in order: two writers never wait on each other's hours crosswise
    ON CONFLICT (hour) DO UPDATE SET gpu_seconds = t.gpu_seconds + EXCLUDED.gpu_seconds,
                                     attempts = t.attempts + EXCLUDED.attempts,
                                     without_gpu_count = t.without_gpu_count + EXCLUDED.without_gpu_count;
