import json

import pytest
from cluster_doctor.domain.config import InvalidSettings, Settings


def test_defaults_match_the_design_documents():
    s = Settings()
    assert s.staleness_days == 7 and s.failed_retest_hours == 6
    assert s.pool == "gpu_validation" and s.pool_slots == 2
    assert s.pending_timeout_s == 20 * 60 and s.availability_check_s == 5 * 60 and s.max_queue_s == 30 * 60
    assert s.dagrun_timeout_s < 3600
    assert set(s.tests) == {"dl_unit", "nccl_loopback", "storage_fio", "gpu_health"}
    assert s.gpu_resource == "nvidia.com/gpu"


def test_precedence_env_then_variable_then_overrides():
    env = {"CLUSTER_DOCTOR_STALENESS_DAYS": "3", "CLUSTER_DOCTOR_NAMESPACE": "from-env",
           "CLUSTER_DOCTOR_MAX_PAIRS_PER_RUN": "5"}
    s = Settings.load(env=env, variable=json.dumps({"namespace": "from-variable"}), overrides={"max_pairs_per_run": 9})
    assert (s.staleness_days, s.namespace, s.max_pairs_per_run) == (3.0, "from-variable", 9)


def test_env_lists_and_objects():
    s = Settings.load(env={"CLUSTER_DOCTOR_TESTS": "dl_unit, gpu_health",
                           "CLUSTER_DOCTOR_POD_ENV": '{"NCCL_IB_HCA": "mlx5_0,mlx5_1"}'})
    assert s.tests == ["dl_unit", "gpu_health"] and s.pod_env == {"NCCL_IB_HCA": "mlx5_0,mlx5_1"}


@pytest.mark.parametrize("kwargs, message", [
    ({"env": {"CLUSTER_DOCTOR_STALENESS_DAYS": "soon"}}, "CLUSTER_DOCTOR_STALENESS_DAYS"),
    ({"env": {"CLUSTER_DOCTOR_POD_ENV": "[1]"}}, "CLUSTER_DOCTOR_POD_ENV"),
    ({"variable": "{not json"}, "cluster_doctor_settings is not valid JSON"),
    ({"variable": {"stalenes_days": 1}}, "unknown setting"),
    ({"overrides": {"pending_timeout_s": 0}}, "pending_timeout_s"),
    ({"overrides": {"failed_retest_hours": -1}}, "failed_retest_hours"),
    ({"overrides": {"suite_device": "tpu"}}, "suite_device"),
    ({"overrides": {"node_selector": "gpu=yes,,"}}, "node_selector"),
    ({"overrides": {"pvc": "results/../x"}}, "setting pvc: 'results/../x' is not a PersistentVolumeClaim name"),
    ({"overrides": {"namespace": "Cluster_Doctor"}}, "setting namespace: 'Cluster_Doctor' is not a Kubernetes"),
])
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(InvalidSettings, match=message):
        Settings.load(env=kwargs.get("env", {}), variable=kwargs.get("variable"), overrides=kwargs.get("overrides"))


def test_label_selectors_accepted():
    for selector in ["nvidia.com/gpu.present=true", "pool in (a,b),!drain", "tier!=cpu"]:
        assert Settings(node_selector=selector).node_selector == selector


def test_every_setting_is_documented():
    for name, _default, doc in Settings.docs():
        assert doc and len(doc) > 10, name


# ------------------------------------------------------------------ what runs on GPU nodes
@pytest.mark.parametrize("name, value", [
    ("pod_template_file", "/tmp/evil.yaml"), ("suites_dir", "/tmp/evil"), ("service_account", "default"),
    ("pod_capabilities", ["SYS_ADMIN"]), ("pod_env", {"LD_PRELOAD": "/data/x.so"}),
    ("pod_resources", {"hostdev/all": 1}), ("priority_class", "system-node-critical"),
    ("allowed_images", ["evil/image:1"]),
])
def test_the_variable_cannot_change_what_runs_on_gpu_nodes(name, value):
    for source in ("variable", "overrides"):
        with pytest.raises(InvalidSettings, match=f"{name} can only be set in the deployment environment "
                                                  f"\\(CLUSTER_DOCTOR_{name.upper()}\\), not from the UI"):
            Settings.load(env={}, **{source: {name: value}})


