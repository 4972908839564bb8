"""Memory pattern test: most of the device's free memory (a fraction, baselines.yaml
dl_unit.memory_fraction) allocated in chunks, written with a position-dependent pattern and then its
bitwise complement, and read back word for word; memory already in use before the test is a warning."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from ..harness.context import Context
from ..harness.text import fmt, one_line
from .devices import Dev, sync
from .judged import Judged, record


@dataclass(frozen=True)
class InUse:
    """A GPU's memory before the test (torch.cuda.mem_get_info)."""

    device: str
    where: str
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class PatternTest:
    device: str
    where: str
    target_bytes: int  # what the test meant to cover
    tested_gib: float  # what it could allocate and test
    bad_words: int  # 32-bit words read back wrong, both polarities
    first_bad: str | None  # where the first wrong word was
    oom: str | None  # why the allocation stopped early, if it did


def in_use_checks(u: InUse) -> Judged:
    """More than 2 GiB + 5 % of the GPU in use before the test: another process? (a warning)."""
    out = Judged()
    used_gib = (u.total_bytes - u.free_bytes) / 2**30
    out.metric(f"memory_in_use_gib.{u.device.replace(':', '')}", used_gib)
    if used_gib > 2.0 + 0.05 * u.total_bytes / 2**30:
        out.checks.append(Check(
            "memory_in_use", "warn", value=round(used_gib, 2), unit="GiB", device=u.device,
            message=f"{fmt(used_gib)} GiB of {fmt(u.total_bytes / 2**30)} GiB already in use before the test "
            f"(another process?){u.where}"))
    return out


def to_checks(p: PatternTest) -> Judged:
    """`memory_pattern`: fail on any wrong word, error when nothing could be allocated, warn when less
    than half the target was tested."""
    out = Judged()
    out.metric(f"memory_tested_gib.{p.device.replace(':', '')}", p.tested_gib)
    if p.bad_words:
        out.checks.append(Check(
            "memory_pattern", "fail", value=p.bad_words, unit="words", threshold="== 0", device=p.device,
            message=f"{p.bad_words} 32-bit word(s) read back wrong in {fmt(p.tested_gib)} GiB, "
            f"first in {p.first_bad}{p.where}"))
    elif not p.tested_gib:
        out.checks.append(Check(
            "memory_pattern", "error", value=0, unit="GiB", device=p.device,
            message=f"could not allocate memory to test ({p.oom or 'target too small'})"))
    else:
        short = p.tested_gib * 2**30 < 0.5 * p.target_bytes
        out.checks.append(Check(
            "memory_pattern", "warn" if short else "pass", value=round(p.tested_gib, 3), unit="GiB tested",
            device=p.device,
            message=f"{fmt(p.tested_gib)} GiB written twice (pattern, complement) and verified"
            + (f"; allocation stopped early: {p.oom}" if short and p.oom else "")))
    return out


def run(ctx: Context, torch, dev: Dev, fraction: float, cpu_mib: int) -> None:
    cuda = dev.tdev.type == "cuda"
    if cuda:
        free, total = torch.cuda.mem_get_info(dev.tdev)
        record(ctx, in_use_checks(InUse(dev.name, dev.where, free, total)))
        target = int(free * fraction)
    else:
        target = cpu_mib << 20
    result = pattern_test(torch, dev, target)  # its chunks are freed when it returns
    if cuda:
        torch.cuda.empty_cache()
    record(ctx, to_checks(result))


def pattern_test(torch, dev: Dev, target: int) -> PatternTest:
    """Allocate up to `target` bytes in chunks, write and verify the pattern, then its complement:
    every bit is tested as 0 and as 1."""
    chunk_mib = 8 if dev.tdev.type == "cpu" else 256
    base = torch.arange((chunk_mib << 20) // 4, dtype=torch.int32, device=dev.tdev)
    chunks, oom = _allocate(torch, dev, target, chunk_mib)
    bad, first_bad = 0, None
    for polarity in (0, -1):
        for i, c in enumerate(chunks):
            c.copy_(base).bitwise_xor_(_seed(i))
            if polarity:
                c.bitwise_not_()
        sync(torch, [dev])
        wrong, where = _verify(chunks, base, polarity, chunk_mib)
        bad += wrong
        first_bad = first_bad if first_bad is not None else where
    return PatternTest(dev.name, dev.where, target, len(chunks) * chunk_mib / 1024, bad, first_bad, oom)


def _seed(i: int) -> int:
    return (0x5A5A5A5A ^ (i * 0x9E3779B1)) & 0x7FFFFFFF


def _allocate(torch, dev: Dev, target: int, chunk_mib: int) -> tuple[list, str | None]:
    """Chunks up to the target, room left for `base` and the verify temporary; (chunks, why it stopped early)."""
    chunk_elems = (chunk_mib << 20) // 4
    chunks, oom = [], None
    try:
        while (len(chunks) + 2) * (chunk_mib << 20) <= target:  # +1 for `base`, +1 for the verify temporary
            chunks.append(torch.empty(chunk_elems, dtype=torch.int32, device=dev.tdev))
    except (RuntimeError, MemoryError) as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
        oom = one_line(exc, 120)
        del chunks[-2:]  # leave room for the verification temporaries
        if dev.tdev.type == "cuda":
            torch.cuda.empty_cache()
    return chunks, oom


def _verify(chunks: list, base, polarity: int, chunk_mib: int) -> tuple[int, str | None]:
    """(wrong words, where the first is) of one polarity."""
    bad, first_bad = 0, None
    for i, c in enumerate(chunks):
        want = base.bitwise_xor(_seed(i))
        if polarity:
            want.bitwise_not_()
        n = int((c != want).sum().item())
        if n and first_bad is None:
            first_bad = f"chunk {i} ({i * chunk_mib} MiB offset), polarity {'inverted' if polarity else 'plain'}"
        bad += n
        del want
    return bad, first_bad
