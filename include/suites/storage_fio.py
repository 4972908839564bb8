"""storage_fio: fio on the shared volume, judged against per-profile floors.

Patterns: seq_write and seq_read (1 MiB blocks), rand_write and rand_read (4 KiB blocks), direct
I/O where the filesystem allows it (probed; buffered with end_fsync and a warning otherwise),
bounded size and runtime, in a per-node scratch directory that is removed afterwards, also on
failure, SIGTERM or timeout. Reports bandwidth (MiB/s), IOPS and p99 completion latency (ms).

The target must be on the storage it is meant to measure (`--mount`): by default (GPU mode) a
mounted volume, not the container's own root filesystem. The harness creates `<output>/storage_fio/
<node>` before any suite code runs, so without the results volume in the pod that directory exists
on the image's overlay and fio would happily benchmark it: found by the device id (st_dev against
`/`) and /proc/self/mountinfo, it is an `error` (STORAGE_NOT_MOUNTED: a deployment problem, the node
is not proven bad), every pattern a visible not-run.

    python -m cluster_doctor_suites.storage_fio [--dir /data/continuous_validation] [--profile default] ...
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import time

from . import parsers
from .baselines import Baselines
from .harness.checks import SuiteError
from .harness.context import Context
from .harness.checks import Check
from .harness.files import safe_name
from .harness.mounts import MOUNTINFO, mount_of, same_device_as_root
from .harness.inventory import gpu_inventory
from .harness.runner import main_entry, run_suite
from .harness.text import fmt, one_line

SUITE = "storage_fio"
PATTERNS = {  # name: (fio rw, block size, direction, judged figure)
    "seq_write": ("write", "1M", "write", "mibps"),
    "seq_read": ("read", "1M", "read", "mibps"),
    "rand_write": ("randwrite", "4k", "write", "iops"),
    "rand_read": ("randread", "4k", "read", "iops"),
}
SCRATCH_PARENT = ".cluster-doctor-fio"
STALE_SCRATCH_S = 3600


def add_arguments(p) -> None:
    g = p.add_argument_group("storage_fio")
    g.add_argument(
        "--dir",
        default=os.environ.get("CLUSTER_DOCTOR_FIO_DIR") or None,
        help="directory on the storage to test; default: --output-dir (the shared volume) "
        "[CLUSTER_DOCTOR_FIO_DIR]",
    )
    g.add_argument(
        "--fio", default=os.environ.get("CLUSTER_DOCTOR_FIO", "fio"), help="fio binary [CLUSTER_DOCTOR_FIO]"
    )
    g.add_argument(
        "--mount",
        default=os.environ.get("CLUSTER_DOCTOR_FIO_MOUNT") or None,
        help="where the target must live: 'volume' (a mount other than the root filesystem; default in GPU "
        "mode), a mount point (the target's mount is it or below it), or 'any' (default in CPU mode) "
        "[CLUSTER_DOCTOR_FIO_MOUNT]",
    )
    g.add_argument("--mountinfo", default=MOUNTINFO, help="the mount table read (tests)")
    g.add_argument(
        "--profile",
        default=None,
        help="floor profile in baselines.yaml storage.profiles (default: 'default', 'cpu' in CPU mode)",
    )
    g.add_argument(
        "--patterns", default=",".join(PATTERNS), help="comma-separated subset of " + ",".join(PATTERNS)
    )
    g.add_argument("--size", default=None, help="file size per job (fio syntax); default 1G, 16M in CPU mode")
    g.add_argument(
        "--runtime", type=float, default=None, help="seconds per pattern; default 30, 1 in CPU mode"
    )
    g.add_argument(
        "--ramp", type=float, default=None, help="ramp-up seconds per pattern; default 2, 0 in CPU mode"
    )
    g.add_argument(
        "--numjobs", type=int, default=None, help="parallel jobs per pattern; default 4, 1 in CPU mode"
    )
    g.add_argument("--iodepth", type=int, default=None, help="queue depth; default 16, 4 in CPU mode")
    g.add_argument(
        "--direct",
        choices=("auto", "on", "off"),
        default="auto",
        help="O_DIRECT: auto probes the filesystem and falls back to buffered I/O",
    )
    g.add_argument(
        "--ioengine", default="auto", help="fio ioengine; auto = libaio for direct I/O, else psync"
    )
    g.add_argument(
        "--floor",
        action="append",
        default=[],
        metavar="PATTERN.KEY=VALUE",
        help="override a floor, e.g. seq_read.min_mibps=800 or rand_read.max_p99_ms=20 (repeatable)",
    )


def default_timeout(args) -> float:
    runtime = args.runtime if args.runtime is not None else (1 if args.device == "cpu" else 30)
    ramp = args.ramp if args.ramp is not None else (0 if args.device == "cpu" else 2)
    return 4 * (runtime + ramp) + (120 if args.device == "cpu" else 900)  # layout on a slow NFS


def _floors(ctx: Context, baselines: Baselines, profile: str) -> dict:
    profiles = baselines.section("storage").get("profiles") or {}
    if profile not in profiles:
        raise SuiteError(f"storage profile {profile!r} not in {baselines.path} (have: {', '.join(profiles)})")
    floors = {k: dict(v or {}) for k, v in profiles[profile].items()}
    for item in ctx.args.floor:
        try:
            key, value = item.split("=", 1)
            pattern, field = key.strip().split(".", 1)
            if pattern not in PATTERNS or field not in ("min_mibps", "min_iops", "max_p99_ms"):
                raise ValueError
            floors.setdefault(pattern, {})[field] = float(value)
        except ValueError:
            raise SuiteError(
                f"bad --floor {item!r}: expected PATTERN.min_mibps|min_iops|max_p99_ms=NUMBER"
            ) from None
    return floors


def probe_direct_io(directory: str) -> tuple[bool, str]:
    """Can this filesystem do O_DIRECT? tmpfs (older kernels), some FUSE and overlay mounts refuse it."""
    if not hasattr(os, "O_DIRECT"):
        return False, "O_DIRECT not available on this platform"
    path = os.path.join(directory, ".direct-probe")
    buf = mmap.mmap(-1, 4096)  # page-aligned buffer, as O_DIRECT requires
    buf.write(b"\xa5" * 4096)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return False, f"open(O_DIRECT) refused: {exc.strerror}"
        raise
    try:
        os.write(fd, buf)
        return True, "O_DIRECT write ok"
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return False, f"O_DIRECT write refused: {exc.strerror}"
        raise
    finally:
        os.close(fd)
        buf.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def _size_bytes(s: str) -> int:
    s = s.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def job_file(
    scratch: str,
    patterns: list[str],
    *,
    size: str,
    runtime: float,
    ramp: float,
    numjobs: int,
    iodepth: int,
    direct: bool,
    ioengine: str,
) -> str:
    lines = [
        "[global]",
        f"directory={scratch}",
        f"size={size}",
        f"runtime={max(1, int(round(runtime)))}",
        f"ramp_time={int(round(ramp))}",
        "time_based=1",
        f"ioengine={ioengine}",
        f"direct={1 if direct else 0}",
        f"iodepth={iodepth}",
        f"numjobs={numjobs}",
        "group_reporting=1",
        # every pattern works on the same per-clone files: the write jobs lay them out for the reads
        "filename_format=cdfio.$jobnum.$filenum",
        "randrepeat=0",
        "norandommap=1",
        "invalidate=1",
        "fallocate=none",
    ]
    for name in sorted(patterns, key=list(PATTERNS).index):
        rw, bs, _, _ = PATTERNS[name]
        lines += ["", f"[{name}]", f"rw={rw}", f"bs={bs}", "stonewall", "new_group"]
        if rw in ("write", "randwrite") and not direct:
            lines.append("end_fsync=1")  # buffered writes must reach the storage to count
    return "\n".join(lines) + "\n"


# errno of a failed write -> the code of the node fault it means (a mount that cannot be written is
# a failed check from the node's point of view, not "could not judge")
WRITE_ERRNO_CODES = {
    errno.EROFS: "STORAGE_READ_ONLY",
    errno.ENOSPC: "STORAGE_FULL",
    errno.EDQUOT: "STORAGE_FULL",
    errno.EACCES: "STORAGE_NOT_WRITABLE",
    errno.EPERM: "STORAGE_NOT_WRITABLE",
    errno.EIO: "STORAGE_IO_ERROR",
}


def write_failure(ctx: Context, target: str, exc: OSError, what: str) -> None:
    code = WRITE_ERRNO_CODES.get(exc.errno or 0, "STORAGE_NOT_WRITABLE")
    name = errno.errorcode.get(exc.errno or 0, "?")
    ctx.check(
        "storage_writable",
        "fail",
        value=name,
        device=target,
        message=f"cannot {what} on {target}: {exc.strerror or exc} ({name})",
        code=code,
    )


def _target_ready(ctx: Context, target: str, patterns: list[str]) -> bool:
    """The target exists and is on the storage to measure; else the finding, and every pattern not run."""
    if not os.path.isdir(target):
        ctx.check("storage_writable", "fail", value="ENOENT", device=target, code="STORAGE_MISSING",
                  message="the target directory does not exist on this node (volume not mounted?)")
        not_run(ctx, patterns, target, "the target directory does not exist")
        return False
    a = ctx.args
    mount = ctx.record(judge_mount(target, a.mount or ("any" if ctx.cpu else "volume"), a.mountinfo, ctx.cpu))
    if mount.status != "pass":
        not_run(ctx, patterns, target, "the target is not on the storage to measure")
        return False
    return True


def judge_mount(target: str, want: str, mountinfo: str = MOUNTINFO, cpu: bool = False) -> Check:
    """`storage_mount`: the target is on the storage the run is meant to measure. `want`: 'volume'
    (any mount but the root filesystem), 'any', or the mount point it must be on (or below)."""
    m = mount_of(target, mountinfo)
    on_root = same_device_as_root(target)
    where = (f"{m.mount_point} ({m.fstype} {m.source}" + (f", subtree {m.root}" if m.root != "/" else "")
             + f", device {m.device})") if m else f"an unknown mount ({mountinfo} unreadable)"
    if want == "any":
        return Check("storage_mount", "pass", m.mount_point if m else None, threshold="any", device=target,
                     message=f"any filesystem accepted ({'CPU mode default' if cpu else '--mount any'}): on {where}")
    if want == "volume":
        if on_root or (m is not None and m.mount_point == "/"):
            return Check("storage_mount", "error", "/", threshold="a mounted volume", device=target,
                         code="STORAGE_NOT_MOUNTED",
                         message=f"on the container's root filesystem ({where}, the device of /), not on "
                         "a mounted volume: fio would measure the image's own disk. The pod has no volume there "
                         "(the template's `results` volume, or --dir / CLUSTER_DOCTOR_FIO_DIR)")
        if m is None and on_root is None:
            return Check("storage_mount", "error", threshold="a mounted volume", device=target, code="STORAGE_NOT_MOUNTED",
                         message=f"cannot tell which filesystem {target} is on ({mountinfo} and stat unreadable)")
        return Check("storage_mount", "pass", m.mount_point if m else None, threshold="a mounted volume", device=target,
                     message=f"on {where}, a volume: not the root filesystem's device")
    mp = (m.mount_point.rstrip("/") or "/") if m else None
    want_mp = want.rstrip("/") or "/"
    if mp and (mp == want_mp or want_mp == "/" or mp.startswith(want_mp + "/")):
        return Check("storage_mount", "pass", mp, threshold=f"mounted at {want_mp}", device=target,
                     message=f"on {where}, the expected mount {want_mp}")
    return Check("storage_mount", "error", mp, threshold=f"mounted at {want_mp}", device=target, code="STORAGE_NOT_MOUNTED",
                 message=f"{target} is on {where}, not on the expected mount {want_mp} (--mount / CLUSTER_DOCTOR_FIO_MOUNT)")


def not_run(ctx: Context, patterns: list[str], target: str, why: str) -> None:
    """Every pattern a visible not-run when fio could not measure the target."""
    for name in patterns:
        ctx.check(f"{name}_result", "skip", device=target, code="STORAGE_NOT_RUN", message=f"{name} not run: {why}")


def _cleanup_stale(parent: str, node: str) -> None:
    """Scratch directories of this node left by a run that was SIGKILLed (OOM killer, node reboot)."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    now = time.time()
    for e in entries:
        try:
            if e.name.startswith(node + ".") and e.is_dir() and now - e.stat().st_mtime > STALE_SCRATCH_S:
                shutil.rmtree(e.path, ignore_errors=True)
        except OSError:
            pass


