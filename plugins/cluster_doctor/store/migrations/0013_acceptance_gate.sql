-- Issue 31 §1: the acceptance gate (cluster_doctor.kube.acceptance). Its state lives on the nodes (the
-- taint and its gated-at annotation, seen by every worker); a node's life gains the step 'gated' (a new,
-- rebooted or returning node tainted until its whole bundle passes), so every taint is counted here.
ALTER TABLE node_transitions DROP CONSTRAINT IF EXISTS node_transitions_kind_check;
ALTER TABLE node_transitions ADD CONSTRAINT node_transitions_kind_check
    CHECK (kind IN ('quarantined', 'repaired', 'accepted', 'released', 'repeat_offender', 'gated'));