def test_the_environment_sets_them():
    s = Settings.load(env={"CLUSTER_DOCTOR_POD_CAPABILITIES": "[]", "CLUSTER_DOCTOR_SERVICE_ACCOUNT": "sa",
                           "CLUSTER_DOCTOR_POD_ENV": '{"NCCL_IB_HCA": "mlx5"}'})
    assert s.pod_capabilities == [] and s.service_account == "sa" and s.pod_env == {"NCCL_IB_HCA": "mlx5"}
    assert Settings.load(env={"CLUSTER_DOCTOR_POD_CAPABILITIES": "IPC_LOCK"}).pod_capabilities == ["IPC_LOCK"]
    assert Settings().pod_capabilities == ["IPC_LOCK", "SYSLOG"]


def test_the_variable_chooses_images_only_among_those_the_environment_allows():
    env = {"CLUSTER_DOCTOR_IMAGE": "reg/validation:1", "CLUSTER_DOCTOR_ALLOWED_IMAGES": "reg/validation:2",
           "CLUSTER_DOCTOR_SUITE_IMAGES": '{"nccl_loopback": "reg/nccl:1"}'}
    s = Settings.load(env=env, variable={"image": "reg/validation:2", "suite_images": {"dl_unit": "reg/nccl:1"}})
    assert s.image == "reg/validation:2" and s.suite_images == {"dl_unit": "reg/nccl:1"}
    assert Settings.load(env=env, variable={"image": "reg/validation:1"}).image == "reg/validation:1"
    with pytest.raises(InvalidSettings, match="image 'evil/miner:latest' is not an allowed image"):
        Settings.load(env=env, variable={"image": "evil/miner:latest"})
    with pytest.raises(InvalidSettings, match="suite_images.gpu_health 'evil:1' is not an allowed image"):
        Settings.load(env=env, variable={"suite_images": {"gpu_health": "evil:1"}})
    with pytest.raises(InvalidSettings, match="is not an allowed image"):
        Settings.load(env={}, overrides={"image": "reg/validation:2"})


def test_the_ui_still_tunes_scheduling():
    s = Settings.load(env={}, variable={"staleness_days": 3, "tolerations": [], "max_pairs_per_run": 4})
    assert (s.staleness_days, s.tolerations, s.max_pairs_per_run) == (3, [], 4)


@pytest.mark.parametrize("caps", [["CAP_SYS_ADMIN"], ["ALL"], ["ipc_lock"], [""], "IPC_LOCK"])
def test_bad_capability_names_are_refused(caps):
    with pytest.raises(InvalidSettings, match="pod_capabilities"):
        Settings(pod_capabilities=caps)


def test_run_time_settings_that_parsing_fixed_are_refused_with_the_variable_to_fix():
    parsed = Settings()
    Settings(suite_timeouts_s={"dl_unit": 1400}).check_parse_time(parsed)  # 1200 + 1400 + 600 < 3300
    with pytest.raises(InvalidSettings, match=r"setting pool: 'other' from the Airflow Variable cannot take "
                                              r"effect.*CLUSTER_DOCTOR_POOL"):
        Settings(pool="other").check_parse_time(parsed)
    with pytest.raises(InvalidSettings, match="setting dagrun_timeout_s"):
        Settings(dagrun_timeout_s=9000).check_parse_time(parsed)
    with pytest.raises(InvalidSettings, match=r"dl_unit needs up to 3800 s \(pending 1200 \+ budget 2000 \+ "
                                              r"margin 600\), longer than the DagRun timeout of 3300 s"):
        Settings(suite_timeouts_s={"dl_unit": 2000}).check_parse_time(parsed)
    # a suite that is not enabled does not count
    Settings(tests=["gpu_health"], suite_timeouts_s={"dl_unit": 9000}).check_parse_time(parsed)


