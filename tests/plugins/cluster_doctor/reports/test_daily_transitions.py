"""The daily report counts the day's transitions and names the repeat offenders at its end, with their action,
replace."""

import datetime as dt

from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.transitions import Transition
from cluster_doctor.reports import daily
from cluster_doctor.store import inventory, transitions
from cluster_doctor.store.inventory import SeenNode


def test_the_report_counts_transitions_and_names_repeat_offenders(store):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    day = (now - dt.timedelta(days=1)).date()  # a whole past day
    at = lambda h: dt.datetime.combine(day, dt.time(h), dt.UTC)  # noqa: E731
    inventory.record_discovery(store.connect, [SeenNode(n, 8, "H100", inventory.FREE) for n in ("gpu-001", "gpu-002")],
                               seen_at=at(1), complete=True)
    transitions.record(store.connect, [
        Transition("gpu-001", life.QUARANTINED, at(2), "gpu_health: gpu_count (drain_and_service)"),
        Transition("gpu-001", life.REPAIRED, at(4), "rebooted while quarantined"),
        Transition("gpu-001", life.RELEASED, at(5), "passes every enabled test again"),
        Transition("gpu-002", life.QUARANTINED, at(6), "gpu_health: gpu_count (drain_and_service)"),
        Transition("gpu-002", life.REPEAT_OFFENDER, at(6), "quarantined 3 times within 30 days"),
        Transition("gpu-001", life.QUARANTINED, now, "the next day: not this report's")])
    data = daily.build(store, day, tests=["gpu_health"], staleness_days=7, now=now)
    assert data["transitions"]["counts"] == {"quarantined": 2, "repaired": 1, "accepted": 0, "released": 1,
                                             "repeat_offender": 1, "gated": 0}
    assert [o["node_name"] for o in data["repeat_offenders"]] == ["gpu-002"]
    text = daily.render_markdown(data)
    assert "quarantined 2, repaired 1, accepted 0, released 1, repeat offender 1, gated 0 (5 in all)" in text
    assert f"- gpu-002 repeat offender since {at(6):%Y-%m-%d %H:%M} UTC (quarantined 3 times within 30 days): " \
           "action replace" in text
    assert f"gpu-001 {at(4):%Y-%m-%d %H:%M} UTC repaired: rebooted while quarantined" in text
    assert "Repeat offenders" in daily.render_html(data)