def run(ctx: Context) -> None:
    # Long: storage_fio.run: arguments, inventory, tool and directory checks before the scratch run, each a verdict of its own.
    a = ctx.args
    cpu = ctx.cpu
    baselines = Baselines.load(a.baselines)
    profile = a.profile or ("cpu" if cpu else "default")
    floors = _floors(ctx, baselines, profile)
    patterns = [p.strip() for p in a.patterns.split(",") if p.strip()]
    bad = [p for p in patterns if p not in PATTERNS]
    if bad or not patterns:
        raise SuiteError(
            f"unknown pattern(s) {', '.join(bad) or '(none)'}; choose from {', '.join(PATTERNS)}"
        )
    # read-only pattern sets work too: fio lays the files out before reading
    size = a.size or ("16M" if cpu else "1G")
    runtime = a.runtime if a.runtime is not None else (1.0 if cpu else 30.0)
    ramp = a.ramp if a.ramp is not None else (0.0 if cpu else 2.0)
    numjobs = a.numjobs or (1 if cpu else 4)
    iodepth = a.iodepth or (4 if cpu else 16)
    target = os.path.abspath(a.dir or a.output_dir)

    gpus, driver, source = gpu_inventory()
    ctx.environment.update(
        gpu_count=len(gpus), gpu_model=(gpus[0]["name"] if gpus else a.gpu_model), driver=driver
    )
    if a.expected_gpus:  # storage pods may not request GPUs: only judge when told what to expect
        ctx.check_gpu_count(len(gpus), source=source)

    fio = shutil.which(a.fio)
    if not fio:
        raise SuiteError(f"fio not found (looked for {a.fio!r} in PATH)", code="TOOL_MISSING")
    rc, out, err = ctx.run_tool([fio, "--version"], timeout=30)
    version = out.strip() or err.strip()
    ctx.environment["fio"] = version
    if rc != 0 or not version.startswith("fio"):
        raise SuiteError(f"{fio} --version failed (rc {rc}): {one_line(err or out, 120)}")

    if not _target_ready(ctx, target, patterns):
        return
    parent = os.path.join(target, SCRATCH_PARENT)
    scratch = os.path.join(parent, f"{safe_name(ctx.node)}.{os.getpid()}.{int(time.time())}")
    try:
        os.makedirs(parent, exist_ok=True)
        _cleanup_stale(parent, safe_name(ctx.node))
        os.mkdir(scratch, 0o700)
    except OSError as exc:
        write_failure(ctx, target, exc, "create the scratch directory")
        not_run(ctx, patterns, target, "the scratch directory could not be created")
        return
    ctx.register_scratch(scratch)
    try:
        _run_in_scratch(
            ctx,
            fio,
            scratch,
            target,
            patterns,
            floors,
            profile,
            size=size,
            runtime=runtime,
            ramp=ramp,
            numjobs=numjobs,
            iodepth=iodepth,
        )
    finally:
        ctx.cleanup_scratch(scratch)
        try:
            os.rmdir(parent)  # only when no other node is using it
        except OSError:
            pass
        ctx.log(f"scratch directory {scratch} removed")


