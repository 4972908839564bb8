"""timestamptz values Python cannot hold (past year 9999, ±infinity) read as None, counted."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import psycopg.types.datetime

from cluster_doctor.domain.numbers import skip


class LenientTimestamptzLoader(psycopg.types.datetime.TimestamptzLoader):
    """Reads a timestamptz Python cannot hold (past year 9999, ±infinity) as None, counted, instead of
    failing the whole query."""

    def load(self, data: Any) -> dt.datetime | None:
        try:
            return super().load(data)
        except psycopg.DataError:
            skip("timestamp")
            return None


def lenient_timestamps(conn: Any) -> Any:
    """Make every timestamptz read on ``conn`` lenient (text results, the default)."""
    conn.adapters.register_loader("timestamptz", LenientTimestamptzLoader)
    return conn
