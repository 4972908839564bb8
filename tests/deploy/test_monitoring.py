"""The monitoring files (deploy/monitoring, include/k8s/monitoring): the alert rules pass `promtool check
rules` and their unit tests (`promtool test rules`: each alert fires on the series that should fire it and
stays silent on its healthy neighbours), the PrometheusRule holds the same groups, the exporter's
manifests fit together, and every query of the rules, their tests and the Grafana dashboard names only
series and labels a real scrape of the seeded fleet has."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import re
import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO
from tests.conftest import kubectl as find_kubectl

MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "cluster-doctor.rules.yaml"
RULE_TESTS = MONITORING / "cluster-doctor.rules.test.yaml"
DASHBOARD = MONITORING / "cluster-doctor.dashboard.json"
K8S = REPO / "include" / "k8s" / "monitoring"
# What PromQL itself names (functions, operators, keywords); any other identifier is a series name.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "quantile", "topk", "bottomk", "stddev", "count_values", "group",
    "absent", "absent_over_time", "delta", "deriv", "increase", "rate", "irate", "time", "scalar", "vector",
    "max_over_time", "min_over_time", "avg_over_time", "last_over_time", "clamp_min", "clamp_max", "label_replace",
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right",
    "Inf", "NaN",
}
SCRAPE_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=MONITORING)


def rules() -> dict:
    return yaml.safe_load(RULES.read_text())


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_targets() -> list[dict]:
    return [t for p in dashboard()["panels"] for t in p.get("targets", [])]


# ---------------------------------------------------------------------------------------- the rules
@pytest.mark.requires_tool("promtool")
def test_the_rules_pass_promtool_check_and_their_unit_tests():
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.mark.requires_tool("promtool")
def test_the_unit_tests_fail_when_a_rule_fires_on_the_wrong_series(tmp_path):
    """The tests can fail: with a failing node's rule widened to passes, `promtool test rules` says so."""
    broken = RULES.read_text().replace('status=~"fail|error"} == 1', 'status=~"fail|error|pass"} == 1')
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    tested = subprocess.run(["promtool", "test", "rules", RULE_TESTS.name], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert tested.returncode != 0 and "GPUNodeFailingValidation" in tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not():
    alerts = {r["alert"] for g in rules()["groups"] for r in g["rules"]}
    cases = [case for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in t.get("alert_rule_test", [])]
    assert {c["alertname"] for c in cases if c.get("exp_alerts")} == alerts
    assert {c["alertname"] for c in cases if not c.get("exp_alerts")} == alerts


def test_the_prometheus_rule_holds_the_rule_files_groups():
    docs = [d for d in yaml.safe_load_all((K8S / "prometheusrule.yaml").read_text()) if d]
    assert [d["kind"] for d in docs] == ["PrometheusRule"]
    assert docs[0]["apiVersion"] == "monitoring.coreos.com/v1"
    assert docs[0]["spec"]["groups"] == rules()["groups"], "regenerate it: python tools/prometheus_rule.py"


# ---------------------------------------------------------------------------------------- the manifests
def test_the_monitoring_kustomization_builds_and_its_pieces_fit_together():
    built = subprocess.run([find_kubectl(), "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(built.stdout) if d}
    assert set(docs) == {"Service", "Deployment", "ServiceMonitor", "PrometheusRule"}
    assert {d["metadata"]["namespace"] for d in docs.values()} == {"cluster-doctor"}
    for kind in ("Service", "Deployment"):
        kubernetes_validate.validate(docs[kind], "1.31", strict=True)
    service, deployment, monitor = docs["Service"], docs["Deployment"], docs["ServiceMonitor"]
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["path"] == "/metrics"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["cluster-doctor", "metrics"] and "9108" in container["command"]
    token_secret = endpoint["authorization"]["credentials"]["name"]
    mounted = {v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    assert token_secret in mounted  # Prometheus sends the token the exporter reads from its file
    assert "CLUSTER_DOCTOR_METRICS_TOKEN_FILE" in {e["name"] for e in container["env"]}


# ---------------------------------------------------------------------------------------- the dashboard
def test_the_dashboard_is_importable_as_is():
    dash = dashboard()
    assert dash["id"] is None and dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        grid = p["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, p["title"]
        for t in p["targets"]:
            assert t["expr"] and t["refId"] and t["datasource"]["uid"] == "${datasource}", p["title"]


@pytest.mark.requires_tool("promtool")
def test_every_dashboard_query_is_valid_promql(tmp_path):
    """promtool parses each query (as a recording rule of a scratch rule file)."""
    records = [{"record": f"dashboard:query_{i}", "expr": t["expr"]} for i, t in enumerate(dashboard_targets())]
    (tmp_path / "queries.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    checked = subprocess.run(["promtool", "check", "rules", "queries.yaml"], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def names_in(expr: str) -> tuple[set[str], set[str]]:
    """(series names, label names) a PromQL expression refers to."""
    labels = set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"", expr))
    for clause in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels |= {name.strip() for name in clause.split(",") if name.strip()}
    bare = re.sub(r"\"[^\"]*\"|\[[^\]]*\]|\{[^}]*\}", " ", expr)
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    words = set(re.findall(r"(?<![\w.$])([a-zA-Z_:][\w:]*)", bare))
    return {w for w in words if w not in PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]", w)}, labels


@pytest.fixture(scope="module")
def exposed(pg_admin_dsn, template_db, tmp_path_factory):
    """(series names, label names) of a real scrape of the seeded fleet, its spool and a failure with codes."""
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.domain.signals import SPEED, Evidence
    from cluster_doctor.reports import metrics
    from cluster_doctor.store import spool, suspects
    from cluster_doctor.store.history import ResultStore
    from prometheus_client.parser import text_string_to_metric_families

    from tests.conftest import _fresh_database
    from tests.support import fleet_seed as seed

    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        store = ResultStore(dsn)
        seed.small_fleet(store)
        store.record([seed.attempt("gpu-002", "gpu_health", "fail", seed.NOW - dt.timedelta(minutes=5), checks=[
            {"name": "xid_events", "status": "fail", "code": "XID_79", "action": "reboot"}])])
        # a speed signal: the node is slow-suspect, so the slow-node series carry samples
        seen = seed.NOW - dt.timedelta(minutes=10)
        suspects.record(store.connect, [Evidence("gpu-003", SPEED, "clock_event_0x08/gpu1@x",
                                                 "GPU 1: hardware slowdown", seen)], seen_at=seen)
        box = spool.Spool(tmp_path_factory.mktemp("spool"))
        registry = metrics.make_registry(metrics.ClusterDoctorCollector(
            lambda s: dsn, Settings, clock=lambda: seed.NOW, spool_provider=lambda s: box.status()))
        body, _ = metrics.render(registry)
    series, labels = set(), set(SCRAPE_LABELS)
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            series.add(sample.name)
            labels |= set(sample.labels)
    assert "cluster_doctor_validation_failure_code" in series and "cluster_doctor_spooled_attempts" in series
    assert "cluster_doctor_node_slow_since_timestamp_seconds" in series
    return series, labels


def test_the_dashboard_names_only_series_and_labels_the_exporter_exposes(exposed):
    series, labels = exposed
    for target in dashboard_targets():
        names, used = names_in(target["expr"])
        used |= set(re.findall(r"{{\s*(\w+)\s*}}", target.get("legendFormat", "")))  # the legend's labels
        assert names and names <= series, (target["expr"], names - series)
        assert used <= labels, (target["expr"], used - labels)


def test_the_rules_and_their_tests_name_only_series_and_labels_the_exporter_exposes(exposed):
    series, labels = exposed
    for rule in (r for g in rules()["groups"] for r in g["rules"]):
        names, used = names_in(rule["expr"])
        used |= {label for text in rule.get("annotations", {}).values() for label in re.findall(r"\$labels\.(\w+)", text)}
        assert names and names <= series, (rule["alert"], names - series)
        assert used <= labels, (rule["alert"], used - labels)
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for given in case["input_series"]:
            names, used = names_in(given["series"])
            assert names <= series | {"up"}, (case["name"], names - series)  # `up`: a scrape without ours
            assert used <= labels, (case["name"], used - labels)


def test_the_name_check_sees_a_series_or_label_the_exporter_lacks():
    assert names_in('sum by (node) (cluster_doctor_nope{tset="x"})') == ({"cluster_doctor_nope"}, {"node", "tset"})
    assert names_in("increase(cluster_doctor_a_total[7d]) / 60") == ({"cluster_doctor_a_total"}, set())


@pytest.mark.requires_tool("promtool")
def test_the_scrape_jobs_are_a_valid_prometheus_configuration(tmp_path):
    """promtool check config (the credentials files it checks for exist here, empty)."""
    text = (MONITORING / "prometheus-scrape.yaml").read_text()
    for path in set(re.findall(r"credentials_file: (\S+)", text)):
        local = tmp_path / pathlib.Path(path).name
        local.write_text("token\n")
        text = text.replace(path, str(local))
    (tmp_path / "prometheus.yml").write_text(text)
    checked = subprocess.run(["promtool", "check", "config", "prometheus.yml"], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    jobs = {j["job_name"] for j in yaml.safe_load(text)["scrape_configs"]}
    assert jobs == {"cluster-doctor-exporter", "cluster-doctor"}
