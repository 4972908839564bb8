"""The hand-off to a ticketing or RMA system, the body of the continuous_validation DAG's
``handoff`` task: after quarantine, the documents due go into the outbox of the results DB and the outbox is
drained to the webhook of the Airflow connection the setting ``handoff_conn_id`` names. Off when it is empty
(the default): no document is written, nothing is posted.

* What is handed off: each repeat offender once (named at a time: a node named again after a person released
  it is a new one), and each confirmed failure whose action is ``drain_and_service`` once (a node that passes
  and fails again is a new failure). The documents are built by ``domain.handoff`` from the results: the
  node, its GPU model, the serial numbers its results carry, the failing codes and checks, its transitions
  and a link to its page.
* Nothing is lost: the outbox keeps a document until the webhook answered 2xx; a post that failed (the
  webhook down, a timeout, an HTTP error) is tried again in later runs (``handoff_retry_minutes``, doubling
  up to 6 hours). Each document carries its idempotency key in the ``Idempotency-Key`` header, the same on
  every try, so a receiver that took a post whose answer was lost drops the repeat.
* The secret never sits in the settings: the connection's password signs the body
  (``X-Cluster-Doctor-Signature: sha256=<HMAC-SHA256>``), or is sent as a bearer token with extra
  ``{"auth": "bearer"}``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from cluster_doctor.domain import handoff as docs
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.quarantine import node_action
from cluster_doctor.domain.transitions import REPLACE
from cluster_doctor.store import handoff as outbox
from cluster_doctor.store import quarantine as stored_quarantine
from cluster_doctor.store import transitions as stored_transitions
from cluster_doctor.store.history import ResultStore

log = logging.getLogger(__name__)
NODE_PAGE = "/cluster-doctor/nodes/"  # the web app's node page, under the Airflow UI's base URL
MAX_BACKOFF = dt.timedelta(hours=6)
QUICK_TRIES = 3  # tries of one document within a drain, a second apart, before it waits for a later run
USER_AGENT = "cluster-doctor-handoff/1"


@dataclasses.dataclass(frozen=True)
class Webhook:
    """Where and how to post: from the Airflow connection (``webhook``)."""

    url: str
    secret: str = ""
    bearer: bool = False
    timeout_s: float = 10.0

    def headers(self, key: str, payload: bytes) -> dict[str, str]:
        headers = {"Content-Type": "application/json", docs.KEY_HEADER: key, "User-Agent": USER_AGENT}
        if self.secret and self.bearer:
            headers["Authorization"] = f"Bearer {self.secret}"
        elif self.secret:
            headers[docs.SIGNATURE_HEADER] = docs.signature(payload, self.secret)
        return headers


def webhook(conn_id: str, timeout_s: float) -> Webhook:
    """The webhook of an Airflow connection: its host as a URL (``https://…``), or host, schema and port."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    host = (conn.host or "").strip()
    if not host:
        raise ValueError(f"Airflow connection {conn_id!r} has no host: set the webhook's URL there")
    if "://" not in host:
        host = f"{conn.schema or 'https'}://{host}" + (f":{conn.port}" if conn.port else "")
    extra = conn.extra_dejson or {}
    return Webhook(host, conn.password or "", str(extra.get("auth", "")).lower() == "bearer", timeout_s)


@dataclasses.dataclass
class HandoffReport:
    enabled: bool
    enqueued: list[str] = dataclasses.field(default_factory=list)  # idempotency keys written this run
    sent: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)  # "key: why"
    waiting: int = 0  # documents left in the outbox for a later run

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        if not self.enabled:
            return "hand-off is off (setting handoff_conn_id): nothing posted"
        text = f"hand-off: {len(self.enqueued)} new document(s), {len(self.sent)} posted, {self.waiting} waiting"
        return text + (f"; not taken: {'; '.join(self.failed[:5])}" if self.failed else "")


