-- Reservations of overdue nodes (cluster_doctor.kube.reservation, issue 21 §2): one row per NoSchedule
-- taint Cluster Doctor applied to a busy node so no new user pod lands when its job ends, from the
-- taint to its removal. What a reservation cost is the time the node stood idle, tainted, waiting for
-- its validation: from when a run first saw it free (or, conservatively, last saw it busy) to the
-- taint's removal, times its GPUs (idle_gpu_hours). The daily report and the metrics read it.
CREATE TABLE node_reservations (
    id             bigserial        PRIMARY KEY,
    node_name      text             NOT NULL,
    gpu_count      integer          NOT NULL DEFAULT 0,
    reserved_at    timestamptz      NOT NULL,
    reserved_by    text             NOT NULL,   -- the run that applied the taint
    last_busy_at   timestamptz,                 -- the last time a run saw a user pod on it
    free_since     timestamptz,                 -- the first time a run saw it free while reserved
    released_at    timestamptz,
    release_reason text,                        -- validated | max hold | no longer overdue | not eligible
    idle_gpu_hours double precision,
    CONSTRAINT node_reservations_release_check CHECK ((released_at IS NULL) = (release_reason IS NULL))
);

-- at most one open reservation per node
CREATE UNIQUE INDEX node_reservations_open_idx ON node_reservations (node_name) WHERE released_at IS NULL;
-- the daily report's window
CREATE INDEX node_reservations_released_idx ON node_reservations (released_at);

COMMENT ON TABLE node_reservations IS
    'Cluster Doctor: taints applied to overdue busy nodes and what they cost; written only by cluster_doctor.kube.reservation';
