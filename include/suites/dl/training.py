"""Training smoke test: a small CNN learns 10 noisy templates on one device (conv/linear forward and
backward and the optimizer, end to end, bf16 autocast on GPUs); the loss must fall."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..harness.checks import Check, at_most
from ..harness.context import Context
from ..harness.text import fmt
from .devices import Dev
from .judged import Judged, record


@dataclass(frozen=True)
class TrainingRun:
    device: str
    where: str
    steps: int
    losses: list[float]  # one per step


def to_checks(t: TrainingRun, ratio: float) -> Judged:
    """`training_smoke`: the mean loss of the last steps over that of the first at most `ratio`;
    a loss that became NaN or inf fails."""
    out = Judged()
    k = max(1, min(5, t.steps // 4))
    first, last = statistics.fmean(t.losses[:k]), statistics.fmean(t.losses[-k:])
    r = last / first if first > 0 else float("inf")
    out.metric(f"training_loss_ratio.{t.device.replace(':', '')}", r)
    if not all(math.isfinite(v) for v in t.losses):
        out.checks.append(Check("training_smoke", "fail", device=t.device, value="nan",
                                message=f"loss became non-finite during training{t.where}"))
        return out
    out.checks.append(at_most(
        "training_smoke", r, ratio, unit="loss ratio", device=t.device,
        basis=f"loss {fmt(first)} -> {fmt(last)} in {t.steps} steps{t.where if r > ratio else ''}"))
    return out


def run(ctx: Context, torch, dev: Dev, steps: int, ratio: float) -> None:
    record(ctx, to_checks(TrainingRun(dev.name, dev.where, steps, train(torch, dev, steps)), ratio))


def train(torch, dev: Dev, steps: int) -> list[float]:
    """The loss of each step of training the CNN on `dev` from fixed seeds."""
    nn = torch.nn
    g = torch.Generator().manual_seed(99)
    side = 16
    templates = torch.randn(10, 1, side, side, generator=g)
    torch.manual_seed(5)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.GELU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.GELU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).to(dev.tdev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    amp = dev.tdev.type == "cuda"
    losses = []
    for _ in range(steps):
        y = torch.randint(0, 10, (128,), generator=g)
        x = templates[y] + 0.8 * torch.randn(128, 1, side, side, generator=g)
        x, y = x.to(dev.tdev, non_blocking=True), y.to(dev.tdev, non_blocking=True)
        with torch.autocast(device_type=dev.tdev.type, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu()]
