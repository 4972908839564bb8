"""The emulator as a process: CLI, scenario files, kubeconfig/kubectl, no leaked processes however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from k8s_emulator import EmulatorProcess
from k8s_emulator.process import TOOLS_DIR
from kubernetes import client, config

from tests.conftest import kubectl
from tests.support.emu_helpers import pod, wait_pod

SLEEP = ["python", "-c", "import time; print('up', flush=True); time.sleep(120)"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _wait_dead(pids, timeout=5.0):
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            raise AssertionError(f"still alive: {[p for p in pids if _alive(p)]}")
        time.sleep(0.05)


def _start_sleepers(emu, n=2):
    v1 = emu.core_v1()
    emu.add_gpu_node("gpu-1")
    for i in range(n):
        v1.create_namespaced_pod("default", pod(f"sleep-{i}", command=SLEEP, node="gpu-1", gpus=1))
    for i in range(n):
        wait_pod(v1, f"sleep-{i}", phases=("Running",))
        # past its only write: a sleeper killed by SIGPIPE when the emulator dies would prove nothing
        emu.wait_for(lambda i=i: b"up" in v1.read_namespaced_pod_log(f"sleep-{i}", "default", _preload_content=False).data)
    return emu.wait_for(lambda: len(emu.processes()) == n and emu.processes())


def test_stop_kills_every_pod_process(tmp_path):
    emu = EmulatorProcess(state_dir=str(tmp_path), settings={"startup_delay": 0.01}).start()
    pids = _start_sleepers(emu)
    assert all(_alive(p) for p in pids)
    emulator_pid = emu.pid
    emu.stop()
    _wait_dead(pids + [emulator_pid])
    assert os.listdir(tmp_path / "pids") == []


def test_killed_emulator_leaves_nothing_after_stop(tmp_path):
    emu = EmulatorProcess(state_dir=str(tmp_path), settings={"startup_delay": 0.01}).start()
    pids = _start_sleepers(emu)
    os.kill(emu.pid, signal.SIGKILL)  # no chance to clean up itself
    time.sleep(0.2)
    assert all(_alive(p) for p in pids)  # pods run in their own sessions...
    emu.stop()  # ...and stop() reaps them from the pid files
    _wait_dead(pids)


def test_emulator_exits_when_its_parent_dies(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {TOOLS_DIR!r}); sys.path.insert(0, {os.getcwd()!r})
        from k8s_emulator import EmulatorProcess
        from tests.support.emu_helpers import pod, wait_pod
        emu = EmulatorProcess(state_dir={str(tmp_path)!r}, settings={{"startup_delay": 0.01}}).start()
        emu.add_gpu_node("gpu-1")
        v1 = emu.core_v1()
        v1.create_namespaced_pod("default", pod("s", command={SLEEP!r}, node="gpu-1"))
        wait_pod(v1, "s", phases=("Running",))
        pids = emu.wait_for(emu.processes)
        print(emu.pid, *pids, flush=True)
        os.kill(os.getpid(), 9)  # the test process crashes hard: no atexit, no stop()
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    pids = [int(x) for x in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    _wait_dead(pids, timeout=8)


def test_cli_serve_writes_kubeconfig_for_client_and_kubectl(tmp_path):
    port_file, kubeconfig = tmp_path / "port", tmp_path / "kubeconfig"
    env = dict(os.environ, PYTHONPATH=TOOLS_DIR)
    cmd = [sys.executable, "-m", "k8s_emulator", "serve", "--port", "0", "--port-file", str(port_file), "--state-dir",
           str(tmp_path / "state"), "--kubeconfig", str(kubeconfig), "--settings-json", '{"startup_delay": 0.01}']
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
            time.sleep(0.02)
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg, context="emulator")
        v1 = client.CoreV1Api(client.ApiClient(cfg))
        v1.create_node({"metadata": {"name": "gpu-a"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        assert [n.metadata.name for n in v1.list_node().items] == ["gpu-a"]
        assert v1.get_api_resources().group_version == "v1"
        out = subprocess.run([kubectl(), "--kubeconfig", str(kubeconfig), "cordon", "gpu-a"], capture_output=True,
                             text=True, timeout=30, check=False)
        assert out.returncode == 0, out.stderr
        assert v1.read_node("gpu-a").spec.unschedulable is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert proc.returncode == 0


def test_startup_failure_is_reported(tmp_path):
    with pytest.raises(RuntimeError, match="did not start"):
        EmulatorProcess(state_dir=str(tmp_path), settings={"no_such_setting": 1}, startup_timeout=15).start()
