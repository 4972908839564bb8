"""Exec mode: the container command runs as a local process with the pod's env, volumes mapped to host
dirs, termination messages, log streaming, graceful deletion and deadlines."""

from __future__ import annotations

import json
import sys
import textwrap
import time

from tests.support.emu_helpers import events_for, pod, wait_gone, wait_pod


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie is dead
    except OSError:
        return False


def _py(code: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code)]


def test_env_fieldref_paths_and_termination_message(emu, v1, tmp_path):
    emu.add_gpu_node("gpu-1")
    data = tmp_path / "pvc-data"
    emu.set_pvc_dir("shared-data", str(data))
    code = """
        import json, os, sys
        out = os.path.join(os.environ["OUT_DIR"], os.environ["NODE"], "result.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        json.dump({"argv": sys.argv[1:], "cwd": os.getcwd()}, open(out, "w"))
        print("wrote", out, flush=True)
        open("/dev/termination-log", "w").write(json.dumps({"status": "pass", "node": os.environ["NODE"],
                                                            "pod": os.environ["POD"], "exe": sys.executable}))
    """
    p = pod("exec-ok", command=_py(code), node="gpu-1", gpus=8)
    c = p["spec"]["containers"][0]
    c["args"] = ["--log=/data/cv/$(POD)/x.log", "/data/cv"]
    c["env"] = [
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "OUT_DIR", "value": "/data/cv"},
    ]
    c["volumeMounts"] = [{"name": "data", "mountPath": "/data/cv"}]
    c["terminationMessagePolicy"] = "FallbackToLogsOnError"
    p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "shared-data"}}]
    v1.create_namespaced_pod("default", p)
    done = wait_pod(v1, "exec-ok")
    st = done.status.container_statuses[0].state.terminated
    assert done.status.phase == "Succeeded" and st.exit_code == 0 and st.reason == "Completed"
    msg = json.loads(st.message)
    assert msg["node"] == "gpu-1" and msg["pod"] == "exec-ok" and msg["exe"] == sys.executable
    result = json.loads((data / "gpu-1" / "result.json").read_text())
    assert result["argv"] == [f"--log={data}/exec-ok/x.log", str(data)]  # $(VAR) expanded, paths rewritten
    assert emu.pvc_dir("shared-data") == str(data)
    assert done.status.pod_ip and done.status.host_ip and done.status.start_time
    reasons = [e.reason for e in events_for(v1, "exec-ok")]
    assert reasons[:1] == ["Scheduled"] and {"Pulling", "Pulled", "Created", "Started"} <= set(reasons)


def test_a_pod_process_uses_the_hosts_compiled_modules(emu, v1):
    """make .venv compiles every module into PYTHONPYCACHEPREFIX; a pod's Python looks there too, or each
    suite pod compiles torch from source again."""
    emu.add_gpu_node("gpu-1")
    code = """
        import json, sys
        open("/dev/termination-log", "w").write(json.dumps({"prefix": sys.pycache_prefix}))
    """
    v1.create_namespaced_pod("default", pod("exec-pycache", command=_py(code), node="gpu-1", gpus=8))
    st = wait_pod(v1, "exec-pycache").status.container_statuses[0].state.terminated
    assert json.loads(st.message)["prefix"] == sys.pycache_prefix


