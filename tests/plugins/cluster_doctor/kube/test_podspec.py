import pytest
import yaml
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import InvalidNodeName
from cluster_doctor.kube import podspec

BASE = dict(node_name="gpu-017", test_name="nccl_loopback", gpu_count=8, gpu_model="NVIDIA-H100-80GB-HBM3",
            run_id="scheduled__2026-11-22T10:00:00+00:00", configmap="cluster-doctor-suites-0123456789abcdef",
            suite_version="sha256:0123456789abcdef")


def base_container(pod):
    return next(c for c in pod["spec"]["containers"] if c["name"] == "base")


def test_pod_is_pinned_by_required_node_affinity_not_node_name():
    pod = podspec.build_pod(Settings(), **BASE)
    spec = pod["spec"]
    assert "nodeName" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-017"]}]}]


def test_pod_hydration_from_settings():
    settings = Settings(namespace="val", image="registry/validation:1", pvc="shared-rwx", priority_class="low",
                        scheduler_name="volcano", pod_env={"NCCL_IB_HCA": "mlx5_0,mlx5_1"},
                        pod_resources={"rdma/rdma_shared_device_a": 1}, suite_device="cpu",
                        results_dir="/mnt/results", service_account="cd-validation", pod_labels={"team": "sre"})
    pod = podspec.build_pod(settings, **BASE)
    spec, container = pod["spec"], base_container(pod)
    assert pod["metadata"]["namespace"] == "val"
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "cluster-doctor"
    assert pod["metadata"]["labels"]["cluster-doctor.io/node"] == "gpu-017"
    assert pod["metadata"]["labels"]["cluster-doctor.io/test"] == "nccl_loopback"
    assert pod["metadata"]["labels"]["team"] == "sre"
    assert (spec["priorityClassName"], spec["schedulerName"], spec["serviceAccountName"]) == ("low", "volcano", "cd-validation")
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["tolerations"] == settings.tolerations
    assert spec["activeDeadlineSeconds"] == settings.pending_timeout_s + settings.suite_timeout("nccl_loopback")
    assert container["image"] == "registry/validation:1"
    assert container["command"] == ["python", "-m", "cluster_doctor_suites.nccl_loopback", "--device", "cpu"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    res = container["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "8"  # every GPU of the node
    assert res["limits"]["rdma/rdma_shared_device_a"] == "1"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert env["CLUSTER_DOCTOR_EXPECTED_GPUS"] == "0"  # CPU mode: the suites see no GPU
    assert env["CLUSTER_DOCTOR_SUITE_VERSION"] == "sha256:0123456789abcdef"
    assert env["CLUSTER_DOCTOR_GPU_MODEL"] == "NVIDIA-H100-80GB-HBM3"
    assert env["CLUSTER_DOCTOR_OUTPUT_DIR"] == "/mnt/results"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["results"]["mountPath"] == "/mnt/results/nccl_loopback/gpu-017"
    assert mounts["results"]["subPath"] == "nccl_loopback/gpu-017"
    assert mounts["suites"]["mountPath"] == "/opt/cluster-doctor" and mounts["suites"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["results"]["persistentVolumeClaim"]["claimName"] == "shared-rwx"
    assert volumes["suites"]["configMap"]["name"] == BASE["configmap"]


def test_per_suite_image_override():
    pod = podspec.build_pod(Settings(suite_images={"nccl_loopback": "x/nccl:2"}), **BASE)
    assert base_container(pod)["image"] == "x/nccl:2"


@pytest.mark.parametrize("node", ["GPU-1", "gpu-1; rm -rf /", "a" * 300, "gpu-1\nkind: Secret"])
def test_node_names_are_validated_before_reaching_the_spec(node):
    with pytest.raises(InvalidNodeName):
        podspec.build_pod(Settings(), **{**BASE, "node_name": node})


def test_unknown_suite_and_bad_gpu_count():
    with pytest.raises(ValueError, match="unknown suite"):
        podspec.build_pod(Settings(), **{**BASE, "test_name": "burn_in"})
    with pytest.raises(ValueError, match="gpu_count"):
        podspec.build_pod(Settings(), **{**BASE, "gpu_count": -1})


def test_long_values_become_valid_labels():
    long_node = "node-" + "x" * 70 + ".rack-12.datacenter.example.com"
    pod = podspec.build_pod(Settings(), **{**BASE, "node_name": long_node})
    value = pod["metadata"]["labels"]["cluster-doctor.io/node"]
    assert len(value) <= 63 and value != long_node
    assert pod["metadata"]["annotations"]["cluster-doctor.io/node"] == long_node
    assert len(podspec.pod_name_prefix(long_node, "dl_unit")) <= 50


def test_the_template_is_a_valid_pod_manifest_with_a_base_container():
    template = yaml.safe_load(podspec.DEFAULT_POD_TEMPLATE.read_text())
    assert template["kind"] == "Pod"
    assert base_container(template)["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_a_template_without_base_container_is_refused(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: main\n    image: x\n")
    with pytest.raises(ValueError, match="named 'base'"):
        podspec.build_pod(Settings(pod_template_file=str(path)), **BASE)


def test_gpu_mode_expects_every_gpu_of_the_node():
    pod = podspec.build_pod(Settings(), **BASE)
    env = {e["name"]: e.get("value") for e in base_container(pod)["env"]}
    assert env["CLUSTER_DOCTOR_EXPECTED_GPUS"] == "8" and env["CLUSTER_DOCTOR_DEVICE"] == "cuda"
    assert pod["spec"]["serviceAccountName"] == "cluster-doctor-validation"


def test_suite_code_is_projected_as_a_package():
    pod = podspec.build_pod(Settings(), **BASE, suite_files=["dl_unit.py", "__init__.py"])
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "suites")
    assert volume["configMap"]["items"] == [{"key": "__init__.py", "path": "cluster_doctor_suites/__init__.py"},
                                            {"key": "dl_unit.py", "path": "cluster_doctor_suites/dl_unit.py"}]


def test_suite_files_in_subfolders_map_back_from_flat_configmap_keys():
    pod = podspec.build_pod(Settings(), **BASE, suite_files=["checkers/xid.py", "checkers/__init__.py", "gpu_health.py"])
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "suites")
    assert volume["configMap"]["items"] == [
        {"key": "checkers____init__.py", "path": "cluster_doctor_suites/checkers/__init__.py"},
        {"key": "checkers__xid.py", "path": "cluster_doctor_suites/checkers/xid.py"},
        {"key": "gpu_health.py", "path": "cluster_doctor_suites/gpu_health.py"},
    ]


def test_a_node_pools_expectations_reach_its_pods_and_only_its_pods():
    """Setting node_pool_expectations, keyed by the GPU model discovery read: the pod's CLUSTER_DOCTOR_EXPECT,
    parsed by the suites exactly as the setting was checked."""
    from cluster_doctor_suites import baselines

    settings = Settings.load(env={
        "CLUSTER_DOCTOR_NODE_POOL_EXPECTATIONS": '{"NVIDIA-H100-80GB-HBM3": "hcas=8,nvlinks_per_gpu=18"}',
        "CLUSTER_DOCTOR_POD_ENV": '{"CLUSTER_DOCTOR_EXPECT": "hcas=4"}'})

    def expect(**kw):
        env = {e["name"]: e.get("value") for e in base_container(podspec.build_pod(settings, **{**BASE, **kw}))["env"]}
        return env.get("CLUSTER_DOCTOR_EXPECT")

    assert expect() == "hcas=8,nvlinks_per_gpu=18"  # the pool's own beats the fleet-wide pod_env
    assert baselines.parse_expect(expect()) == {"hcas": 8, "nvlinks_per_gpu": 18}
    assert expect(gpu_model="NVIDIA-A100-SXM4-80GB") == "hcas=4"  # another pool: pod_env's
    assert expect(gpu_model=None) == "hcas=4"
    assert "CLUSTER_DOCTOR_EXPECT" not in {e["name"] for e in base_container(podspec.build_pod(Settings(), **BASE))["env"]}


@pytest.mark.parametrize(("value", "message"), [
    ('{"NVIDIA-H100-80GB-HBM3": "hca=8"}', "NVIDIA-H100-80GB-HBM3: bad expectation 'hca=8': use KEY=INTEGER"),
    ('{"NVIDIA-H100-80GB-HBM3": "hcas=eight"}', "bad expectation 'hcas=eight'"),
    ('{"NVIDIA-H100-80GB-HBM3": " "}', "no expectation given"),
    ('{"NVIDIA H100": "hcas=8"}', "'NVIDIA H100' is not a GPU model label value"),
])
def test_a_bad_node_pool_expectation_is_one_line_at_load(value, message):
    from cluster_doctor.domain.config import InvalidSettings

    with pytest.raises(InvalidSettings, match=message) as caught:
        Settings.load(env={"CLUSTER_DOCTOR_NODE_POOL_EXPECTATIONS": value})
    assert "\n" not in str(caught.value) and "node_pool_expectations" in str(caught.value)
