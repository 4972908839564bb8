"""A durable spool for attempts the results database did not take, recorded when it takes them again.

When writing a run's attempts fails for any reason (the database unreachable beyond the store's
retries, a permission error, a value it refuses), the record task writes every attempt of its run
here before it fails, so no outage, however long, loses a result. Every later record task (on any
worker, of any run) and ``cluster-doctor db replay`` records the spool first, oldest finished_at
first, then removes what the database holds.

Where: one location every worker shares and that outlives any of them (setting ``spool_dir``): a
path on a shared volume, or an object store URL (``s3://…``, ``gs://…``) that
``cluster_doctor.airflow.storage`` turns into an Airflow ``ObjectStoragePath``. The default,
``$AIRFLOW_HOME/cluster_doctor/spool``, is local to one host: right for LocalExecutor only (under
Celery or Kubernetes executors a spool there waits for a record task that happens to land on the
same host, or dies with the worker pod).

Layout: one JSON file per attempt, named ``<finished_at>-<content hash>.json``: an attempt spooled
twice (a retried task) is one file, names sort in finish order, and a file is only ever complete
(``cluster_doctor.store.files.write_atomic``). Draining is exactly-once: drainers take a lock in the
results database (``ResultStore.exclusive``), so two record tasks on two workers never record the
same file; inserts are idempotent on the attempt identity besides, so a crash between the commit and
the file removal only means the next drain finds duplicates. A file that cannot be read back, or
that the database refuses, is renamed ``*.rejected`` and reported, never deleted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import os
import pathlib
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from cluster_doctor.domain import spans
from cluster_doctor.domain.attempts import Attempt, InvalidAttempt
from cluster_doctor.domain.errors import one_line
from cluster_doctor.store import files
from cluster_doctor.store.history import RecordResult, ResultStore, unavailable

log = logging.getLogger(__name__)

SPOOL_ENV = "CLUSTER_DOCTOR_SPOOL_DIR"  # the setting spool_dir, as the environment sets it
FORMAT = 1
MAX_FILE_BYTES = 4 * 1024 * 1024  # an attempt is a few KiB; anything far larger was not written by us
REPLAY_PAGE = 1000  # attempts per transaction while replaying
STALE_TMP_S = 3600  # a temporary file this old belongs to a writer that died
LOCK = "spool-drain"
LOCK_WAIT_S = 300.0  # a drain of thousands of attempts takes seconds; beyond this the holder is stuck
_STAMP = "%Y%m%dT%H%M%S%fZ"


class SpoolUnwritable(RuntimeError):
    """The attempts could be neither recorded nor spooled: they are only in the task log and XCom."""


def default_dir(env: Mapping[str, str] | None = None) -> pathlib.Path:
    """The per-host default: ``$AIRFLOW_HOME/cluster_doctor/spool``, else ``~/.cluster_doctor/spool``
    (a plain path in ``$CLUSTER_DOCTOR_SPOOL_DIR`` first; a URL there needs the Airflow layer)."""
    env = os.environ if env is None else env
    if env.get(SPOOL_ENV):
        configured = env[SPOOL_ENV]
        if "://" in configured:
            raise ValueError(f"{SPOOL_ENV}={configured}: a URL is opened by cluster_doctor.airflow.storage.spool()")
        return pathlib.Path(configured).expanduser()
    if env.get("AIRFLOW_HOME"):
        return pathlib.Path(env["AIRFLOW_HOME"]) / "cluster_doctor" / "spool"
    return pathlib.Path(os.path.expanduser("~")) / ".cluster_doctor" / "spool"


def _canonical(attempt: Attempt) -> str:
    return json.dumps(attempt.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)


def file_name(attempt: Attempt) -> str:
    digest = hashlib.sha256(_canonical(attempt).encode()).hexdigest()[:32]
    return f"{attempt.finished_at.strftime(_STAMP)}-{digest}.json"


def finished_at(name: str) -> dt.datetime | None:
    """The finish time a spool file's name starts with (None for a name we did not write)."""
    try:
        return dt.datetime.strptime(name.split("-", 1)[0], _STAMP).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    replayed: int = 0  # attempts now in the database (inserted or already there)
    inserted: int = 0
    rejected: tuple[str, ...] = ()  # files set aside, with why
    busy: bool = False  # another drainer held the lock for LOCK_WAIT_S: nothing was done

    def describe(self, where: Any) -> str:
        if self.busy:
            return f"the spool {files.describe(where)} is being drained by another task: left to it"
        text = (f"replayed {self.replayed} spooled attempt(s) from {files.describe(where)}: {self.inserted} "
                f"recorded, {self.replayed - self.inserted} already present")
        if self.rejected:
            text += f"; {len(self.rejected)} set aside as *.rejected"
        return text


