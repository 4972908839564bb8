"""The speed probe's figures have one set of names (domain.fail_slow.PROBE_FIGURES / PROBE_METRICS) in every layer
that names them: the suite that measures them, the models' floors and failure codes it judges them by, the fleet
verdicts, the suite catalog, the node page's plots, the store's fail-slow reads and the documents that list them."""

from __future__ import annotations

from pathlib import Path

import yaml
from cluster_doctor.domain import fail_slow, fleet_verdicts, suites
from cluster_doctor.reports import charts
from cluster_doctor.store import fail_slow as stored_fail_slow
from cluster_doctor_suites.dl import probe

ROOT = Path(__file__).resolve().parents[3]
FIGURES = tuple(fail_slow.PROBE_FIGURES)


def test_the_suite_measures_and_summarises_the_figures_the_plugin_judges():
    assert (probe.GEMM_METRIC, probe.HBM_METRIC) == FIGURES
    assert probe.METRICS == fail_slow.PROBE_METRICS == tuple(f"{f}_min" for f in FIGURES)


def test_every_layer_of_the_plugin_names_the_same_probe_metrics():
    assert fleet_verdicts.JUDGED_METRICS[fail_slow.PROBE_TEST] == fail_slow.PROBE_METRICS
    catalog = suites.CATALOG[fail_slow.PROBE_TEST].key_metrics
    assert [m for m in catalog if m.startswith(probe.PREFIX)] == list(fail_slow.PROBE_METRICS)
    assert (stored_fail_slow.PROBE_TEST, stored_fail_slow.PROBE_METRICS) == (fail_slow.PROBE_TEST,
                                                                             fail_slow.PROBE_METRICS)
    plotted = {m: unit for m, (_label, unit) in charts.METRIC_LABELS.items() if m.startswith(probe.PREFIX)}
    assert plotted == {f"{f}_min": unit for f, unit in fail_slow.PROBE_FIGURES.items()}
    assert charts.PLOTTED_METRICS[fail_slow.PROBE_TEST] == fail_slow.PROBE_METRICS


def test_each_models_probe_floors_and_the_probe_codes_name_the_same_figures():
    models = yaml.safe_load((ROOT / "include/suites/baselines.yaml").read_text())["models"]
    floors = {name: sorted(m for m in (model.get("metrics") or {}) if m.startswith(probe.PREFIX))
              for name, model in models.items()}
    with_probe = {name: found for name, found in floors.items() if found}
    assert with_probe and all(found == sorted(FIGURES) for found in with_probe.values()), with_probe
    codes = yaml.safe_load((ROOT / "include/suites/codes.yaml").read_text())["codes"]
    assert codes["PROBE_GEMM_SLOW"]["checks"] == [FIGURES[0], f"{FIGURES[0]}_node_total"]
    assert codes["PROBE_HBM_SLOW"]["checks"] == [FIGURES[1], f"{FIGURES[1]}_node_total"]


def test_the_documents_that_list_the_probe_metrics_list_these():
    for doc in ("docs/signals.md", "include/suites/README.md"):
        text = (ROOT / doc).read_text()
        assert all(m in text for m in fail_slow.PROBE_METRICS), doc
        named = {w.strip("`,.()") for w in text.split() if w.strip("`,.()").startswith(probe.PREFIX + "gemm")
                 or w.strip("`,.()").startswith(probe.PREFIX + "hbm")}
        assert named <= {*FIGURES, *fail_slow.PROBE_METRICS, *(f"{f}*" for f in FIGURES)}, (doc, named)
