"""Exec mode's pod network: a pod run as a local process gets a loopback status.podIP, so a second pod
can connect to the first by its podIP, as pods do on a real cluster's pod network (peer
tests rendezvous by the server pod's IP). Scripted pods keep addresses of the node's pod CIDR."""

from __future__ import annotations

import ipaddress
import socket
import textwrap

from tests.support.emu_helpers import pod, wait_pod


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def test_a_pod_reaches_another_pod_by_its_pod_ip(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.add_gpu_node("gpu-2")
    port = _free_port()
    server = textwrap.dedent(f"""
        import socket
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", {port})); s.listen(1); s.settimeout(20)
        conn, _ = s.accept(); conn.sendall(b"hello from the server"); conn.close()
    """)
    v1.create_namespaced_pod("default", pod("server", command=["python", "-c", server], node="gpu-1"))
    running = wait_pod(v1, "server", until=lambda p: p.status.pod_ip and p.status.phase == "Running")
    ip = running.status.pod_ip
    assert ipaddress.ip_address(ip).is_loopback and ip != "127.0.0.1"
    client = textwrap.dedent(f"""
        import os, socket, time
        for _ in range(100):
            try:
                c = socket.create_connection((os.environ["PEER"], {port}), timeout=5); break
            except OSError:
                time.sleep(0.1)
        print(c.recv(100).decode(), flush=True)
    """)
    spec = pod("client", command=["python", "-c", client], node="gpu-2")
    spec["spec"]["containers"][0]["env"] = [{"name": "PEER", "value": ip}]
    v1.create_namespaced_pod("default", spec)
    done = wait_pod(v1, "client", timeout=20)
    assert done.status.phase == "Succeeded"
    log = v1.read_namespaced_pod_log("client", "default", _preload_content=False).data.decode()
    assert log.strip() == "hello from the server"
    assert wait_pod(v1, "server").status.phase == "Succeeded"
    assert done.status.pod_ip != ip and ipaddress.ip_address(done.status.pod_ip).is_loopback


def test_scripted_pods_keep_pod_cidr_addresses(emu, v1):
    emu.add_gpu_node("gpu-1")
    emu.set_script("gpu-1", "run")
    v1.create_namespaced_pod("default", pod("sim", command=["true"], node="gpu-1"))
    running = wait_pod(v1, "sim", until=lambda p: p.status.pod_ip)
    assert running.status.pod_ip.startswith("10.")
