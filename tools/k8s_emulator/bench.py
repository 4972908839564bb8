"""Emulator self-benchmark: bulk load and full paginated lists through the real kubernetes client.

    python -m k8s_emulator.bench [--nodes 5000] [--pods 150000] [--limit 500] [--typed]

--typed also deserializes every page into V1Pod models (the client's default; very slow at this scale).
"""

from __future__ import annotations

import argparse
import json
import time

from .process import EmulatorProcess


def paginate(fn, limit: int, typed: bool, **kw) -> tuple[int, int, float]:
    t0, n, pages, cont = time.perf_counter(), 0, 0, None
    while True:
        if typed:
            r = fn(limit=limit, _continue=cont, **kw)
            n, cont = n + len(r.items), r.metadata._continue
        else:
            d = json.loads(fn(limit=limit, _continue=cont, _preload_content=False, **kw).data)
            n, cont = n + len(d["items"]), d["metadata"].get("continue")
        pages += 1
        if not cont:
            return n, pages, time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m k8s_emulator.bench")
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=150000)
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--typed", action="store_true")
    a = p.parse_args(argv)
    with EmulatorProcess() as emu:
        t0 = time.perf_counter()
        s = emu.bulk_generate(a.nodes, a.pods)
        print(
            f"bulk_load_s={time.perf_counter() - t0:.2f} (server {s['seconds']}s) "
            f"nodes={s['nodes']} pods={s['pods']} "
            f"avg_pod_bytes={s['avg_pod_bytes']} node_states={s['node_states']}"
        )
        v1 = emu.core_v1()
        emu.reset_counters()
        for label, fn, kw in (
            ("nodes", v1.list_node, {}),
            ("pods", v1.list_pod_for_all_namespaces, {}),
            (
                "pods bound+live",
                v1.list_pod_for_all_namespaces,
                {"field_selector": "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!="},
            ),
        ):
            for typed in (False, True) if a.typed else (False,):
                n, pages, dt = paginate(fn, a.limit, typed, **kw)
                print(
                    f"list {label:16s} {'typed' if typed else 'raw  '} "
                    f"items={n} pages={pages} seconds={dt:.2f}"
                )
        print(f"api_calls={emu.api_calls()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