def _run_in_scratch(
    ctx: Context,
    fio: str,
    scratch: str,
    target: str,
    patterns: list[str],
    floors: dict,
    profile: str,
    *,
    size: str,
    runtime: float,
    ramp: float,
    numjobs: int,
    iodepth: int,
) -> None:
    if not _enough_space(ctx, scratch, target, _size_bytes(size) * numjobs + (64 << 20)):
        not_run(ctx, patterns, target, "not enough free space")
        return
    direct = _direct_io(ctx, scratch, target)
    if direct is None:
        not_run(ctx, patterns, target, "the probe write failed")
        return  # the probe write failed: a storage_writable finding says why
    ioengine = _ioengine(ctx, fio, direct)
    jf = os.path.join(scratch, "cluster-doctor.fio")
    with open(jf, "w") as fh:
        fh.write(job_file(scratch, patterns, size=size, runtime=runtime, ramp=ramp, numjobs=numjobs,
                          iodepth=iodepth, direct=direct, ioengine=ioengine))
    for key, value in (("fio_direct", direct), ("fio_ioengine", ioengine), ("fio_size", size),
                       ("fio_numjobs", numjobs), ("fio_iodepth", iodepth), ("fio_runtime_s", runtime),
                       ("fio_profile", profile)):
        ctx.metric(key, value)
    ctx.set_phase(
        f"fio {', '.join(patterns)} on {target} ({size} x {numjobs} jobs, {fmt(runtime)} s each, "
        f"direct={int(direct)}, {ioengine}, iodepth {iodepth})"
    )
    timeout = len(patterns) * (runtime + ramp) * 2 + (60 if ctx.cpu else 600)
    rc, out, err = ctx.run_tool([fio, "--output-format=json", jf], timeout=timeout, cwd=scratch)
    for line in err.strip().splitlines()[:20]:
        ctx.log(f"fio stderr: {line}")
    try:
        parsed = parsers.parse_fio(out)
    except ValueError as exc:
        first = next((ln for ln in (err + "\n" + out).splitlines() if ln.strip()), "no output")
        raise SuiteError(f"fio exited {rc} without usable JSON ({exc}): {one_line(first, 160)}") from None
    _log_jobs(ctx, parsed)
    judge(ctx, parsed, patterns, floors, target, profile)
    judge_exit(ctx, rc, parsed, target)