def test_the_task_timeout_and_the_pod_deadline_come_from_the_same_numbers():
    s = Settings(pending_timeout_s=100, suite_timeouts_s={"gpu_health": 50}, task_margin_s=7)
    assert s.pod_deadline_s("gpu_health") == 150 and s.task_timeout_s("gpu_health") == 157


# ------------------------------------------------------------------ the model and its sources
def test_the_constructor_reads_nothing_but_its_arguments_and_load_reads_the_environment(monkeypatch):
    monkeypatch.setenv("CLUSTER_DOCTOR_STALENESS_DAYS", "3")
    assert Settings().staleness_days == 7.0  # payloads read back from XCom must not pick up a worker's env
    assert Settings.load().staleness_days == 3.0


def test_settings_are_immutable_and_replace_validates():
    s = Settings()
    with pytest.raises(ValueError, match="frozen"):
        s.staleness_days = 1
    assert s.replace(staleness_days=2).staleness_days == 2 and s.staleness_days == 7
    with pytest.raises(InvalidSettings, match="setting staleness_days"):
        s.replace(staleness_days=0)
    with pytest.raises(InvalidSettings, match="unknown setting stalenes_days"):
        Settings(stalenes_days=1)


def test_every_bad_value_is_named_on_one_line_with_where_it_came_from():
    with pytest.raises(InvalidSettings) as raised:
        Settings.load(env={"CLUSTER_DOCTOR_MAX_QUEUE_S": "-5"},
                      variable={"staleness_days": True, "suite_timeouts_s": {"dl_unit": "long"}})
    message = str(raised.value)
    assert "\n" not in message
    assert "environment variable CLUSTER_DOCTOR_MAX_QUEUE_S: setting max_queue_s: Input should be greater than 0" \
        in message
    assert "Airflow Variable cluster_doctor_settings: setting staleness_days: must be a number, not true/false" \
        in message
    assert "setting suite_timeouts_s.dl_unit: Input should be a valid integer" in message
    with pytest.raises(InvalidSettings, match=r"environment variable CLUSTER_DOCTOR_POD_ENV: setting pod_env: not valid JSON"):
        Settings.load(env={"CLUSTER_DOCTOR_POD_ENV": "{NCCL_IB_HCA: mlx5}"})


def test_a_dict_from_the_variable_replaces_the_environments_whole():
    env = {"CLUSTER_DOCTOR_SUITE_TIMEOUTS_S": '{"gpu_health": 100, "dl_unit": 200}'}
    assert Settings.load(env=env).suite_timeouts_s == {"gpu_health": 100, "dl_unit": 200}
    assert Settings.load(env=env, variable={"suite_timeouts_s": {"dl_unit": 300}}).suite_timeouts_s == {"dl_unit": 300}


def test_documentation_and_where_each_setting_may_be_set_come_from_the_model():
    from cluster_doctor.domain.config import DEPLOYMENT_ONLY, PARSE_TIME

    assert DEPLOYMENT_ONLY == {"pod_template_file", "suites_dir", "service_account", "pod_capabilities", "pod_env",
                               "pod_resources", "priority_class", "allowed_images", "spool_dir",
                               "pod_allowed_host_fields", "node_pool_expectations"}
    assert PARSE_TIME == ("fast_path_minutes", "pool", "dagrun_timeout_s", "schedule")  # read when the DAG files are parsed
    docs = {name: (default, doc) for name, default, doc in Settings.docs()}
    assert docs["tests"][0] == ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]
    assert docs["tests"][0] is not Settings().tests  # defaults are copies, never shared
    assert list(docs) == Settings.field_names() == list(Settings().to_dict())


def test_the_schedule_is_hourly_unless_the_deployment_sets_a_cron_expression():
    assert Settings().schedule == "@hourly"
    assert Settings(schedule="*/2 * * * *").schedule == "*/2 * * * *"
    with pytest.raises(InvalidSettings, match=r"'every hour' is not a cron expression like '0 \* \* \* \*'"):
        Settings(schedule="every hour")
    with pytest.raises(InvalidSettings, match="setting schedule"):
        Settings(schedule="@daily").check_parse_time(Settings())


