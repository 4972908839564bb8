"""python -m k8s_emulator serve --port 0 --port-file F [--state-dir D] [--scenario S] [--kubeconfig K] ..."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time

from .cluster import Cluster, Settings
from .server import EmulatorHTTPServer


def _kv(values: list[str] | None) -> dict:
    out = {}
    for item in values or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=VALUE, got {item!r}")
        out[k] = v
    return out


def write_kubeconfig(path: str, url: str, namespace: str = "default"):
    text = (
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: {url}\n"
        f"users:\n- name: emulator\n  user: {{}}\n"
        f"contexts:\n- name: emulator\n  context:\n    cluster: emulator\n"
        f"    user: emulator\n    namespace: {namespace}\ncurrent-context: emulator\npreferences: {{}}\n"
    )
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _watch_parent(pid: int, stop):
    """Exit when the process that started us is gone (even if it was SIGKILLed and could not clean up)."""
    while True:
        time.sleep(0.5)
        try:
            os.kill(pid, 0)
            alive = os.getppid() == pid
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True
        if not alive:
            logging.getLogger("k8s_emulator").warning("parent %s is gone: shutting down", pid)
            stop()
            return


def serve(args) -> int:
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    settings = Settings()
    if args.settings_json:
        settings.update(json.loads(args.settings_json))
    if args.scheduler_interval is not None:
        settings.scheduler_interval = args.scheduler_interval
    if args.startup_delay is not None:
        settings.startup_delay = args.startup_delay
    settings.executables.update(_kv(args.executable))
    settings.pvc_dirs.update({k: os.path.abspath(v) for k, v in _kv(args.pvc_dir).items()})
    settings.exec_env.update(_kv(args.exec_env))
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="k8s-emulator-")
    cluster = Cluster(settings, state_dir)
    server = EmulatorHTTPServer((args.host, args.port), cluster, verbose=args.verbose)
    port = server.server_address[1]
    cluster.url = f"http://{args.host}:{port}"

    stopping = threading.Event()

    def stop():
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    cluster.request_shutdown = stop
    if args.scenario:
        from .scenario import apply_scenario, load

        apply_scenario(cluster, load(args.scenario))
    cluster.start()
    if args.kubeconfig:
        write_kubeconfig(args.kubeconfig, cluster.url)
    signal.signal(signal.SIGTERM, lambda *_: stop())
    signal.signal(signal.SIGINT, lambda *_: stop())
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid, stop), daemon=True).start()
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)  # atomic: readers never see a partial port
    print(f"k8s_emulator serving {cluster.url} (state {state_dir})", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        cluster.shutdown()
        server.server_close()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m k8s_emulator", description="Kubernetes API emulator for tests"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the emulator")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=0, help="0 picks a free port (see --port-file)")
    s.add_argument("--port-file", help="write the chosen port here once ready")
    s.add_argument("--state-dir", help="host dirs for PVCs, pod files, pid files (default: a temp dir)")
    s.add_argument("--scenario", help="YAML/JSON scenario to load at startup")
    s.add_argument("--kubeconfig", help="write a kubeconfig (context 'emulator') here once ready")
    s.add_argument("--executable", action="append", metavar="NAME=PATH", help="map a command's first word")
    s.add_argument("--pvc-dir", action="append", metavar="CLAIM=DIR", help="host dir for a PVC claimName")
    s.add_argument("--exec-env", action="append", metavar="KEY=VALUE", help="extra env for exec-mode pods")
    s.add_argument("--scheduler-interval", type=float)
    s.add_argument("--startup-delay", type=float)
    s.add_argument("--settings-json", help="JSON object of Settings fields")
    s.add_argument("--parent-pid", type=int, help="exit when this process dies")
    s.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
