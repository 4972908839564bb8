-- Issue 32: change stamps for the readers that keep the fleet in memory (cluster_doctor.store.fleet_state:
-- the fleet page and the metrics). Every row version of validation_pair_state and gpu_node_inventory
-- carries the id of the transaction that wrote it (changed_xid). A reader that saw both tables at
-- snapshot S brings its copy up to date by reading only the rows with changed_xid >=
-- pg_snapshot_xmin(S) (every transaction S could not see has an id at least that); it notices deleted
-- rows by a count of the statements that deleted any (cluster_doctor_deletions: a row, so a reader sees
-- it move exactly when its snapshot sees the deletion). A scrape at 5,000 nodes reads the few pairs that
-- changed, not 20,000.
--
-- Safe on a live database: both tables are small (one row per node and test, one per node), so the
-- rewrite the volatile default causes is quick; the stamp trigger fires ALWAYS, so bulk loads under
-- session_replication_role = replica (and the rebuild function) stamp too. Every statement is idempotent.

ALTER TABLE validation_pair_state ADD COLUMN IF NOT EXISTS changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
ALTER TABLE gpu_node_inventory ADD COLUMN IF NOT EXISTS changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id();

COMMENT ON COLUMN validation_pair_state.changed_xid IS
    'transaction that last wrote the row (trigger cluster_doctor_stamp_change): readers fetch what changed since their snapshot';
COMMENT ON COLUMN gpu_node_inventory.changed_xid IS
    'transaction that last wrote the row (trigger cluster_doctor_stamp_change): readers fetch what changed since their snapshot';

CREATE OR REPLACE FUNCTION cluster_doctor_stamp_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed_xid := pg_current_xact_id();
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER validation_pair_state_stamp BEFORE INSERT OR UPDATE ON validation_pair_state
    FOR EACH ROW EXECUTE FUNCTION cluster_doctor_stamp_change();
ALTER TABLE validation_pair_state ENABLE ALWAYS TRIGGER validation_pair_state_stamp;
CREATE OR REPLACE TRIGGER gpu_node_inventory_stamp BEFORE INSERT OR UPDATE ON gpu_node_inventory
    FOR EACH ROW EXECUTE FUNCTION cluster_doctor_stamp_change();
ALTER TABLE gpu_node_inventory ENABLE ALWAYS TRIGGER gpu_node_inventory_stamp;

CREATE INDEX IF NOT EXISTS validation_pair_state_changed_idx ON validation_pair_state (changed_xid);
CREATE INDEX IF NOT EXISTS gpu_node_inventory_changed_idx ON gpu_node_inventory (changed_xid);

CREATE TABLE IF NOT EXISTS cluster_doctor_deletions (
    table_name text   PRIMARY KEY,
    statements bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE cluster_doctor_deletions IS
    'Cluster Doctor: statements that deleted rows of validation_pair_state or gpu_node_inventory (trigger cluster_doctor_count_deletion)';
INSERT INTO cluster_doctor_deletions (table_name) VALUES ('validation_pair_state'), ('gpu_node_inventory')
    ON CONFLICT (table_name) DO NOTHING;

CREATE OR REPLACE FUNCTION cluster_doctor_count_deletion() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cluster_doctor_deletions SET statements = statements + 1 WHERE table_name = TG_TABLE_NAME;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER validation_pair_state_deletions AFTER DELETE OR TRUNCATE ON validation_pair_state
    FOR EACH STATEMENT EXECUTE FUNCTION cluster_doctor_count_deletion();
ALTER TABLE validation_pair_state ENABLE ALWAYS TRIGGER validation_pair_state_deletions;
CREATE OR REPLACE TRIGGER gpu_node_inventory_deletions AFTER DELETE OR TRUNCATE ON gpu_node_inventory
    FOR EACH STATEMENT EXECUTE FUNCTION cluster_doctor_count_deletion();
ALTER TABLE gpu_node_inventory ENABLE ALWAYS TRIGGER gpu_node_inventory_deletions;
