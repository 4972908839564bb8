-- Run-to-run claims (cluster_doctor.claims): a DagRun's prioritize task claims the nodes it plans, so
-- that overlapping runs (hourly, manual, backfill) never plan or validate the same node at once.
-- One row per node: a node is validated by one run at a time. A claim is live until expires_at (no
-- longer than a validation of that run can last) or until the run records the node's attempt.
CREATE TABLE validation_claims (
    node_name  text        PRIMARY KEY,
    test_name  text        NOT NULL,
    dag_id     text        NOT NULL,
    run_id     text        NOT NULL,
    claimed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT validation_claims_expiry_check CHECK (expires_at >= claimed_at)
);

-- releasing a run's claims, and a retried prioritize finding its own
CREATE INDEX validation_claims_run_idx ON validation_claims (dag_id, run_id);

COMMENT ON TABLE validation_claims IS
    'Cluster Doctor: which DagRun is validating each node; written only by cluster_doctor.claims (expired rows are dead)';