# ------------------------------------------------------------------ the policies, parsed once
def test_each_policy_setting_is_held_parsed_from_the_same_json_as_before():
    from cluster_doctor.domain.acceptance import AcceptancePolicy
    from cluster_doctor.domain.conditions import ConditionPolicy
    from cluster_doctor.domain.fleet_verdicts import BaselinePolicy
    from cluster_doctor.domain.quarantine import QuarantinePolicy
    from cluster_doctor.domain.reservation import ReservationPolicy

    env = {"CLUSTER_DOCTOR_RESERVATION": '{"enabled": true, "max_nodes": 5}',
           "CLUSTER_DOCTOR_ACCEPTANCE": '{"enabled": true, "changes": ["reboot"]}'}
    s = Settings.load(env=env, variable={"quarantine": {"enabled": True, "max_nodes": 3},
                                         "node_conditions": {"window_hours": 12}, "fleet_verdicts": {"k_mad": 4}})
    assert isinstance(s.reservation, ReservationPolicy) and (s.reservation.enabled, s.reservation.max_nodes) == (True, 5)
    assert isinstance(s.acceptance, AcceptancePolicy) and s.acceptance.changes == ("reboot",)
    assert isinstance(s.quarantine, QuarantinePolicy) and s.quarantine.max_nodes == 3
    assert isinstance(s.node_conditions, ConditionPolicy) and s.node_conditions.window_hours == 12
    assert isinstance(s.fleet_verdicts, BaselinePolicy) and s.fleet_verdicts.k_mad == 4
    assert Settings().reservation == ReservationPolicy() and Settings().fleet_verdicts.enabled is True


def test_a_policy_travels_as_the_keys_it_was_given_and_reads_back_the_same():
    s = Settings(reservation={"enabled": True, "max_nodes": 5}, acceptance={"changes": ["new", "new"]})
    payload = s.to_dict()
    assert payload["reservation"] == {"enabled": True, "max_nodes": 5}
    assert payload["acceptance"] == {"changes": ["new"]} and payload["quarantine"] == {}
    assert Settings(**json.loads(json.dumps(payload))) == s
    assert s.replace(reservation=s.reservation.model_copy(update={"dry_run": True})).to_dict()["reservation"] == {
        "enabled": True, "max_nodes": 5, "dry_run": True}


@pytest.mark.parametrize("values, message", [
    ({"reservation": {"max_nodes": 0}}, "setting reservation.max_nodes: must be an integer >= 1, got 0"),
    ({"reservation": {"lead": 3}}, "setting reservation: unknown key(s) lead (known: "),
    ({"reservation": 5}, "setting reservation: must be a JSON object, got 5"),
    ({"acceptance": {"enabled": "yes"}}, "setting acceptance.enabled: expected true or false, got 'yes'"),
    ({"node_conditions": {"max_share": 2}}, "setting node_conditions.max_share: must be a share in (0, 1], got 2"),
    ({"fleet_verdicts": {"drift_samples": 2, "drift_min_samples": 3}},
     "setting fleet_verdicts.drift_min_samples must not exceed drift_samples"),
])
def test_a_bad_policy_key_is_named_as_the_setting_wrote_it(values, message):
    with pytest.raises(InvalidSettings) as raised:
        Settings(**values)
    assert message in str(raised.value)


def test_an_enabled_gate_adds_its_toleration_once_from_json_or_a_parsed_policy():
    from cluster_doctor.domain.acceptance import AcceptancePolicy
    from cluster_doctor.domain.reservation import TOLERATION

    keys = [t["key"] for t in Settings(reservation={"enabled": True}).tolerations]
    assert keys == ["nvidia.com/gpu", TOLERATION["key"]]
    gate = AcceptancePolicy(enabled=True, taint_key="node.example.com/startup")
    from_policy, from_json = Settings(acceptance=gate), Settings(acceptance=gate.given())
    assert from_policy.tolerations == from_json.tolerations
    assert [t["key"] for t in from_policy.tolerations] == ["nvidia.com/gpu", "node.example.com/startup"]
    assert from_policy.replace().tolerations == from_policy.tolerations  # read back: not added twice
