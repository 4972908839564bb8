import json

import pytest

from cluster_doctor.config import InvalidSettings, Settings


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
