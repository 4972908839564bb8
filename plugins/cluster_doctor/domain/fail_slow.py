"""When a node that passes its floors is slow: the rule the DAG and the simulator both apply.

A degraded GPU, link or HBM stack passes every fixed floor yet paces every synchronous job it joins. Two
kinds of evidence say "slow", neither a fail by itself:

* a **probe flag**: a speed-probe metric of the health sweep judged low against the fleet of its GPU model
  (``fleet_verdicts``' straggler or drift verdict) in one sweep;
* a **signal flag**: a passive speed signal read while user jobs ran (throttle reasons, a clock under
  load, a link trained below its rate or width).

A third kind, a **bundle verdict**: a straggler/drift verdict on the last attempt of a bundle suite that
measures speed (dl_unit, nccl_loopback) within the window.

One flag makes the node **suspect** (retested soon, shown with its evidence); a flagged probe that leaves the
node short of failing also makes it a suspect in the signals' sense (``probe_suspect``: its bundle first when
it is free, reservation may hold it), as the simulator models it. It becomes **failing** with
code ``SLOW`` when the last two probe sweeps were both flagged, or the last probe and a signal within the
window agree, or the last probe and a bundle verdict; two probes, or a probe and a bundle verdict, must be at
least the confirmation spacing apart (setting ``slow_confirm_spacing_hours``): a transient slowness
(congestion, a noisy neighbour) lasts minutes to an hour or so and lowers every measurement taken inside it,
so one noisy sweep, one bundle run inside the same episode or one transient signal never fails a node, two
independent sightings do.

The probe is scheduled so its cost stays small (``probe_due``): on a node that ran user jobs since its
last probe, at most every ``min_interval``, and at least every ``max_age`` on an idle one; a suspect's
confirming probe once the spacing has passed since its last probe.

The functions' spacing defaults to none (zero): the product (``store.fail_slow``) and the simulator always
pass the setting.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Sequence

SLOW = "SLOW"  # the failure code of a node judged slow

# The speed probe's figures, one set for every layer: the suite that measures them (include/suites/dl/probe.py
# keeps its own copy, since the suites ship without the plugin; a test holds the two equal), the per-model floors
# of include/suites/baselines.yaml, the fleet verdicts, the suite catalog's key metrics, the node page's plots and
# the docs. Per GPU the suite records ``<figure>.<device>`` and judges it against the model's ``<figure>`` floor;
# the slowest GPU's ``<figure>_min`` is the summary figure the fleet judges.
PROBE_TEST = "gpu_health"
PROBE_FIGURES: dict[str, str] = {"probe_gemm_tflops": "TFLOPS", "probe_hbm_gbps": "GB/s"}  # figure: unit
PROBE_METRICS: tuple[str, ...] = tuple(f"{figure}_min" for figure in PROBE_FIGURES)


class SlowState(enum.StrEnum):
    OK = "ok"
    SUSPECT = "suspect"
    FAILING = "failing"


@dataclasses.dataclass(frozen=True)
class ProbeOutcome:
    """One sweep's speed probe on a node: when, and whether any of its metrics was flagged low."""

    at: dt.datetime
    flagged: bool


def slow_state(probes: Sequence[ProbeOutcome], signal_flagged: bool, *,
               bundle_verdicts: Sequence[dt.datetime] = (),
               min_spacing: dt.timedelta = dt.timedelta(0)) -> SlowState:
    """The node's state from its probe outcomes (any order), whether a speed signal flagged it within the
    window, and when the bundle suites' flagged attempts ended (``bundle_verdicts``: a straggler/drift verdict
    on dl_unit's or nccl_loopback's last attempt within the window): failing on two flagged probes in a row,
    or the last probe flagged and a bundle verdict, at least ``min_spacing`` apart (a transient slowness,
    congestion or a noisy neighbour, lasts minutes to an hour and lowers every measurement inside it, so
    two sightings hours apart mean a lasting one), or the last probe and a signal together."""
    ordered = sorted(probes, key=lambda p: p.at)
    last = ordered[-1].flagged if ordered else False
    before = (len(ordered) >= 2 and ordered[-2].flagged
              and ordered[-1].at - ordered[-2].at >= min_spacing)
    bundle = bool(ordered) and any(abs(ordered[-1].at - at) >= min_spacing for at in bundle_verdicts)
    if last and (before or signal_flagged or bundle):
        return SlowState.FAILING
    if last or signal_flagged or bundle_verdicts:
        return SlowState.SUSPECT
    return SlowState.OK


def probe_suspect(flagged: bool, state: SlowState) -> bool:
    """Whether the probe that just ran makes its node a suspect for planning and reservation (a
    ``node_suspicions`` row the product writes, ``cluster.mark_suspect`` in the simulator): it was flagged and
    the node, judged with it (``state``: ``slow_state`` after it), is not failing (a failing node is
    quarantined: no suspicion to plan)."""
    return flagged and state != SlowState.FAILING


def probe_due(now: dt.datetime, last_probe: dt.datetime | None, *, busy_since: bool,
              min_interval: dt.timedelta, max_age: dt.timedelta, suspect: bool = False,
              confirm_after: dt.timedelta = dt.timedelta(0)) -> bool:
    """Whether a sweep probes a node's speed now: never probed; suspect and ``confirm_after`` past the last
    probe (the second sighting decides, spaced so a transient is over); loaded by user jobs since the last
    probe and at least ``min_interval`` since it; or ``max_age`` old."""
    if last_probe is None:
        return True
    age = now - last_probe
    if suspect:
        return age >= confirm_after
    if age >= max_age:
        return True
    return busy_since and age >= min_interval
