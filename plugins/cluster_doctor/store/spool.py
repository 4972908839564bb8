"""A durable spool for attempts the results database could not take, replayed when it is back.

When the database stays unreachable beyond the store's retries, the record task writes every attempt
of its run here before it fails, so no outage, however long, loses a result. The first later write
that reaches the database (the next run's record task, or ``cluster-doctor db replay``) records the
spool first, oldest finished_at first, then removes what the database holds.

Layout: one JSON file per attempt in one directory, named ``<finished_at>-<content hash>.json``: an
attempt spooled twice (a retried task) is one file, names sort in finish order, and a file is only
ever complete (written to a temporary name, fsync'd, renamed, directory fsync'd). Replay is
idempotent: the store ignores identities it already holds, and a crash between the database commit
and the file removal only means the next replay finds them as duplicates. A file that cannot be read
back, or that the database refuses, is renamed ``*.rejected`` and reported, never deleted.

The directory: ``$CLUSTER_DOCTOR_SPOOL_DIR``, else ``$AIRFLOW_HOME/cluster_doctor/spool``, else
``~/.cluster_doctor/spool``. With workers on several hosts, point it at storage they all mount (the
results PVC, NFS), or each host's spool is replayed by the next record task that runs on that host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from cluster_doctor.domain.attempts import Attempt, InvalidAttempt
from cluster_doctor.domain.errors import one_line
from cluster_doctor.store.history import RecordResult, unavailable

log = logging.getLogger(__name__)

SPOOL_ENV = "CLUSTER_DOCTOR_SPOOL_DIR"
FORMAT = 1
MAX_FILE_BYTES = 4 * 1024 * 1024  # an attempt is a few KiB; anything far larger was not written by us
REPLAY_PAGE = 1000  # attempts per transaction while replaying
STALE_TMP_S = 3600  # a temporary file this old belongs to a writer that died


def default_dir(env: Mapping[str, str] | None = None) -> pathlib.Path:
    env = os.environ if env is None else env
    if env.get(SPOOL_ENV):
        return pathlib.Path(env[SPOOL_ENV])
    if env.get("AIRFLOW_HOME"):
        return pathlib.Path(env["AIRFLOW_HOME"]) / "cluster_doctor" / "spool"
    return pathlib.Path(os.path.expanduser("~")) / ".cluster_doctor" / "spool"


def _canonical(attempt: Attempt) -> str:
    return json.dumps(attempt.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)


def file_name(attempt: Attempt) -> str:
    digest = hashlib.sha256(_canonical(attempt).encode()).hexdigest()[:32]
    return f"{attempt.finished_at.strftime('%Y%m%dT%H%M%S%fZ')}-{digest}.json"


def _fsync_dir(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    replayed: int = 0  # attempts now in the database (inserted or already there)
    inserted: int = 0
    rejected: tuple[str, ...] = ()  # files set aside, with why

    def describe(self, where: pathlib.Path) -> str:
        text = (f"replayed {self.replayed} spooled attempt(s) from {where}: {self.inserted} recorded, "
                f"{self.replayed - self.inserted} already present")
        if self.rejected:
            text += f"; {len(self.rejected)} set aside as *.rejected"
        return text


class Spool:
    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = pathlib.Path(directory) if directory else default_dir()

    def __repr__(self) -> str:
        return f"Spool({str(self.directory)!r})"

    # ------------------------------------------------------------------ writing
    def put(self, attempts: Iterable[Attempt]) -> list[pathlib.Path]:
        """Write each attempt durably (already spooled ones are left as they are); returns the files."""
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for attempt in attempts:
            path = self.directory / file_name(attempt)
            if not path.exists():
                body = json.dumps({"format": FORMAT, "attempt": attempt.to_dict()}, sort_keys=True,
                                  allow_nan=False).encode()
                tmp = self.directory / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    with os.fdopen(fd, "wb") as fh:
                        fh.write(body)
                        fh.flush()
                        os.fsync(fh.fileno())
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                    raise
            paths.append(path)
        _fsync_dir(self.directory)
        return paths

    # ------------------------------------------------------------------ reading
    def files(self) -> list[pathlib.Path]:
        """Spooled files, oldest finished_at first."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.glob("*.json") if not p.name.startswith("."))

    def __len__(self) -> int:
        return len(self.files())

    def _load(self, path: pathlib.Path) -> Attempt:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InvalidAttempt(f"larger than {MAX_FILE_BYTES} bytes")
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise InvalidAttempt(f"not a spooled attempt ({type(exc).__name__})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("attempt"), dict):
            raise InvalidAttempt(f"not a spooled attempt of format {FORMAT}")
        return Attempt.from_dict(data["attempt"])

    def _reject(self, path: pathlib.Path, why: str) -> str:
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, path.with_name(path.name + ".rejected"))
        log.error("spooled attempt %s set aside (%s): fix or remove %s.rejected", path.name, why, path)
        return f"{path.name}: {why}"

    def _remove(self, paths: Sequence[pathlib.Path]) -> None:
        for path in paths:
            path.unlink(missing_ok=True)  # a concurrent replay may have removed it already
        _fsync_dir(self.directory)

    def _clean_stale_tmp(self) -> None:
        cutoff = time.time() - STALE_TMP_S
        for tmp in self.directory.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                if tmp.stat().st_mtime < cutoff:
                    tmp.unlink()

    # ------------------------------------------------------------------ replay
    def replay(self, store: Any) -> ReplayResult:
        """Record every spooled attempt, in finish order, and remove those the database now holds.

        Raises what the store raises when the database is unreachable: the files stay for later."""
        files = self.files()
        if not files:
            return ReplayResult()
        self._clean_stale_tmp()
        rejected: list[str] = []
        loaded: list[tuple[pathlib.Path, Attempt]] = []
        for path in files:
            try:
                loaded.append((path, self._load(path)))
            except FileNotFoundError:
                continue  # replayed and removed by a concurrent replay
            except (InvalidAttempt, OSError) as exc:
                rejected.append(self._reject(path, str(exc)))
        replayed = inserted = 0
        for start in range(0, len(loaded), REPLAY_PAGE):
            page = loaded[start:start + REPLAY_PAGE]
            try:
                result = store.record([a for _, a in page])
            except Exception as exc:
                if unavailable(exc):
                    raise
                # one attempt the database refuses must not hold back the others: one by one
                result, refused = self._record_one_by_one(store, page)
                rejected += refused
            for conflict in result.conflicts:
                log.warning("spooled attempt not recorded, its identity holds a different attempt: %s", conflict)
            replayed += result.inserted + result.duplicates + len(result.conflicts)
            inserted += result.inserted
            self._remove([p for p, _ in page if p.exists()])
        outcome = ReplayResult(replayed=replayed, inserted=inserted, rejected=tuple(rejected))
        log.info("%s", outcome.describe(self.directory))
        return outcome

    def _record_one_by_one(self, store: Any, page: Sequence[tuple[pathlib.Path, Attempt]]) -> tuple[RecordResult, list[str]]:
        inserted = duplicates = 0
        conflicts: list[str] = []
        refused: list[str] = []
        for path, attempt in page:
            try:
                result = store.record([attempt])
            except (InvalidAttempt, psycopg.DataError, psycopg.IntegrityError) as exc:
                refused.append(self._reject(path, one_line(exc, 300)))
                continue
            inserted += result.inserted
            duplicates += result.duplicates
            conflicts += result.conflicts
        return RecordResult(inserted, duplicates, tuple(conflicts)), refused


def record_or_spool(store: Any, attempts: Sequence[Attempt], spool: Spool | None = None) -> RecordResult:
    """Record earlier runs' spooled attempts, then these; if the database is unavailable, spool these
    durably and raise (the caller still fails: the results are late, not lost)."""
    spool = Spool() if spool is None else spool  # an empty Spool is falsy (len 0)
    try:
        spool.replay(store)
        return store.record(attempts)
    except Exception as exc:
        if not unavailable(exc):
            raise
        try:
            paths = spool.put(attempts)
        except OSError as spool_exc:
            log.error("could not spool %d attempt(s) to %s either (%s): they are only in this run's XCom",
                      len(attempts), spool.directory, spool_exc)
            raise exc from spool_exc
        log.error("results database unavailable: %d attempt(s) spooled to %s (%d waiting in all); the next run "
                  "that reaches the database, or `cluster-doctor db replay`, records them",
                  len(paths), spool.directory, len(spool))
        raise
