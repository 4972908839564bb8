-- The inventory of GPU nodes (cluster_doctor.store.inventory): every GPU node discovery has seen, one
-- row per node, written by the discover task of every run. The fleet page, the daily report,
-- `cluster-doctor status`, the metrics and the run summary count coverage over this one set.
CREATE TABLE gpu_node_inventory (
    node_name          text        PRIMARY KEY,
    first_seen_at      timestamptz NOT NULL,
    last_seen_at       timestamptz NOT NULL,
    gpu_model          text,
    gpu_count          integer,
    -- 'free', or why the node could not be validated when last seen (discovery's reasons: 'not ready',
    -- 'cordoned', 'tainted', 'busy', 'validation running', 'reserved'); 'unknown' for a node known
    -- only from its attempts (recorded before the inventory existed, or by hand)
    eligibility        text        NOT NULL,
    eligibility_detail text,
    -- since when the node has had this eligibility (as discovery saw it: the first run that did)
    eligibility_since  timestamptz NOT NULL,
    -- when a discovery of the whole cluster first did not see the node; NULL while it is there
    gone_at            timestamptz,
    CONSTRAINT gpu_node_inventory_node_name_check
        CHECK (length(node_name) <= 253
               AND node_name ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'),
    CONSTRAINT gpu_node_inventory_seen_check CHECK (last_seen_at >= first_seen_at),
    CONSTRAINT gpu_node_inventory_gpu_count_check CHECK (gpu_count IS NULL OR gpu_count >= 0)
);

COMMENT ON TABLE gpu_node_inventory IS
    'Cluster Doctor: every GPU node discovery has seen, its current eligibility and why; gone_at when it left the cluster';

-- A node with an attempt is a node discovery saw (the planner only picks discovered nodes): a row is
-- added for any node an attempt names and the inventory lacks (attempts recorded by hand, or before
-- this table existed), so no result ever belongs to a node the fleet does not list.
CREATE FUNCTION cluster_doctor_inventory_from_attempts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO gpu_node_inventory (node_name, first_seen_at, last_seen_at, gpu_model, gpu_count,
                                    eligibility, eligibility_since)
    SELECT node_name, min(finished_at), min(finished_at), max(gpu_model), max(gpu_count), 'unknown',
           min(finished_at)
      FROM new_attempts
     GROUP BY node_name
    ON CONFLICT (node_name) DO NOTHING;
    RETURN NULL;
END;
$$;

CREATE TRIGGER validation_history_inventory AFTER INSERT ON validation_history
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION cluster_doctor_inventory_from_attempts();

-- Every node of the history the inventory lacks, known from its attempts (first and last attempt, the
-- newest model and GPU count): run once here; bulk loads that bypass the triggers call it after.
CREATE FUNCTION cluster_doctor_inventory_from_history() RETURNS bigint
LANGUAGE sql AS $$
    WITH added AS (
        INSERT INTO gpu_node_inventory (node_name, first_seen_at, last_seen_at, gpu_model, gpu_count, eligibility,
                                        eligibility_since)
        SELECT node_name, min(finished_at), max(finished_at),
               (array_agg(gpu_model ORDER BY finished_at DESC) FILTER (WHERE gpu_model IS NOT NULL))[1],
               (array_agg(gpu_count ORDER BY finished_at DESC) FILTER (WHERE gpu_count IS NOT NULL))[1],
               'unknown', max(finished_at)
          FROM validation_history
         GROUP BY node_name
        ON CONFLICT (node_name) DO NOTHING
        RETURNING 1)
    SELECT count(*) FROM added;
$$;

SELECT cluster_doctor_inventory_from_history();
