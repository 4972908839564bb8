"""dl/training.py: a model that does not learn fails, through the suite; the pure judging of losses."""

from __future__ import annotations

import torch
from cluster_doctor_suites import dl_unit
from cluster_doctor_suites.dl import training
from cluster_doctor_suites.dl.training import TrainingRun


def test_training_that_does_not_learn_fails(run_inproc, monkeypatch, h):
    class Frozen(torch.optim.SGD):
        def __init__(self, params, **kw):
            super().__init__(params, lr=0.0)

    monkeypatch.setattr(torch.optim, "AdamW", Frozen)
    ns = run_inproc(dl_unit, "--device", "cpu", "--only", "training", "--train-steps", "12")
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    bad = h.failing(ns, "training_smoke")
    assert {c["device"] for c in bad} == {"cpu:0", "cpu:1"} and bad[0]["value"] > 0.5


def test_the_loss_ratio_compares_the_last_steps_with_the_first():
    # 8 steps: the mean of the first 2 against the mean of the last 2
    judged = training.to_checks(TrainingRun("cuda:0", "", 8, [2.0, 2.0, 1.5, 1.0, 0.9, 0.8, 0.5, 0.5]), 0.5)
    (c,) = judged.checks
    assert (c.status, c.value, c.threshold) == ("pass", 0.25, "<= 0.5")
    assert "loss 2 -> 0.5 in 8 steps" in c.message
    assert [(m.key, m.value) for m in judged.metrics] == [("training_loss_ratio.cuda0", 0.25)]


def test_a_loss_that_becomes_nan_fails_naming_the_gpu():
    judged = training.to_checks(TrainingRun("cuda:2", " (00000000:1A:00.0)", 4, [2.0, 1.0, float("nan"), 0.5]), 0.5)
    (c,) = judged.checks
    assert (c.status, c.code, c.value) == ("fail", "TRAINING_NO_CONVERGENCE", "nan")
    assert c.message == "loss became non-finite during training (00000000:1A:00.0)"
