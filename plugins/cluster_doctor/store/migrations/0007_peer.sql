-- Issue 23 §2: peer tests. The suite fabric_peer runs on two nodes at once; each side's attempt names
-- the other node in `peer` (NULL for a node's own suites).
--
-- No new status: an attempt of a peer test is pass/fail/error like any other (the CHECK on status is
-- unchanged). `suspect` — a failed peer test not yet blamed on either side — is a verdict over many
-- attempts (cluster_doctor.domain.peers.triangulate, read by cluster_doctor.store.peers), like the
-- straggler verdicts, not the outcome of one; the fleet page, the node page, `cluster-doctor status` and
-- the metrics show it. validation_latest is unchanged: one row per (node, test), fabric_peer included;
-- the peer of its latest executed attempt is one primary-key join away (history_id).
--
-- Safe on a history of millions of rows: a nullable column without a default is a catalog change (no
-- rewrite) and the CHECK is NOT VALID (new rows are checked, old ones, all NULL, are not scanned).
-- Every statement is idempotent.

ALTER TABLE validation_history ADD COLUMN IF NOT EXISTS peer text;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'validation_history_peer_check') THEN
        ALTER TABLE validation_history ADD CONSTRAINT validation_history_peer_check
            CHECK (peer IS NULL
                   OR (peer <> node_name AND length(peer) <= 253
                       AND peer ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')) NOT VALID;
    END IF;
END;
$$;

COMMENT ON COLUMN validation_history.peer IS
    'peer tests (fabric_peer): the other node of the two-node test; NULL for a node''s own suites';
