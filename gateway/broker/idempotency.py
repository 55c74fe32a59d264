"""Duplicate detection of resent SENDs: the idempotency window (issue 35).

A client whose SEND got no RECEIPT (its gateway died and a standby took over)
resends it; when it marks the message with ``x-dedup-id`` (or ActiveMQ
Artemis' duplicate-id header ``_AMQ_DUPL_ID``), the embedded broker remembers
the id per destination for a bounded window (``[broker] dedup_window`` ids,
``dedup_window_seconds`` old) and settles a second message with the same id as
done, without storing or delivering it again: the client gets its RECEIPT.

:class:`IdempotentSends` is the window and the sends under way; a send is in
the window once it is settled (stored), never before.  :class:`SendIdTable` is
the window's SQL: the SQLite store writes a persistent message's id in the
transaction that stores the message and reads the window back at start-up,
so it survives a takeover.  This module does not know the broker's queues.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gateway.message.model import Message

DEDUP_HEADER = "x-dedup-id"
"""The documented header: the sender's id of the message, the same on every resend."""
ARTEMIS_HEADER = "_AMQ_DUPL_ID"
"""ActiveMQ Artemis' duplicate-detection header, accepted too (``x-dedup-id`` wins when both are set)."""

DEFAULT_WINDOW = 100_000
"""Ids remembered at most (the oldest are forgotten first)."""
DEFAULT_WINDOW_SECONDS = 86_400
"""Seconds an id is remembered at most (a day)."""

SendId = tuple[str, int]
"""A remembered id: (key: destination, newline, the id; when it was stored, in ms)."""


def send_key(message: Message) -> str | None:
    """The window's key of ``message`` (its destination and id), None when it carries no id."""
    properties = message.properties
    if not properties:
        return None
    value = properties.get(DEDUP_HEADER)
    if value is None or value == "":
        value = properties.get(ARTEMIS_HEADER)
        if value is None or value == "":
            return None
    return message.destination + "\n" + (value if isinstance(value, str) else repr(value))


def has_send_id(message: Message) -> bool:
    """Whether ``message`` carries an idempotency key (the broker's hot path asks this first)."""
    properties = message.properties
    return bool(properties) and (DEDUP_HEADER in properties or ARTEMIS_HEADER in properties)