def _enough_space(ctx: Context, scratch: str, target: str, need: int) -> bool:
    st = os.statvfs(scratch)
    free = st.f_bavail * st.f_frsize
    ctx.metric("fio_free_bytes", free)
    if free >= need:
        return True
    ctx.check("storage_free_space", "fail", value=round(free / 2**30, 3), unit="GiB",
              threshold=f">= {fmt(need / 2**30)}", device=target, code="STORAGE_FULL",
              message=f"not enough free space in {target}: {fmt(free / 2**30)} GiB free, {fmt(need / 2**30)} GiB needed")
    return False


def _direct_io(ctx: Context, scratch: str, target: str) -> bool | None:
    """Whether to use O_DIRECT (probed); None when the probe could not even write."""
    a = ctx.args
    if a.direct == "off":
        direct, why = False, "disabled by --direct off"
    else:
        try:
            direct, why = probe_direct_io(scratch)
        except OSError as exc:
            write_failure(ctx, target, exc, "write a probe file")
            return None
        if a.direct == "on" and not direct:
            raise SuiteError(f"--direct on, but {target} refuses O_DIRECT ({why})")
    if direct:
        ctx.check("direct_io", "pass", value=True, device=target, message=why)
    else:
        ctx.check("direct_io", "warn", value=False, device=target, code="DIRECT_IO_UNAVAILABLE",
                  message=f"buffered I/O ({why}); reads may be served from the page cache")
        ctx.warn(f"direct I/O unavailable on {target}: {why}")
    return direct


