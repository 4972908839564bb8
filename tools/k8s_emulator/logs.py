"""Container log buffers: timestamped lines, follow-able until the container ends (like the kubelet's
CRI log files behind GET .../pods/NAME/log)."""

from __future__ import annotations

import threading
import time

from .util import rfc3339_nano


class LogBuffer:
    def __init__(self):
        self._lines: list[tuple[float, bytes]] = []  # (timestamp, line including its trailing newline)
        self._cond = threading.Condition()
        self.closed = False
        self.size = 0

    def write_line(self, data: bytes, ts: float | None = None):
        if not data:
            return
        if not data.endswith(b"\n"):
            data += b"\n"
        with self._cond:
            self._lines.append((time.time() if ts is None else ts, data))
            self.size += len(data)
            self._cond.notify_all()

    def write_text(self, text: str):
        for line in text.splitlines():
            self.write_line(line.encode() + b"\n")

    def close(self):
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def text(self) -> str:
        with self._cond:
            return b"".join(d for _, d in self._lines).decode("utf-8", "replace")

    def tail_bytes(self, max_lines: int, max_bytes: int) -> str:
        """What FallbackToLogsOnError puts in the termination message: the last lines, capped in bytes."""
        with self._cond:
            data = b"".join(d for _, d in self._lines[-max_lines:])
        return data[-max_bytes:].decode("utf-8", "replace")

    def _select(self, since: float | None, tail: int | None) -> int:
        lines = self._lines
        start = 0
        if since is not None:
            while start < len(lines) and lines[start][0] < since:
                start += 1
        if tail is not None:
            start = max(start, len(lines) - tail)
        return start

    @staticmethod
    def _fmt(ts: float, data: bytes, timestamps: bool) -> bytes:
        return (rfc3339_nano(ts).encode() + b" " + data) if timestamps else data

    def read(
        self,
        *,
        since: float | None = None,
        tail: int | None = None,
        timestamps: bool = False,
        limit_bytes: int | None = None,
    ) -> bytes:
        with self._cond:
            start = self._select(since, tail)
            out = b"".join(self._fmt(ts, d, timestamps) for ts, d in self._lines[start:])
        return out[:limit_bytes] if limit_bytes else out

    def follow(
        self,
        *,
        since: float | None = None,
        tail: int | None = None,
        timestamps: bool = False,
        stop: threading.Event | None = None,
        poll: float = 0.5,
    ):
        """Yield formatted lines as they come; ends when the buffer is closed (container terminated)."""
        with self._cond:
            i = self._select(since, tail)
        while True:
            with self._cond:
                while i >= len(self._lines) and not self.closed and not (stop and stop.is_set()):
                    self._cond.wait(poll)
                batch = self._lines[i:]
                i += len(batch)
                done = self.closed or (stop is not None and stop.is_set())
            if batch:
                yield b"".join(self._fmt(ts, d, timestamps) for ts, d in batch)
            if done and i >= len(self._lines):
                return