def _history_base() -> str:
    try:
        from airflow.configuration import conf

        return (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    except Exception:  # noqa: BLE001 - a document without a link is still a ticket
        return ""


def documents(store: ResultStore, tests: list[str], *, now: dt.datetime, history_base: str) -> list[docs.Document]:
    """Every document due now: the open repeat offenders and the confirmed failures needing drain_and_service
    (the outbox keeps each key once, so the same document built again is not sent again)."""
    failing = stored_quarantine.confirmed_failures(store.connect, tests)
    drains = {n: f for n, f in failing.items() if node_action(f) == docs.DRAIN_AND_SERVICE}
    offenders = stored_transitions.repeat_offenders_now(store.connect)
    nodes = sorted(set(drains) | set(offenders))
    facts = outbox.facts(store.connect, nodes, tests) if nodes else {}

    def link(node: str) -> str | None:
        return f"{history_base}{NODE_PAGE}{node}" if history_base else None

    found = []
    for node, offender in sorted(offenders.items()):
        evidence, history = facts.get(node, ([], []))
        codes = [f"{f.test_name}: {f.code}" for f in failing.get(node, [])]
        found.append(docs.document(docs.REPEAT_OFFENDER, docs.repeat_key(node, offender.since), node, action=REPLACE,
                                   reason=f"repeat offender: {offender.cause}", codes=codes, evidence=evidence,
                                   history=history, history_url=link(node), now=now))
    for node, failures in sorted(drains.items()):
        evidence, history = facts.get(node, ([], []))
        found.append(docs.document(
            docs.DRAIN_AND_SERVICE, docs.drain_key(node, [(f.test_name, f.since) for f in failures]), node,
            action=docs.DRAIN_AND_SERVICE, reason="confirmed failure needing drain_and_service",
            codes=[f"{f.test_name}: {f.code}" for f in failures], evidence=evidence, history=history,
            history_url=link(node), now=now))
    return found


Post = Callable[[Webhook, str, bytes], None]


def post(hook: Webhook, key: str, payload: bytes) -> None:
    """POST one document; raises unless the webhook answered 2xx."""
    request = urllib.request.Request(hook.url, data=payload, method="POST", headers=hook.headers(key, payload))
    with urllib.request.urlopen(request, timeout=hook.timeout_s) as response:  # noqa: S310 - the operator's URL
        if not 200 <= response.status < 300:
            raise RuntimeError(f"HTTP {response.status}")


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return one_line(exc.reason, 200)
    return one_line(exc, 200)


def drain(store: ResultStore, hook: Webhook, *, now: dt.datetime, retry: dt.timedelta, report: HandoffReport,
          send: Post = post, sleep: Callable[[float], None] = time.sleep) -> None:
    """Post every document due, oldest first; a document the webhook does not take after ``QUICK_TRIES``
    waits for a later run (backoff) and ends this drain: the rest wait too, untouched."""
    for taken in outbox.due(store.connect, now=now):
        item, error = taken.item, None
        for attempt in range(QUICK_TRIES):
            try:
                send(hook, item.key, item.payload())
                error = None
                break
            except Exception as exc:  # noqa: BLE001 - any failure: the document stays for the next try
                error = _why(exc)
                if attempt + 1 < QUICK_TRIES:
                    sleep(1.0 * (attempt + 1))
        if error is None:
            taken.sent(now)
            report.sent.append(item.key)
            log.info("handed off %s (%s) to the webhook", item.key, item.kind)
            continue
        wait = min(MAX_BACKOFF, retry * (2 ** item.tries))
        taken.failed(error, now + wait)
        report.failed.append(f"{item.key}: {error}")
        log.warning("the webhook did not take %s (%s): kept in the outbox, tried again after %s", item.key, error,
                    now + wait)
        break


def handoff(settings: Any, store: ResultStore, *, now: dt.datetime | None = None, hook: Webhook | None = None,
            send: Post = post, sleep: Callable[[float], None] = time.sleep,
            history_base: str | None = None) -> HandoffReport:
    """Write the documents due into the outbox and drain it (see the module doc); off without
    ``handoff_conn_id``. Never raises for the webhook: what it did not take waits in the outbox."""
    if not settings.handoff_conn_id:
        return HandoffReport(enabled=False)
    now = now or dt.datetime.now(dt.UTC)
    report = HandoffReport(enabled=True)
    base = _history_base() if history_base is None else history_base
    report.enqueued = outbox.enqueue(store.connect, documents(store, list(settings.tests), now=now,
                                                              history_base=base), now=now)
    for key in report.enqueued:
        log.warning("hand-off: %s written to the outbox", key)
    try:
        hook = hook or webhook(settings.handoff_conn_id, settings.handoff_timeout_s)
    except Exception as exc:  # noqa: BLE001 - a missing connection keeps the documents, names the problem
        report.failed.append(f"connection {settings.handoff_conn_id}: {one_line(exc, 300)}")
        log.error("hand-off: the webhook's connection %r is not usable (%s): documents wait in the outbox",
                  settings.handoff_conn_id, one_line(exc, 300))
    else:
        drain(store, hook, now=now, retry=dt.timedelta(minutes=settings.handoff_retry_minutes), report=report,
              send=send, sleep=sleep)
    with store.connection() as conn, conn.cursor() as cur:
        report.waiting = outbox.state(cur).waiting
    log.info("%s", report.describe())
    return report
