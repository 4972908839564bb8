"""The repeat-offender rule and the hand-off document, pure."""

import datetime as dt
import json

import pytest
from cluster_doctor.domain import handoff as docs
from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.transitions import RepeatPolicy, Transition

NOW = dt.datetime(2026, 11, 28, 10, tzinfo=dt.UTC)
D = dt.timedelta(days=1)


def t(kind, days_ago):
    return Transition("gpu-001", kind, NOW - days_ago * D, "x")


@pytest.mark.parametrize("past, expected", [
    ([], None),
    ([t(life.QUARANTINED, 20), t(life.RELEASED, 19)], "confirmed failing again 19.0 days after its release"),
    ([t(life.QUARANTINED, 40), t(life.RELEASED, 31)], None),  # the release is older than the period
    ([t(life.QUARANTINED, 29), t(life.QUARANTINED, 10)], "quarantined 3 times within 30 days"),  # N = 3, this one too
    ([t(life.QUARANTINED, 10)], None),
])
def test_a_repeat_offender_fails_again_soon_after_a_release_or_too_often(past, expected):
    found = life.repeat_reason(past, NOW, RepeatPolicy())
    assert (found is None) if expected is None else found.startswith(expected)


def test_zero_days_names_no_repeat_offender_and_bad_settings_say_what_is_wrong():
    assert life.repeat_reason([t(life.RELEASED, 1)], NOW, RepeatPolicy(days=0)) is None
    with pytest.raises(life.InvalidRepeatPolicy, match="repeat_offender_failures: must be an integer >= 2, got 1"):
        RepeatPolicy(failures=1)


def test_open_offenders_end_with_a_release():
    found = life.open_offenders([t(life.REPEAT_OFFENDER, 5), t(life.RELEASED, 2),
                                 Transition("gpu-002", life.REPEAT_OFFENDER, NOW - D, "quarantined 3 times")])
    assert list(found) == ["gpu-002"] and found["gpu-002"].describe().endswith("(quarantined 3 times): action replace")


def test_the_document_carries_serials_failed_checks_and_a_signature_of_its_exact_bytes():
    evidence = [docs.Evidence("gpu_health", "fail", NOW, "7 of 8 GPUs", "drain_and_service",
                              ({"name": "gpu_count", "status": "fail", "code": "GPU_MISSING", "serial": "165"},
                               {"name": "ecc", "status": "pass", "gpu_serials": ["999"]}),
                              {"board_serial_numbers": ["1651", "1652"], "tflops": 900}, "NVIDIA H200"),
                docs.Evidence("dl_unit", "pass", NOW - D, gpu_model="NVIDIA H100")]
    key = docs.drain_key("gpu-001", [("gpu_health", NOW)])
    doc = docs.document(docs.DRAIN_AND_SERVICE, key, "gpu-001", action="drain_and_service", reason="r",
                        codes=["gpu_health: gpu_count"], evidence=evidence, history=[], history_url=None, now=NOW)
    body = json.loads(doc.payload())
    assert body["serial_numbers"] == ["165", "1651", "1652", "999"] and body["model"] == "NVIDIA H200"
    assert [c["code"] for c in body["evidence"][0]["failed_checks"]] == ["GPU_MISSING"] and len(body["evidence"]) == 1
    assert key == "drain_and_service/gpu-001/gpu_health@2026-11-28T10:00:00+00:00" and body["idempotency_key"] == key
    assert docs.signature(doc.payload(), "s") == docs.signature(doc.payload(), "s") != docs.signature(doc.payload(), "t")
    with pytest.raises(ValueError, match="hand-off kind 'rma' is not one of repeat_offender, drain_and_service"):
        docs.document("rma", key, "gpu-001", action="x", reason="r", codes=[], evidence=[], history=[],
                      history_url=None, now=NOW)