@dataclasses.dataclass(frozen=True)
class SpoolStatus:
    """What waits in the spool, for the run summary, the daily report and the metrics."""

    location: str
    waiting: int = 0
    rejected: int = 0
    oldest_at: dt.datetime | None = None  # finish time of the oldest waiting attempt
    error: str | None = None  # the spool could not be read

    def age_s(self, now: dt.datetime) -> float | None:
        return None if self.oldest_at is None else max(0.0, (now - self.oldest_at).total_seconds())

    def describe(self, now: dt.datetime) -> str | None:
        """One line when something waits or the spool is unreadable, else None."""
        if self.error:
            return f"the attempt spool {self.location} could not be read: {self.error}"
        parts = []
        if self.waiting:
            age = self.age_s(now)
            since = f", the oldest finished {spans.duration(age)} ago" if age is not None else ""
            parts.append(f"{self.waiting} attempt(s) wait in the spool {self.location}{since}: the next record "
                         "task that reaches the results database records them")
        if self.rejected:
            parts.append(f"{self.rejected} spooled attempt(s) set aside as *.rejected in {self.location}: "
                         "fix or remove them")
        return "; ".join(parts) or None


class Spool:
    def __init__(self, directory: str | os.PathLike | files.Location | None = None):
        self.directory = files.as_location(directory) if directory else default_dir()

    def __repr__(self) -> str:
        return f"Spool({files.describe(self.directory)!r})"

    @property
    def local(self) -> bool:
        return files.is_local(self.directory)

    # ------------------------------------------------------------------ writing
    def put(self, attempts: Iterable[Attempt]) -> list[Any]:
        """Write each attempt durably (already spooled ones are left as they are); returns the files."""
        paths = []
        for attempt in attempts:
            path = self.directory / file_name(attempt)
            if not path.exists():
                body = json.dumps({"format": FORMAT, "attempt": attempt.to_dict()}, sort_keys=True,
                                  allow_nan=False).encode()
                files.write_atomic(path, body, mode=0o600)
            paths.append(path)
        return paths

    # ------------------------------------------------------------------ reading
    def _entries(self) -> list[Any]:
        try:
            return [p for p in self.directory.iterdir() if not p.name.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def files(self) -> list[Any]:
        """Spooled files, oldest finished_at first."""
        return sorted((p for p in self._entries() if p.name.endswith(".json")), key=lambda p: p.name)

    def __len__(self) -> int:
        return len(self.files())

    def status(self) -> SpoolStatus:
        """Never raises: an unreadable spool is reported as such."""
        where = files.describe(self.directory)
        try:
            entries = self._entries()
        except Exception as exc:  # noqa: BLE001 - permissions, credentials, a missing bucket: say so
            return SpoolStatus(where, error=one_line(exc, 200))
        waiting = sorted(p.name for p in entries if p.name.endswith(".json"))
        stamps = [t for t in map(finished_at, waiting) if t is not None]
        return SpoolStatus(where, waiting=len(waiting), rejected=sum(p.name.endswith(".rejected") for p in entries),
                           oldest_at=min(stamps) if stamps else None)

    def _load(self, path: Any) -> Attempt:
        data = path.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            raise InvalidAttempt(f"larger than {MAX_FILE_BYTES} bytes")
        try:
            data = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise InvalidAttempt(f"not a spooled attempt ({type(exc).__name__})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("attempt"), dict):
            raise InvalidAttempt(f"not a spooled attempt of format {FORMAT}")
        return Attempt.from_dict(data["attempt"])

    def _reject(self, path: Any, why: str) -> str:
        with contextlib.suppress(FileNotFoundError):
            path.rename(path.parent / (path.name + ".rejected"))
        log.error("spooled attempt %s set aside (%s): fix or remove %s.rejected", path.name, why, path)
        return f"{path.name}: {why}"

    def _remove(self, paths: Sequence[Any]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self.local:
            files.fsync_dir(self.directory)

    def _clean_stale_tmp(self) -> None:
        cutoff = time.time() - STALE_TMP_S
        try:
            entries = list(self.directory.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return
        for tmp in entries:
            if tmp.name.startswith(".") and tmp.name.endswith(".tmp"):
                with contextlib.suppress(Exception):
                    if tmp.stat().st_mtime < cutoff:
                        tmp.unlink()

    # ------------------------------------------------------------------ replay
    def replay(self, store: ResultStore, *, wait_s: float = LOCK_WAIT_S) -> ReplayResult:
        """Record every spooled attempt, in finish order, and remove those the database now holds.

        One drainer at a time across every host (the lock in the results database); one that waits
        longer than ``wait_s`` leaves the spool to the holder. Raises what the store raises when the
        database is unreachable or refuses every write: the files stay for later."""
        if not self.files():
            return ReplayResult()
        with store.exclusive(LOCK, wait_s=wait_s) as held:
            if not held:
                outcome = ReplayResult(busy=True)
            else:
                outcome = self._drain(store)  # listed again under the lock: what a former holder left
        log.info("%s", outcome.describe(self.directory))
        return outcome

    def _drain(self, store: ResultStore) -> ReplayResult:
        self._clean_stale_tmp()
        rejected: list[str] = []
        loaded: list[tuple[Any, Attempt]] = []
        for path in self.files():
            try:
                loaded.append((path, self._load(path)))
            except FileNotFoundError:
                continue  # removed by `cluster-doctor db replay` against another database, or by hand
            except (InvalidAttempt, OSError) as exc:
                rejected.append(self._reject(path, one_line(exc, 300)))
        replayed = inserted = 0
        for start in range(0, len(loaded), REPLAY_PAGE):
            page = loaded[start:start + REPLAY_PAGE]
            try:
                result = store.record([a for _, a in page])
            except Exception as exc:
                if unavailable(exc) or not _attempt_specific(exc):
                    raise  # the database (or our access to it) is the problem: every file stays
                # one attempt the database refuses must not hold back the others: one by one
                result, refused = self._record_one_by_one(store, page)
                rejected += refused
            for conflict in result.conflicts:
                log.warning("spooled attempt not recorded, its identity holds a different attempt: %s", conflict)
            replayed += result.inserted + result.duplicates + len(result.conflicts)
            inserted += result.inserted
            self._remove([p for p, _ in page if p.exists()])
        return ReplayResult(replayed=replayed, inserted=inserted, rejected=tuple(rejected))

    def _record_one_by_one(self, store: ResultStore,
                           page: Sequence[tuple[Any, Attempt]]) -> tuple[RecordResult, list[str]]:
        inserted = duplicates = 0
        conflicts: list[str] = []
        refused: list[str] = []
        for path, attempt in page:
            try:
                result = store.record([attempt])
            except Exception as exc:
                if not _attempt_specific(exc):
                    raise
                refused.append(self._reject(path, one_line(exc, 300)))
                continue
            inserted += result.inserted
            duplicates += result.duplicates
            conflicts += result.conflicts
        return RecordResult(inserted, duplicates, tuple(conflicts)), refused


def _attempt_specific(exc: BaseException) -> bool:
    """A refusal of one attempt's content (set that file aside), not of the database or our access."""
    return isinstance(exc, (InvalidAttempt, psycopg.DataError, psycopg.IntegrityError))


def record_or_spool(store: ResultStore, attempts: Sequence[Attempt], spool: Spool | None = None) -> RecordResult:
    """Record what the spool holds, then ``attempts``. If writing ``attempts`` fails for any reason,
    spool them durably and raise (the caller fails: the results are late, not lost); if spooling
    fails too, log every attempt in full and raise ``SpoolUnwritable``.

    A spool that cannot be drained while the database is reachable does not hold this run's
    attempts back: they are recorded, and the spool's state is reported by the run summary."""
    spool = Spool() if spool is None else spool  # an empty Spool is falsy (len 0)
    failure: BaseException | None = None
    try:
        spool.replay(store)
    except Exception as exc:  # noqa: BLE001 - whatever fails here, this run's attempts are still recorded or spooled
        if unavailable(exc):
            failure = exc  # the database is down: recording this run's attempts would fail the same way
        else:
            log.error("could not record the spool %s (%s); this run's attempts are recorded regardless",
                      files.describe(spool.directory), one_line(exc, 300))
    if failure is None:
        try:
            return store.record(attempts)
        except Exception as exc:  # noqa: BLE001 - any failure to write spools the attempts
            failure = exc
    if not attempts:
        raise failure
    try:
        paths = spool.put(attempts)
    except Exception as spool_exc:  # noqa: BLE001 - OSError locally, fsspec's own errors for object stores
        for attempt in attempts:  # the last copy outside XCom: what an operator re-records by hand
            log.error("UNRECORDED ATTEMPT %s", _canonical(attempt))
        raise SpoolUnwritable(
            f"{len(attempts)} attempt(s) could not be recorded ({one_line(failure, 200)}) nor spooled to "
            f"{files.describe(spool.directory)} ({one_line(spool_exc, 200)}): each is logged above as UNRECORDED "
            "ATTEMPT (`cluster-doctor record --attempts` takes them)") from failure
    log.error("results not recorded (%s): %d attempt(s) spooled to %s (%d waiting in all); the next record task "
              "that reaches the database, or `cluster-doctor db replay`, records them",
              one_line(failure, 300), len(paths), files.describe(spool.directory), len(spool))
    raise failure
