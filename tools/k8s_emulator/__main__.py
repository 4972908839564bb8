"""python -m k8s_emulator serve --port 0 --port-file F [--state-dir D] [--kubeconfig K] ..."""

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
from .process import write_kubeconfig
from .server import EmulatorHTTPServer


def _kv(values: list[str] | None) -> dict:
    out = {}
    for item in values or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=VALUE, got {item!r}")
        out[k] = v
    return out


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
            return stop()


def serve(args) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = Settings()
    settings.update(json.loads(args.settings_json or "{}"))
    settings.executables.update(_kv(args.executable))
    settings.pvc_dirs.update({k: os.path.abspath(v) for k, v in _kv(args.pvc_dir).items()})
    settings.exec_env.update(_kv(args.exec_env))
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="k8s-emulator-")
    cluster = Cluster(settings, state_dir)
    server = EmulatorHTTPServer((args.host, args.port), cluster, verbose=args.verbose)
    port = server.server_address[1]
    cluster.url = f"http://{args.host}:{port}"
    stopping = threading.Event()

    def stop(*_):
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.stop, daemon=True).start()

    cluster.start()
    if args.kubeconfig:
        write_kubeconfig(args.kubeconfig, cluster.url)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid, stop), daemon=True).start()
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(args.port_file + ".tmp", args.port_file)  # atomic: readers never see a partial port
    print(f"k8s_emulator serving {cluster.url} (state {state_dir})", file=sys.stderr, flush=True)
    try:
        server.serve(poll_interval=0.2)  # through apiserver restarts (server.restart)
    finally:
        cluster.shutdown()
        server.server_close()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k8s_emulator", description="Kubernetes API emulator for tests")
    s = p.add_subparsers(dest="cmd", required=True).add_parser("serve", help="run the emulator")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=0, help="0 picks a free port (see --port-file)")
    s.add_argument("--port-file", help="write the chosen port here once ready")
    s.add_argument("--state-dir", help="host dirs for PVCs, pod files, pid files (default: a temp dir)")
    s.add_argument("--kubeconfig", help="write a kubeconfig (context 'emulator') here once ready")
    s.add_argument("--executable", action="append", metavar="NAME=PATH", help="map a command's first word")
    s.add_argument("--pvc-dir", action="append", metavar="CLAIM=DIR", help="host dir for a PVC claimName")
    s.add_argument("--exec-env", action="append", metavar="KEY=VALUE", help="extra env for exec-mode pods")
    s.add_argument("--settings-json", help="JSON object of Settings fields")
    s.add_argument("--parent-pid", type=int, help="exit when this process dies")
    s.add_argument("--verbose", action="store_true")
    return serve(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