def _ioengine(ctx: Context, fio: str, direct: bool) -> str:
    if ctx.args.ioengine != "auto":
        return ctx.args.ioengine
    if not direct:
        return "psync"
    rc, out, _ = ctx.run_tool([fio, "--enghelp"], timeout=30)
    return "libaio" if rc == 0 and "libaio" in out.split() else "psync"


def _log_jobs(ctx: Context, parsed: dict) -> None:
    for name, job in parsed["jobs"].items():
        for side in ("read", "write"):
            st = job.get(side) or {}
            if st.get("io_bytes"):
                ctx.log(
                    f"fio {name} {side}: {fmt(st['bw_mibps'])} MiB/s, {fmt(st['iops'])} IOPS, "
                    f"p99 {fmt(st['p99_ms'])} ms, {fmt(st['io_bytes'] / 2**20)} MiB, error {job['error']}"
                )


def judge_exit(ctx: Context, rc: int, parsed: dict, target: str) -> None:
    """fio exits with the number of jobs that ended in an error (backend.c: `if (td->error)
    exit_value++`), 1 for a bad job file: an exit code no job error explains is never a pass."""
    with_error = sum(1 for j in parsed["jobs"].values() if j["error"])
    if rc == 0 or with_error:
        return
    ctx.check("fio_exit", "error", value=rc, device=target, code="FIO_EXIT_UNEXPLAINED",
              message=f"fio exited {rc} (jobs with an error, or a bad job file) but its JSON reports no job "
              "error: results not trusted")


