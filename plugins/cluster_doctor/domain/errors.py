"""One line of error text: what every log line, one-line error and stored reason is built from."""

from __future__ import annotations


def one_line(value: object, limit: int = 400) -> str:
    """``value`` (an exception or any text) as one line of at most ``limit`` characters: whitespace
    runs, newlines included, collapse to one space; an exception without a message is named by its
    type, so the line is never empty."""
    text = " ".join(str(value).split())
    if not text and isinstance(value, BaseException):
        text = type(value).__name__
    return text[:limit]


def clipped(value: object, limit: int) -> str:
    """``value`` as one line for people: whitespace runs collapse to one space, and a line over
    ``limit`` characters ends in "…" so a reader sees it was cut."""
    line = " ".join(str(value or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
