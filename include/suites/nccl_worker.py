"""One rank of the torch.distributed all-reduce used by nccl_loopback (spawned, one process per GPU).

The rank's stdout/stderr go to <workdir>/rank<N>.log: NCCL writes its INFO lines to stdout, and the
parent parses them to prove the transport. Results go to <workdir>/rank<N>.json (written last, so a
missing file means the rank died)."""

from __future__ import annotations

import datetime
import inspect
import json
import os
import sys
import time
import traceback


def _pattern(torch, n: int, rank: int, device):
    # small integers: the sum over ranks is exact in float32 and every element is distinct mod 251,
    # so misplaced chunks are caught, not only wrong sums
    x = torch.arange(n, dtype=torch.int32, device=device).remainder_(251).to(torch.float32)
    return x.add_(rank + 1)


def _expected(torch, n: int, world: int, device):
    x = torch.arange(n, dtype=torch.int32, device=device).remainder_(251).to(torch.float32)
    return x.mul_(world).add_(world * (world + 1) / 2)


def worker(
    rank: int,
    world: int,
    backend: str,
    workdir: str,
    sizes: list[int],
    iters: int,
    warmup: int,
    env: dict,
    timeout_s: float,
) -> None:
    log_fd = os.open(os.path.join(workdir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = sys.stdout
    os.environ.update(env)  # NCCL reads its variables at communicator creation
    result: dict = {"rank": rank, "world": world, "backend": backend, "rows": [], "error": None}
    try:
        import torch
        import torch.distributed as dist

        device = _init(torch, dist, rank, world, backend, workdir, timeout_s, result)
        for size in sizes:
            row = _one_size(torch, dist, size, rank, world, device, backend, iters, warmup)
            result["rows"].append(row)
            print(f"[cluster-doctor] rank {rank} size {row['size']} time {row['time_us']:.1f} us "
                  f"wrong {row['wrong']}", flush=True)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which judges
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    finally:
        sys.stdout.flush()
        tmp = os.path.join(workdir, f".rank{rank}.json.tmp")
        with open(tmp, "w") as fh:
            json.dump(result, fh)
        os.replace(tmp, os.path.join(workdir, f"rank{rank}.json"))
    if result["error"]:
        os._exit(1)


def _init(torch, dist, rank: int, world: int, backend: str, workdir: str, timeout_s: float, result: dict):
    """The device and the process group (file rendezvous in the shared scratch directory)."""
    t_start = time.monotonic()
    print(f"[cluster-doctor] rank {rank}: torch {torch.__version__} imported", flush=True)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        v = torch.cuda.nccl.version()  # a tuple in current torch, an int (e.g. 22105) in old ones
        result["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # several ranks share the cores
    kwargs = {}
    if backend == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = device  # eager communicator creation: INFO lines appear at init
    dist.init_process_group(
        backend,
        init_method="file://" + os.path.join(workdir, "rendezvous"),
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
        **kwargs,
    )
    hook = os.environ.get("CLUSTER_DOCTOR_CPU_FAULT_HOOK")
    if hook and backend == "gloo":
        # CPU mode only: a test injects a fault into this rank the way hardware would produce
        # it (e.g. a collective that hands one rank a wrong element). Never honoured with NCCL.
        import importlib

        mod, _, fn = hook.partition(":")
        getattr(importlib.import_module(mod), fn or "install")(rank=rank, world=world)
    print(f"[cluster-doctor] rank {rank}: process group ({backend}) up after "
          f"{time.monotonic() - t_start:.1f} s", flush=True)
    return device


def _one_size(torch, dist, size: int, rank: int, world: int, device, backend: str, iters: int, warmup: int) -> dict:
    """One message size: the values checked exactly on this rank, then the timed all-reduces."""

    def sync():
        if backend == "nccl":
            torch.cuda.synchronize(device)

    n = max(1, size // 4)  # float32 elements, as all_reduce_perf -d float
    x = _pattern(torch, n, rank, device)
    dist.all_reduce(x)
    sync()
    want = _expected(torch, n, world, device)
    bad = x != want
    wrong = int(bad.sum().item())
    first_bad = int(bad.nonzero()[0].item()) if wrong else None
    max_err = float((x - want).abs().max().item()) if wrong else 0.0
    del x, want, bad
    buf = torch.zeros(n, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(buf)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    sync()
    elapsed = (time.perf_counter() - t0) / iters
    # every rank waits for the slowest: report the max over ranks, like nccl-tests
    t = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    elapsed = float(t.item())
    del buf
    if backend == "nccl":
        torch.cuda.empty_cache()
    algbw = n * 4 / elapsed / 1e9
    return {"size": n * 4, "time_us": elapsed * 1e6, "algbw": algbw, "busbw": algbw * 2 * (world - 1) / world,
            "wrong": wrong, "first_wrong_index": first_bad, "max_abs_error": max_err}