def test_fallback_to_logs_on_error_and_exit_codes(emu, v1):
    emu.add_gpu_node("gpu-1")
    lines = "\n".join(f"print('line {i}')" for i in range(100))
    p = pod("fails", command=_py(lines + "\nraise SystemExit(3)"), node="gpu-1")
    p["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    v1.create_namespaced_pod("default", p)
    p2 = pod("fails-file-policy", command=_py("print('boom'); raise SystemExit(2)"), node="gpu-1")
    v1.create_namespaced_pod("default", p2)
    st = wait_pod(v1, "fails").status.container_statuses[0].state.terminated
    assert st.exit_code == 3 and st.reason == "Error"
    tail = st.message.splitlines()
    assert len(tail) == 80 and tail[0] == "line 20" and tail[-1] == "line 99"  # last 80 lines
    done = wait_pod(v1, "fails-file-policy")
    st = done.status.container_statuses[0].state.terminated
    assert (
        done.status.phase == "Failed" and st.exit_code == 2 and st.message is None
    )  # File policy: no fallback


def test_missing_executable_is_start_error(emu, v1):
    emu.add_gpu_node("gpu-1")
    v1.create_namespaced_pod("default", pod("noexe", command=["definitely-not-a-binary", "x"], node="gpu-1"))
    done = wait_pod(v1, "noexe")
    st = done.status.container_statuses[0].state.terminated
    assert done.status.phase == "Failed" and st.exit_code == 128 and st.reason == "StartError"
    assert 'exec: "definitely-not-a-binary"' in st.message


def test_configmap_volume_and_env_from(emu, v1, tmp_path):
    emu.add_gpu_node("gpu-1")
    v1.create_namespaced_config_map(
        "default",
        {
            "metadata": {"name": "thresholds"},
            "data": {"h100.yaml": "nccl_min: 460\n", "a100.yaml": "nccl_min: 230\n", "MODE": "cpu"},
        },
    )
    code = """
        import os
        print(sorted(os.listdir("/etc/cd")))
        print(open("/etc/cd/gpu/h100.yaml").read().strip())
        print("mode=" + os.environ["CD_MODE"])
    """
    p = pod("cm", command=_py(code), node="gpu-1")
    c = p["spec"]["containers"][0]
    c["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/cd"}]
    c["envFrom"] = [{"configMapRef": {"name": "thresholds"}, "prefix": "CD_"}]
    p["spec"]["volumes"] = [
        {
            "name": "cfg",
            "configMap": {"name": "thresholds", "items": [{"key": "h100.yaml", "path": "gpu/h100.yaml"}]},
        }
    ]
    v1.create_namespaced_pod("default", p)
    assert wait_pod(v1, "cm").status.phase == "Succeeded"
    log = v1.read_namespaced_pod_log("cm", "default", _preload_content=False).data.decode()
    assert log.splitlines() == ["['gpu']", "nccl_min: 460", "mode=cpu"]


