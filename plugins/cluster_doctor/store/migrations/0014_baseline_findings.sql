-- A missing baseline is a configuration finding shown once per node pool (store.baselines): its query
-- reads the pairs whose latest executed attempt is an error, through this partial index, never the
-- whole per-pair state (errors are few; the fleet page reads it on every request).
CREATE INDEX IF NOT EXISTS validation_pair_state_error_idx
    ON validation_pair_state (gpu_model, node_name) WHERE status = 'error';