def judge(ctx: Context, parsed: dict, patterns: list[str], floors: dict, target: str, profile: str) -> None:
    """Checks per pattern from the parsed fio JSON (pure apart from ctx)."""
    jobs = parsed["jobs"]
    basis = f"profile {profile}"
    for name in patterns:
        _, _, direction, figure = PATTERNS[name]
        fl = floors.get(name, {})
        job = jobs.get(name)
        if job is None:
            ctx.check(
                f"{name}_result", "error", device=target, message=f"fio reported no result for job {name}"
            )
            continue
        stats = job.get(direction)
        if job["error"]:
            ctx.check(
                f"{name}_result",
                "fail",
                value=job["error"],
                device=target,
                message=f"{name}: fio job error {job['error']} ({os.strerror(job['error'])})",
                code=WRITE_ERRNO_CODES.get(job["error"], "STORAGE_IO_ERROR"),
            )
            continue
        if not stats or not stats.get("io_bytes"):
            ctx.check(
                f"{name}_result",
                "fail",
                value=0,
                unit="bytes",
                device=target,
                message=f"{name}: no I/O completed",
            )
            continue
        mibps, iops, p99 = stats["bw_mibps"], stats["iops"], stats["p99_ms"]
        ctx.metric(f"fio_{name}_mibps", mibps, summary=(figure == "mibps"))
        ctx.metric(f"fio_{name}_iops", iops, summary=(figure == "iops"))
        ctx.metric(f"fio_{name}_p99_ms", p99, summary=True)
        if figure == "mibps":
            ctx.at_least(f"{name}_bw", mibps, fl.get("min_mibps"), unit="MiB/s", device=target, basis=basis)
        else:
            ctx.at_least(f"{name}_iops", iops, fl.get("min_iops"), unit="IOPS", device=target, basis=basis)
        if p99 is None:
            ctx.check(
                f"{name}_p99_latency",
                "error",
                device=target,
                unit="ms",
                message=f"{name}: fio reported no completion-latency percentiles",
            )
        else:
            ctx.at_most(
                f"{name}_p99_latency", p99, fl.get("max_p99_ms"), unit="ms", device=target, basis=basis
            )
    extra = sorted(set(jobs) - set(patterns))
    if extra:
        ctx.warn(f"fio reported unexpected jobs: {', '.join(extra)}")


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