class IdempotentSends:
    """The window of settled ids and the sends with an id under way.

    :param clock: the reactor (its ``seconds``: when an id was stored).
    :param size: most ids kept (0: duplicates are not detected).
    :param seconds: longest an id is kept.
    :param parts: the messages a message stands for (a composite destination's parts);
        it is a duplicate when each part's id is in the window.
    :param registry: where ``jmsgateway_broker_duplicate_sends_total`` and
        ``jmsgateway_broker_dedup_window_ids`` are registered.
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, size: int = DEFAULT_WINDOW, seconds: int = DEFAULT_WINDOW_SECONDS, *,
                 parts: Callable[[Message], list[Message]] = lambda message: [message],
                 registry: CollectorRegistry | None = None) -> None:
        self.clock = clock
        self.size = size
        self.seconds = seconds
        self._parts = parts
        self._window: OrderedDict[str, int] = OrderedDict()
        """key -> when it was settled (ms), oldest first."""
        self._pending: dict[str, list[Deferred[None]]] = {}
        """Keys of sends under way -> who waits for them to settle."""
        self.duplicates = 0
        """Sends settled as duplicates."""
        if registry is not None:
            registry.register(_WindowCollector(self))

    def __len__(self) -> int:
        return len(self._window)

    def _now(self) -> int:
        return int(self.clock.seconds() * 1000)

    def __contains__(self, key: str) -> bool:
        at = self._window.get(key)
        return at is not None and at > self._now() - self.seconds * 1000

    def recover(self, stored: Iterable[SendId], *, quiet: bool = False) -> None:
        """Remember the ids a store read back at start-up (oldest first); ``quiet``: the caller logs."""
        for key, at in stored:
            self._remember(key, at)
        self._trim(self._now())
        if self._window and not quiet:
            self.log.info("embedded broker recovered {count} idempotency keys (x-dedup-id)", count=len(self._window))

    def _remember(self, key: str, at: int) -> None:
        self._window[key] = at
        self._window.move_to_end(key)

    def _trim(self, now: int) -> None:
        window = self._window
        oldest = now - self.seconds * 1000
        while window and (len(window) > self.size or next(iter(window.values())) <= oldest):
            window.popitem(last=False)

    def send(self, messages: list[Message],
             send: Callable[[list[Message]], Deferred[None] | None]) -> Deferred[None] | None:
        """Send the messages of ``messages`` whose id is not in the window through ``send``; the
        others are settled at once (duplicates).  A message whose id is under way waits for that
        send: a duplicate if it was stored, sent again if it failed.  Returns what ``send``
        returned (None when nothing was sent)."""
        if not self.size:
            return send(messages)
        keyed = [(message, [key for part in self._parts(message) if (key := send_key(part)) is not None])
                 for message in messages]
        busy = {key for _, keys in keyed for key in keys if key in self._pending}
        if busy:
            return self._after(busy).addCallback(lambda _: self.send(messages, send))
        fresh: list[Message] = []
        sending: list[str] = []
        for message, keys in keyed:
            if keys and all(key in self or key in sending for key in keys):
                self.duplicates += 1
                now = self._now()
                self.log.info("duplicate SEND to {destination} acknowledged, not stored again (idempotency key "
                              "{key!r} was stored {age:.1f}s ago)", destination=message.destination,
                              key=keys[0].split("\n", 1)[1], age=(now - self._window.get(keys[0], now)) / 1000)
                continue
            fresh.append(message)
            sending.extend(keys)
        if not fresh:
            return None
        if not sending:
            return send(fresh)
        for key in sending:
            self._pending.setdefault(key, [])
        try:
            result = send(fresh)
        except BaseException:
            self._settle(sending, False)
            raise
        if result is None:
            self._settle(sending, True)
            return None

        def stored(value: Any) -> Any:
            self._settle(sending, True)
            return value

        def failed(failure: Any) -> Any:
            self._settle(sending, False)
            return failure

        return result.addCallbacks(stored, failed)

    def _after(self, keys: set[str]) -> Deferred[Any]:
        waits: list[Deferred[None]] = []
        for key in keys:
            wait: Deferred[None] = Deferred()
            self._pending[key].append(wait)
            waits.append(wait)
        return DeferredList(waits)

    def _settle(self, keys: list[str], stored: bool) -> None:
        now = self._now()
        waiting: list[Deferred[None]] = []
        for key in keys:
            waiting.extend(self._pending.pop(key, ()))
            if stored:
                self._remember(key, now)
        if stored:
            self._trim(now)
        for wait in waiting:
            wait.callback(None)


class _WindowCollector(Collector):
    def __init__(self, sends: IdempotentSends) -> None:
        self.sends = sends

    def collect(self) -> Iterator[Any]:
        yield CounterMetricFamily("jmsgateway_broker_duplicate_sends",
                                  "SENDs with an idempotency key already stored: acknowledged, not stored again",
                                  value=self.sends.duplicates)
        yield GaugeMetricFamily("jmsgateway_broker_dedup_window_ids",
                                "Idempotency keys (x-dedup-id) the embedded broker remembers", value=len(self.sends))


class SendIdTable:
    """The window in the SQLite store: ``send_ids`` (key, when stored), written in the
    transaction that stores the messages; run on the store's writer thread only.

    :param size: ids kept (the oldest are deleted every :attr:`PRUNE_EVERY` writes and at start-up).
    :param seconds: longest an id is kept.
    """

    PRUNE_EVERY = 1000
    CREATE = ("CREATE TABLE IF NOT EXISTS send_ids (key TEXT PRIMARY KEY, at INTEGER NOT NULL)",
              "CREATE INDEX IF NOT EXISTS send_ids_at ON send_ids (at)")
    """Added to a store of any schema version that lacks it (earlier versions ignore the table)."""

    def __init__(self, size: int = DEFAULT_WINDOW, seconds: int = DEFAULT_WINDOW_SECONDS) -> None:
        self.size = size
        self.seconds = seconds
        self._written = 0

    def create(self, db: sqlite3.Connection) -> None:
        for statement in self.CREATE:
            db.execute(statement)

    @staticmethod
    def rows(entries: Iterable[tuple[str, Message]], now_ms: int) -> list[SendId]:
        """The ids of the messages of ``entries`` (store entries: queue key, message), once each."""
        keys = {key: now_ms for _, message in entries if has_send_id(message)
                and (key := send_key(message)) is not None}
        return list(keys.items())

    def record(self, db: sqlite3.Connection, rows: list[SendId]) -> None:
        """Write ``rows`` (inside the caller's transaction); now and then, forget the oldest."""
        if not rows or not self.size:
            return
        db.executemany("INSERT OR REPLACE INTO send_ids (key, at) VALUES (?, ?)", rows)
        self._written += len(rows)
        if self._written >= self.PRUNE_EVERY:
            self._written = 0
            self.prune(db, rows[-1][1])

    def prune(self, db: sqlite3.Connection, now_ms: int) -> None:
        db.execute("DELETE FROM send_ids WHERE at <= ?", (now_ms - self.seconds * 1000,))
        db.execute("DELETE FROM send_ids WHERE key IN (SELECT key FROM send_ids ORDER BY at DESC LIMIT -1 OFFSET ?)",
                   (self.size,))

    def load(self, db: sqlite3.Connection, now_ms: int) -> list[SendId]:
        """The window, oldest first, after forgetting what is past it (inside the caller's transaction)."""
        self.prune(db, now_ms)
        return [(key, at) for key, at in db.execute("SELECT key, at FROM send_ids ORDER BY at, rowid")]
