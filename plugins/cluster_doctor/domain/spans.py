"""How a span of time reads wherever a person sees it (pages, CLI, reports, logs, node conditions):
'40 s', '1 min', '2 h 5 min', '3 d 4 h' — one function, so '1 min ago' is never '0.01668 h ago'."""

from __future__ import annotations


def duration(seconds: float | None, missing: str = "-") -> str:
    """A span in words: whole units after rounding to the second, the two largest ('59 min' until the
    hour is full; '12 d 3 h'); ``missing`` when unknown. The suites' ``harness.text.ago_h`` says an
    age the same way (they never import the library; a test keeps the two equal)."""
    if seconds is None:
        return missing
    seconds = max(0, round(seconds))
    days, rem = divmod(seconds, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min" if minutes else f"{secs} s"
