"""dl/devices.py: no GPU where GPUs are expected, a GPU the driver sees and CUDA cannot open, which
errors put the hardware at fault."""

from __future__ import annotations

from cluster_doctor_suites import dl_unit
from cluster_doctor_suites.dl import devices


def test_no_gpu_visible_with_expected_8_fails(run_inproc, h):
    ns = run_inproc(dl_unit, "--device", "cuda", "--expected-gpus", "8")  # this machine has no GPU
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    assert ns.summary["reason"].startswith("gpu_count: expected 8 GPUs, found 0")
    assert ns.summary["check_counts"]["fail"] == 1


def test_a_gpu_the_driver_sees_and_cuda_cannot_open_fails():
    c = devices.cuda_devices_check(7, 8, "nvidia-smi")
    assert (c.name, c.status, c.value, c.threshold) == ("cuda_devices", "fail", 7, "== 8")
    assert c.message == "nvidia-smi sees 8 GPUs but CUDA can use only 7"
    assert devices.cuda_devices_check(8, 8, "nvidia-smi") is None


def test_hardware_error_texts_fail_and_other_errors_are_errors():
    assert devices.classify(RuntimeError("CUDA error: an illegal instruction was encountered")) == "fail"
    assert devices.classify("GPU has fallen off the bus") == "fail"
    assert devices.classify(RuntimeError("shape mismatch")) == "error"


def test_the_device_computing_now_is_known_inside_on_device_only():
    assert devices.current_device() is None
    with devices.on_device("cuda:4"):
        assert devices.current_device() == "cuda:4"
        with devices.on_device("cuda:5"):
            assert devices.current_device() == "cuda:5"
        assert devices.current_device() == "cuda:4"
    assert devices.current_device() is None
