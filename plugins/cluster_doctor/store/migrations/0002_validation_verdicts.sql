-- Fleet-relative and drift verdicts (cluster_doctor.fleet_baseline), judged after an attempt is
-- recorded. One row per (attempt, metric, kind); an attempt without rows was judged clean or not judged.
CREATE TABLE validation_verdicts (
    history_id    bigint           NOT NULL REFERENCES validation_history (id) ON DELETE CASCADE,
    node_name     text             NOT NULL,
    test_name     text             NOT NULL,
    metric        text             NOT NULL,
    kind          text             NOT NULL,
    value         double precision NOT NULL,
    gpu_model     text,
    fleet_median  double precision,
    fleet_mad     double precision,
    fleet_nodes   integer,
    percentile    double precision,
    own_median    double precision,
    own_samples   integer,
    -- the pair's previous executed attempt had the same verdict: it counts as failing
    confirmed     boolean          NOT NULL DEFAULT false,
    judged_at     timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (history_id, metric, kind),
    CONSTRAINT validation_verdicts_kind_check CHECK (kind IN ('straggler', 'drift')),
    CONSTRAINT validation_verdicts_percentile_check CHECK (percentile IS NULL OR percentile BETWEEN 0 AND 100)
);

CREATE INDEX validation_verdicts_pair_idx ON validation_verdicts (node_name, test_name, history_id DESC);

COMMENT ON TABLE validation_verdicts IS
    'Cluster Doctor: straggler (vs the fleet of the same GPU model) and drift (vs the node''s own past) verdicts per attempt and metric';

-- Verdicts on the latest executed attempt of each (node, test): what the latest view's readers show.
CREATE VIEW validation_latest_verdicts AS
SELECT v.node_name, v.test_name, v.metric, v.kind, v.value, v.gpu_model, v.fleet_median, v.fleet_mad,
       v.fleet_nodes, v.percentile, v.own_median, v.own_samples, v.confirmed, v.history_id, v.judged_at
  FROM validation_pair_state s
  JOIN validation_verdicts v ON v.history_id = s.history_id;
