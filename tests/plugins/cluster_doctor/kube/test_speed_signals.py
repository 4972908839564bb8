"""Speed signals (fail-slow) read through Prometheus' query API from dcgm-exporter answers in their own
exposition format (fixtures/dcgm_exporter, SOURCES.md there): a local HTTP server answers the instant query
as a Prometheus that scraped that exporter would."""

from __future__ import annotations

import pytest
from cluster_doctor.domain import signals
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import discovery
from cluster_doctor.kube import signals as kube_signals

from tests.clock import now as clock_now
from tests.support.emulator import FAST
from tests.support.dcgm_exporter import FIXTURES, NODE, Prometheus, exposition, queries, serving

pytestmark = pytest.mark.emulator(settings=FAST)

@pytest.fixture
def prometheus():
    with serving() as url:
        yield url


@pytest.fixture
def emu(emulator):
    emulator.reset()
    emulator.add_gpu_node(NODE, 4)
    return emulator


def read(emu, prometheus, fixture: str, **settings) -> kube_signals.Reading:
    Prometheus.scraped = exposition((FIXTURES / fixture).read_text())
    s = Settings(prometheus_url=prometheus, signal_event_reasons=[], signal_pod_failure_patterns=[], **settings)
    return kube_signals.read(emu.core_v1(), s, discovery.discover(emu.core_v1(), s), now=clock_now())


def speed(reading) -> list[tuple[str, str]]:
    return [(e.node_name, e.text) for e in reading.evidence if e.source == signals.SPEED]


def test_a_healthy_node_under_load_gives_no_speed_evidence(emu, prometheus):
    reading = read(emu, prometheus, "metrics_v100x4_healthy_under_load.prom")
    assert reading.problems == [] and speed(reading) == []  # SW power cap (0x4) on GPU 1 is the workload's
    assert kube_signals.speed_query() in queries()  # one query for every speed field


def test_an_idle_node_is_not_slow_for_its_low_clocks_and_links(emu, prometheus):
    assert speed(read(emu, prometheus, "metrics_v100x4_idle.prom")) == []


def test_a_throttled_gpu_makes_its_node_suspect_under_the_fields_new_name(emu, prometheus):
    found = speed(read(emu, prometheus, "metrics_v100x4_gpu2_hw_thermal_slowdown.prom"))
    assert found == [
        (NODE, "GPU 2: hardware slowdown (clock event reasons 0x48, DCGM_FI_DEV_CLOCKS_EVENT_REASONS)"),
        (NODE, "GPU 2: hardware thermal slowdown (clock event reasons 0x48, DCGM_FI_DEV_CLOCKS_EVENT_REASONS)"),
        (NODE, "GPU 2: SM clock 765 MHz under load (100 % busy), below 80% of the SKU's 1530 MHz"),
        (NODE, "GPU 2: SM clock 765 MHz under load, 50 % below the median 1530 MHz of this node's other loaded GPUs"),
    ]


def test_a_link_trained_below_its_maximum_under_load(emu, prometheus):
    assert speed(read(emu, prometheus, "metrics_v100x4_pcie_downgraded.prom")) == [
        (NODE, "GPU 1: PCIe link width x8 under load, below its maximum x16"),
        (NODE, "GPU 3: PCIe link generation Gen1 under load, below its maximum Gen3"),
    ]


def test_speed_fields_are_not_read_when_switched_off(emu, prometheus):
    reading = read(emu, prometheus, "metrics_v100x4_gpu2_hw_thermal_slowdown.prom", signal_speed=False)
    assert speed(reading) == [] and kube_signals.speed_query() not in queries()


def test_every_speed_field_read_is_named_in_the_sources_with_its_dcgm_field_id():
    import re

    sources = (FIXTURES / "SOURCES.md").read_text()
    ids = {"DCGM_FI_DEV_SM_CLOCK": 100, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 112, "DCGM_FI_DEV_MAX_SM_CLOCK": 113,
           "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 235, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 236,
           "DCGM_FI_DEV_PCIE_LINK_GEN": 237, "DCGM_FI_DEV_PCIE_LINK_WIDTH": 238}
    for field in signals.SPEED_FIELDS:
        assert f"`{field}`" in sources, field
        if field in ids:
            assert re.search(rf"`{field}` {ids[field]}\b", sources), field
    assert "`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` the\n  deprecated alias" in sources  # the old name of field 112
    assert "`DCGM_FI_DEV_GPU_UTIL` gauge \"(in %)\"" in sources and "`DCGM_FI_DEV_SM_CLOCK` gauge \"(in MHz)\"" in sources
    # the fixtures answer with no DCGM field the reader does not know
    for prom in FIXTURES.glob("*.prom"):
        named = set(re.findall(r"^(DCGM_FI_[A-Z0-9_]+)\{", prom.read_text(), re.M))
        assert named <= set(signals.SPEED_FIELDS) | set(signals.DCGM_NAMES), (prom.name, named)