def test_missing_configmap_keeps_pod_creating(emu, v1):
    emu.add_gpu_node("gpu-1")
    p = pod("nocm", command=_py("print('hi')"), node="gpu-1")
    p["spec"]["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/cd"}]
    p["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "later"}}]
    v1.create_namespaced_pod("default", p)
    emu.wait_for(
        lambda: any(e.reason == "FailedMount" for e in events_for(v1, "nocm")), message="FailedMount"
    )
    assert v1.read_namespaced_pod("nocm", "default").status.phase == "Pending"
    ev = next(e for e in events_for(v1, "nocm") if e.reason == "FailedMount")
    assert ev.message == 'MountVolume.SetUp failed for volume "cfg" : configmap "later" not found'
    v1.create_namespaced_config_map("default", {"metadata": {"name": "later"}, "data": {"k": "v"}})
    assert wait_pod(v1, "nocm").status.phase == "Succeeded"


def test_log_follow_streams_while_running_and_log_options(emu, v1):
    emu.add_gpu_node("gpu-1")
    code = """
        import time
        for i in range(4):
            print(f"tick {i}", flush=True)
            time.sleep(0.4)
    """
    v1.create_namespaced_pod("default", pod("ticker", command=_py(code), node="gpu-1"))
    wait_pod(v1, "ticker", phases=("Running", "Succeeded"))
    t0 = time.monotonic()
    resp = v1.read_namespaced_pod_log(
        "ticker", "default", follow=True, timestamps=True, _preload_content=False
    )
    arrivals = []
    for chunk in resp.stream(amt=None, decode_content=True):
        for line in chunk.decode().splitlines():
            arrivals.append((time.monotonic() - t0, line))
    assert [line.split(" ", 1)[1] for _, line in arrivals] == [f"tick {i}" for i in range(4)]
    assert arrivals[-1][0] - arrivals[0][0] > 0.8  # streamed as produced, not all at the end
    ts = arrivals[0][1].split(" ", 1)[0]
    assert ts.endswith("Z") and "T" in ts
    assert wait_pod(v1, "ticker").status.phase == "Succeeded"
    tail = v1.read_namespaced_pod_log("ticker", "default", tail_lines=2, _preload_content=False).data.decode()
    assert tail == "tick 2\ntick 3\n"
    recent = v1.read_namespaced_pod_log(
        "ticker", "default", since_seconds=1, _preload_content=False
    ).data.decode()
    assert "tick 0" not in recent or "tick 3" in recent


def test_graceful_delete_sends_sigterm_then_object_goes(emu, v1, tmp_path):
    emu.add_gpu_node("gpu-1")
    marker = tmp_path / "term"
    code = f"""
        import signal, sys, time
        def bye(*_):
            open({str(marker)!r}, "w").write("got SIGTERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("ready", flush=True)
        time.sleep(60)
    """
    v1.create_namespaced_pod(
        "default", pod("sleeper", command=_py(code), node="gpu-1", terminationGracePeriodSeconds=10)
    )
    wait_pod(v1, "sleeper", until=lambda p: p.status.phase == "Running")
    emu.wait_for(
        lambda: b"ready" in v1.read_namespaced_pod_log("sleeper", "default", _preload_content=False).data
    )
    pids = emu.processes()
    deleted = v1.delete_namespaced_pod("sleeper", "default")
    assert deleted.metadata.deletion_grace_period_seconds == 10
    wait_gone(v1, "sleeper", timeout=5)
    assert marker.read_text() == "got SIGTERM"
    assert emu.processes() == []
    assert not any(_alive(pid) for pid in pids)
    assert "Killing" in [e.reason for e in events_for(v1, "sleeper")]


def test_sigkill_after_grace_period(emu, v1):
    emu.add_gpu_node("gpu-1")
    code = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("stubborn", flush=True)
        time.sleep(600)
    """
    v1.create_namespaced_pod(
        "default", pod("stubborn", command=_py(code), node="gpu-1", terminationGracePeriodSeconds=1)
    )
    wait_pod(v1, "stubborn", phases=("Running",))
    emu.wait_for(
        lambda: b"stubborn" in v1.read_namespaced_pod_log("stubborn", "default", _preload_content=False).data
    )
    t0 = time.monotonic()
    v1.delete_namespaced_pod("stubborn", "default")
    wait_gone(v1, "stubborn", timeout=60)  # killed: its sleep had ten minutes to go
    assert time.monotonic() - t0 >= 0.9  # after its grace period, not before
    assert emu.processes() == []


def test_active_deadline_seconds(emu, v1):
    emu.add_gpu_node("gpu-1")
    v1.create_namespaced_pod(
        "default",
        pod("slow", command=_py("import time; time.sleep(30)"), node="gpu-1", activeDeadlineSeconds=1),
    )
    done = wait_pod(v1, "slow", timeout=8)
    assert done.status.phase == "Failed" and done.status.reason == "DeadlineExceeded"
    assert done.status.message == "Pod was active on the node longer than the specified deadline"
    assert done.status.container_statuses[0].state.terminated.exit_code in (137, 143)
    assert "DeadlineExceeded" in [e.reason for e in events_for(v1, "slow")]
    assert emu.processes() == []


def test_container_ends_with_its_main_process(emu, v1, tmp_path):
    """A background child that keeps stdout open dies with PID 1, as in a real container."""
    emu.add_gpu_node("gpu-1")
    code = """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
    """
    v1.create_namespaced_pod("default", pod("forker", command=_py(code), node="gpu-1"))
    assert wait_pod(v1, "forker", timeout=5).status.phase == "Succeeded"
    child = int(v1.read_namespaced_pod_log("forker", "default", _preload_content=False).data)
    emu.wait_for(lambda: not _alive(child), message="orphaned child killed")
    assert emu.processes() == []
