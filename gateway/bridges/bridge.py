"""One bridge: consume from a source connector, send to a target connector.

:class:`Bridge` owns the moving parts of the JMS bridge of JBoss Messaging /
ActiveMQ Artemis on top of any two :class:`~gateway.interfaces.IConnector`:

* **source**: one subscription in ``client-individual`` mode with a prefetch
  of at least twice ``max_batch_size`` (the batch being sent and the next one
  filling), the bridge's selector and, for a durable topic subscription, its
  ``subscription_name`` / ``client_id``;
* **batching**: deliveries collect until ``max_batch_size`` messages or
  ``max_batch_time`` ms after the first one (``-1``: only a full batch),
  then go to the target as one unit (:meth:`IConnector.send_batch`; one
  message: :meth:`IConnector.send`); one batch is in flight at a time;
* **quality of service** per batch, a strategy of :mod:`gateway.bridges.qos`:
  ``AT_MOST_ONCE`` acknowledges at the source, then sends;
  ``DUPLICATES_OK`` sends, waits for the target's confirmation, then acknowledges;
  ``ONCE_AND_ONLY_ONCE`` is DUPLICATES_OK plus the
  :class:`~gateway.bridges.dedup.DuplicateStore`: messages already delivered
  are skipped, the ids of a confirmed batch are committed before the
  acknowledgement, and non-persistent messages are refused (logged, counted
  as dropped);
* **the message sent** is a copy: target destination, a new message id
  (AT_MOST_ONCE and ONCE_AND_ONLY_ONCE: one derived from the source id, also
  set as the ``_AMQ_DUPL_ID`` property), redelivery flags cleared; with ``add_message_id_in_header`` the source id is
  appended to ``AMQ_BRIDGE_MSG_ID_LIST`` (comma-separated, one id per hop);
  the bridge's transformer chain runs before that;
* **resilience**: a failed subscription (or subscribe) is retried every
  ``failure_retry_interval`` ms, a failed send is resent after the same
  interval, up to ``max_retries`` consecutive attempts (``-1``: forever);
  then the bridge is *failed* (logged, state metric), the gateway goes on.
  A send whose confirmation was lost is resent under AT_MOST_ONCE and
  ONCE_AND_ONLY_ONCE only without what the target already holds (the
  in-doubt check; AT_MOST_ONCE gives the batch up when the target cannot
  tell).  The subscription asks for strict acknowledgements: one of a
  delivery from a previous connection fails, and the bridge drops what it
  holds from it and subscribes again;
* **control**: :meth:`start`, :meth:`stop`, :meth:`pause`, :meth:`resume`
  return Deferreds; states are starting, running, paused, retrying, failed,
  stopped.

Errors that no retry can fix (a bad destination, a message the target
refuses for good: ``ConnectorError.permanent``, a transformer rejecting a
message, the duplicate store failing) fail the bridge at once: nothing is
acknowledged at the source that the target did not take.  The clock is
injected (a ``Clock`` in unit tests).  Nothing here blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.bridges.config import BridgeConfig
from gateway.bridges.dedup import DuplicateStore
from gateway.bridges.metrics import BridgeMetrics
from gateway.bridges.probe import held_message_ids, source_id_of, target_message_id
from gateway.bridges.qos import BatchQuality, batch_quality
from gateway.connectors.kafka_records import ORIGIN_HEADER
from gateway.connectors.stomp_browse import DUPLICATE_ID
from gateway.deferreds import gather
from gateway.errors import ConnectorError, StaleDelivery
from gateway.interfaces import (
    BridgeState,
    IBridge,
    IConnector,
    IConsumer,
    ILocalTransactionSource,
    ISubscription,
    SubscriptionSpec,
)
from gateway.message.model import Message, new_message_id

MESSAGE_ID_LIST = "AMQ_BRIDGE_MSG_ID_LIST"
"""Property listing the source message ids of every hop (the name Artemis uses)."""

STARTING, RUNNING, PAUSED, RETRYING, FAILED, STOPPED = BridgeState
"""The states of every bridge (:class:`~gateway.interfaces.BridgeState`)."""


class BridgeFailed(ConnectorError):
    """The bridge gave up (retries exhausted or an error no retry can fix)."""


class _Abandoned(Exception):
    """A batch was dropped because the bridge stopped or failed meanwhile."""


class _NotAcknowledged(Exception):
    """An AT_MOST_ONCE batch whose acknowledgement failed: not sent (the source has it again)."""


KAFKA_FALLBACK_ID = "ID:kafka:"
"""Prefix of the id a Kafka record without ``jms.MessageId`` gets (topic, partition, offset)."""


def source_key(message: Message) -> str:
    """The id a ONCE_AND_ONLY_ONCE bridge remembers a source message by.

    The message id, except for the id made up for a plain Kafka record
    (``ID:kafka:<topic>:<partition>:<offset>``), which a topic deleted and
    created again hands out once more: the record's timestamp is added, so a
    new record at a reused offset is not taken for the old one.
    """
    message_id = message.message_id
    if message_id.startswith(KAFKA_FALLBACK_ID) and message.timestamp:
        return f"{message_id}@{message.timestamp}"
    return message_id


def _note(result: Any, into: list[Any]) -> None:
    into.append(result)


def _watch(d: Deferred[Any]) -> Deferred[None]:
    """A Deferred that fires (with None) when ``d`` does, leaving ``d``'s result alone."""
    watcher: Deferred[None] = Deferred()

    def fired(result: Any) -> Any:
        watcher.callback(None)
        return result

    d.addBoth(fired)
    return watcher


@implementer(IConsumer)
class _SourceConsumer:
    """The consumer one subscription attempt delivers to.

    Each (re)subscription gets its own, so deliveries and failures of a
    subscription the bridge already gave up are ignored.
    """

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self.subscription: ISubscription | None = None
        self.active = True

    def deliver(self, message: Message, tag: Any) -> None:
        if self.active:
            self.bridge._delivered(self, message, tag)

    def subscription_failed(self, reason: Exception) -> None:
        if self.active:
            self.bridge._source_lost(self, reason)


@implementer(IBridge)
class Bridge:
    """A running bridge (see the module docstring).

    :param config: the validated ``[[bridges]]`` entry.
    :param source: the connector consumed from.
    :param target: the connector sent to.
    :param clock: schedules batch timeouts and retries (the reactor).
    :param metrics: shared metrics; a private set when None.
    :param dedup: the duplicate store (required for ONCE_AND_ONLY_ONCE).
    :param chains: the transformer chain to run on each message, or None.
    :param qos: the quality-of-service strategy; by default the first per-batch strategy of
        ``config.qos`` that joins ``source`` and ``target`` (:func:`~gateway.bridges.qos.batch_quality`).
    """

    log = Logger()

    def __init__(
        self,
        config: BridgeConfig,
        source: IConnector,
        target: IConnector,
        *,
        clock: IReactorTime,
        metrics: BridgeMetrics | None = None,
        dedup: DuplicateStore | None = None,
        chains: Any = None,
        qos: BatchQuality | None = None,
    ) -> None:
        self.qos = qos if qos is not None else batch_quality(config, source, target)
        if self.qos.uses_dedup and dedup is None:
            raise ValueError(f"bridge {config.name}: {config.qos} needs a duplicate store")
        self.config = config
        self.name = config.name
        self.source = source
        self.target = target
        self.clock = clock
        self.metrics = metrics or BridgeMetrics()
        self.dedup = dedup
        self.chains = chains
        self.state: BridgeState = STOPPED
        self.last_error: str | None = None
        self.forwarded = 0
        self.retries = 0
        """Consecutive failed attempts (reset by any success)."""
        self._consumer: _SourceConsumer | None = None
        self._source_ok = False
        self._target_ok = True
        self._paused = False
        self._pending: list[tuple[_SourceConsumer, Message, Any]] = []
        self._due = False
        self._batch_timer: IDelayedCall | None = None
        self._retry_timers: set[IDelayedCall] = set()
        self._inflight: Deferred[None] | None = None
        self._acking: set[Deferred[None]] = set()
        self._flushing = False
        self._send_waiters: set[Deferred[None]] = set()
        self._start_waiters: list[Deferred[None]] = []
        self._in_doubt: Deferred[None] | None = None
        self._forward_fields = self.metrics.forwarded.labels(self.name)
        self._batch_sizes = self.metrics.batch_size.labels(self.name)
        self.metrics.state.labels(self.name).state(STOPPED)

    # ------------------------------------------------------------ control API

    def start(self) -> Deferred[None]:
        """Subscribe at the source; fires once the bridge runs (or failed / was
        stopped meanwhile; :attr:`state` says which).  Restarts a failed bridge."""
        if self.state in (RUNNING, PAUSED):
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._start_waiters.append(waiter)
        if self.state in (STARTING, RETRYING):
            return waiter
        self.retries = 0
        self.last_error = None
        self._target_ok = True
        self._paused = False
        self._due = False
        self._set_state(STARTING)
        self.log.info("bridge {name} starting: {source} -> {target} ({qos})", name=self.name,
                      source=self._describe(self.config.source), target=self._describe(self.config.target),
                      qos=self.config.qos)
        if self.qos.checks_target_at_start:
            checked = self._resolve_in_doubt()
            self._in_doubt = checked
            checked.addCallback(lambda _: self._subscribe() if self.state == STARTING else None)
        else:
            self._subscribe()
        return waiter

    def in_doubt_resolved(self) -> Deferred[None]:
        """Fires once the in-doubt check of the last :meth:`start` is done (at once
        when there is none): what the target holds is recorded as delivered, so
        consumers of the target may take messages from then on."""
        checked = self._in_doubt
        if checked is None or checked.called:
            return succeed(None)
        return _watch(checked)

    def _resolve_in_doubt(self) -> Deferred[None]:
        """Count what the target already holds from this bridge as delivered (see
        :mod:`gateway.bridges.probe`): a crash between the target's commit and the
        duplicate store's is resolved by looking."""
        assert self.dedup is not None
        dedup = self.dedup
        d = held_message_ids(self.target, self.config.target.destination, tail=max(1000, 4 * self.config.prefetch))

        def found(held: set[str] | None) -> Deferred[None] | None:
            if held is None:
                self.log.warn("bridge {name}: target {target} cannot tell which messages it holds; a crash "
                              "between its confirmation and the duplicate store's commit would send that batch "
                              "again", name=self.name, target=self._describe(self.config.target))
                return None
            ids = [source for source in (source_id_of(self.name, i) for i in held) if source is not None]
            return dedup.known(self.name, ids).addCallback(lambda known: record([i for i in ids if i not in known]))

        def record(missing: list[str]) -> Deferred[None] | None:
            if missing:
                self.log.info("bridge {name}: the target holds {count} message(s) not yet recorded as delivered; "
                              "recording them", name=self.name, count=len(missing))
                return dedup.record(self.name, missing)
            return None

        def unknown(failure: Failure) -> None:
            self.log.warn("bridge {name}: cannot ask the target what it holds: {error}", name=self.name,
                          error=failure.getErrorMessage())

        return d.addCallback(found).addErrback(unknown).addCallback(lambda _: None)

    def stop(self) -> Deferred[None]:
        """Finish the batch in flight, then close the subscription; what was
        delivered and not acknowledged goes back to the source."""
        if self.state == STOPPED:
            return succeed(None)
        self._set_state(STOPPED)
        self._cancel_timers()
        self._abandon_sends()
        d = self._drained()
        d.addCallback(lambda _: self._close_subscription())
        d.addCallback(lambda _: self._release_start_waiters())
        d.addCallback(lambda _: self.log.info("bridge {name} stopped", name=self.name))
        return d

    def pause(self) -> Deferred[None]:
        """Stop consuming; fires once the batch in flight is done (then nothing moves)."""
        if self.state in (STOPPED, FAILED):
            return succeed(None)
        self._paused = True
        if self._consumer is not None and self._consumer.subscription is not None:
            self._consumer.subscription.pause()
        self._update_state()
        self.log.info("bridge {name} paused", name=self.name)
        return self._drained()

    def resume(self) -> Deferred[None]:
        """Consume again after :meth:`pause`."""
        if not self._paused:
            return succeed(None)
        self._paused = False
        if self._consumer is not None and self._consumer.subscription is not None:
            self._consumer.subscription.resume()
        self._update_state()
        self.log.info("bridge {name} resumed", name=self.name)
        self._flush()
        return succeed(None)

    def status(self) -> dict[str, Any]:
        """What the admin endpoint shows."""
        return {
            "name": self.name,
            "state": self.state,
            "qos": self.config.qos,
            "source": self._describe(self.config.source),
            "target": self._describe(self.config.target),
            "forwarded": self.forwarded,
            "retries": self.retries,
            "pending": len(self._pending),
            "in_flight": self._inflight is not None,
            "last_error": self.last_error,
        }

    # --------------------------------------------------------------- state

    @staticmethod
    def _describe(side: Any) -> str:
        return f"{side.connector}:{side.destination}"

    def _set_state(self, state: BridgeState) -> None:
        if state != self.state:
            self.state = state
            self.metrics.state.labels(self.name).state(state)

    def _update_state(self) -> None:
        if self.state in (STOPPED, FAILED):
            return
        if not self._source_ok or not self._target_ok:
            if self.state != STARTING or self._consumer is None or not self._target_ok:
                self._set_state(RETRYING)
        elif self._paused:
            self._set_state(PAUSED)
        else:
            self._set_state(RUNNING)
        if self.state in (RUNNING, PAUSED):
            self._release_start_waiters()

    def _release_start_waiters(self) -> None:
        waiters, self._start_waiters = self._start_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    def _active(self) -> bool:
        return self.state not in (STOPPED, FAILED)

    def _fail(self, reason: str) -> None:
        """Give up: log, mark failed, give unacknowledged messages back to the source."""
        if not self._active():
            return
        self.last_error = reason
        self._set_state(FAILED)
        self.log.error("bridge {name} FAILED: {reason}", name=self.name, reason=reason)
        self._cancel_timers()
        self._abandon_sends()
        self._drained().addCallback(lambda _: self._close_subscription())
        self._release_start_waiters()

    def _cancel_timers(self) -> None:
        if self._batch_timer is not None and self._batch_timer.active():
            self._batch_timer.cancel()
        self._batch_timer = None
        for timer in list(self._retry_timers):
            if timer.active():
                timer.cancel()
        self._retry_timers.clear()

    def _abandon_sends(self) -> None:
        waiters, self._send_waiters = self._send_waiters, set()
        for waiter in waiters:
            if not waiter.called:
                waiter.errback(_Abandoned())

    def _drained(self) -> Deferred[None]:
        """Fires when no batch is in flight and every acknowledgement was answered."""
        inflight = self._inflight
        done: Deferred[None] = Deferred()

        def finished(result: Any) -> Any:
            if not done.called:
                acks = [_watch(ack) for ack in self._acking]
                gather(acks).addBoth(lambda _: done.callback(None))
            return result

        if inflight is None:
            finished(None)
        else:
            inflight.addBoth(finished)
        return done

    def _retry_later(self, reason: str, action: Callable[[], None]) -> None:
        """Count a failed attempt and schedule ``action``, or fail when retries are exhausted."""
        self.retries += 1
        self.last_error = reason
        limit = self.config.max_retries
        if limit != -1 and self.retries > limit:
            self._fail(f"{reason} (gave up after {limit} retries)")
            return
        self.metrics.retries.labels(self.name).inc()
        delay = self.config.failure_retry_interval / 1000.0
        self.log.warn("bridge {name}: {reason}; retry {count} in {delay}s", name=self.name, reason=reason,
                      count=self.retries, delay=delay)
        scheduled: list[IDelayedCall] = []

        def fire() -> None:
            self._retry_timers.difference_update(scheduled)
            if self._active():
                action()

        scheduled.append(self.clock.callLater(delay, fire))
        self._retry_timers.update(scheduled)

    # --------------------------------------------------------------- source

    def _spec(self) -> SubscriptionSpec:
        config = self.config
        return SubscriptionSpec(
            destination=config.source.destination,
            selector=config.selector,
            ack_mode="client-individual",
            # a transacted source delivers whole batches, each settled before the next
            prefetch=config.max_batch_size if ILocalTransactionSource.providedBy(self.source) else config.prefetch,
            durable_name=config.subscription_name,
            client_id=config.client_id,
            owner=f"bridge:{self.name}",
            strict_acks=True,
        )

    def _subscribe(self) -> None:
        consumer = _SourceConsumer(self)
        self._consumer = consumer
        self._source_ok = False
        if ILocalTransactionSource.providedBy(self.source):
            d = maybeDeferred(self.source.subscribe_transacted, self._spec(), consumer, self.config.max_batch_time)
        else:
            d = maybeDeferred(self.source.subscribe, self._spec(), consumer)
        d.addCallbacks(self._subscribed, self._subscribe_failed, callbackArgs=(consumer,), errbackArgs=(consumer,))

    def _subscribed(self, subscription: ISubscription, consumer: _SourceConsumer) -> None:
        if consumer is not self._consumer or not self._active():
            consumer.active = False
            maybeDeferred(subscription.close).addErrback(self._log_close_failure)
            return
        consumer.subscription = subscription
        self._source_ok = True
        if self._target_ok:
            self.retries = 0
        if self._paused:
            subscription.pause()
        self.log.info("bridge {name} consuming from {source}", name=self.name,
                      source=self._describe(self.config.source))
        self._update_state()
        self._flush()

    def _subscribe_failed(self, failure: Failure, consumer: _SourceConsumer) -> None:
        consumer.active = False
        if consumer is not self._consumer or not self._active():
            return
        self._consumer = None
        error = failure.value
        reason = f"cannot subscribe to {self._describe(self.config.source)}: {error}"
        if not isinstance(error, ConnectorError):
            self._fail(reason)
            return
        self._source_ok = False
        self._update_state()
        self._retry_later(reason, self._subscribe)

    def _source_lost(self, consumer: _SourceConsumer, reason: Exception) -> None:
        if consumer is not self._consumer or not self._active():
            return
        consumer.active = False
        self._consumer = None
        self._source_ok = False
        if consumer.subscription is not None:
            maybeDeferred(consumer.subscription.close).addErrback(self._log_close_failure)
        # Deliveries not yet sent were never acknowledged: the source has them again.
        self._pending = [entry for entry in self._pending if entry[0] is not consumer]
        if not self._pending:
            self._not_due()
        self._update_state()
        self._retry_later(f"source {self._describe(self.config.source)} lost: {reason}", self._subscribe)

    def _close_subscription(self) -> Deferred[None]:
        consumer, self._consumer = self._consumer, None
        self._pending = []
        self._not_due()
        self._source_ok = False
        if consumer is None:
            return succeed(None)
        consumer.active = False
        subscription = consumer.subscription
        if subscription is None:
            return succeed(None)
        d: Deferred[None] = maybeDeferred(subscription.close)
        d.addErrback(self._log_close_failure)
        return d

    def _log_close_failure(self, failure: Failure) -> None:
        self.log.warn("bridge {name}: closing the source subscription failed: {error}", name=self.name,
                      error=failure.getErrorMessage())

    def _delivered(self, consumer: _SourceConsumer, message: Message, tag: Any) -> None:
        self._pending.append((consumer, message, tag))
        if consumer.subscription is None:
            return  # delivered while subscribing: flushed once the subscription is ours
        if len(self._pending) >= self.config.max_batch_size:
            self._flush()
        elif self._batch_timer is None and self.config.max_batch_time > 0 and not self._due:
            self._batch_timer = self.clock.callLater(self.config.max_batch_time / 1000.0, self._batch_time_up)

    def _batch_time_up(self) -> None:
        self._batch_timer = None
        self._due = True
        self._flush()

    # -------------------------------------------------------------- batches

    def _ready(self) -> bool:
        if self._paused or not self._active() or self._inflight is not None or not self._pending:
            return False
        if self._consumer is None or self._consumer.subscription is None:
            return False
        return len(self._pending) >= self.config.max_batch_size or self._due

    def _flush(self) -> None:
        """Send ready batches; a batch that completes at once lets the next go (a loop, not recursion)."""
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._ready():
                size = self.config.max_batch_size
                batch, self._pending = self._pending[:size], self._pending[size:]
                self._due = False
                if self._batch_timer is not None and self._batch_timer.active():
                    self._batch_timer.cancel()
                self._batch_timer = None
                marker: Deferred[None] = Deferred()
                self._inflight = marker  # a send completing synchronously must not start another
                done = self._forward(batch)
                done.addErrback(self._unexpected)
                finished: list[Any] = []
                done.addBoth(_note, finished)
                if finished:  # the whole chain ran synchronously (``called`` is also true when paused)
                    self._inflight = None
                    marker.callback(None)
                    continue
                self._inflight = done
                done.addBoth(self._batch_done, marker)
                return
        finally:
            self._flushing = False
        if not self._pending:
            self._due = False  # nothing left is overdue: the next delivery starts its own max_batch_time
        if self._pending and self._batch_timer is None and self.config.max_batch_time > 0 and not self._paused:
            self._batch_timer = self.clock.callLater(self.config.max_batch_time / 1000.0, self._batch_time_up)

    def _not_due(self) -> None:
        """The pending deliveries were dropped: no batch is due and none is timed.

        A stale ``_due`` would keep the next subscription's deliveries from starting
        their batch timer, and a final batch short of ``max_batch_size`` (the end of a
        stream redelivered after a reconnection) would never be sent."""
        self._due = False
        if self._batch_timer is not None and self._batch_timer.active():
            self._batch_timer.cancel()
        self._batch_timer = None

    def _batch_done(self, result: Any, marker: Deferred[None]) -> None:
        self._inflight = None
        marker.callback(None)
        self._flush()

    def _unexpected(self, failure: Failure) -> None:
        self.log.failure("bridge {name}: unexpected error", failure, name=self.name)
        self._fail(f"unexpected error: {failure.getErrorMessage()}")

    def _forward(self, batch: list[tuple[_SourceConsumer, Message, Any]]) -> Deferred[None]:
        """Transform, send and acknowledge one batch per the QoS; never fails
        for a connector's fault (those become retries or a failed bridge)."""
        self._batch_sizes.observe(len(batch))
        d = self.qos.select(self, batch)
        d.addCallback(self._forward_fresh)
        d.addErrback(self._batch_failed)
        return d.addCallback(lambda _: None)

    def _not_yet_delivered(self, batch: list[tuple[_SourceConsumer, Message, Any]]) -> Deferred[Any]:
        """ONCE_AND_ONLY_ONCE: (messages to send, tags only to acknowledge): non-persistent
        messages, those the duplicate store knows and repeats within the batch (a source
        that redelivered after a reconnection while the first delivery was pending) are skipped."""
        skipped: list[tuple[_SourceConsumer, Any]] = []
        candidates: list[tuple[_SourceConsumer, Message, Any]] = []
        seen: set[str] = set()
        for consumer, message, tag in batch:
            if not message.persistent:
                self.metrics.dropped.labels(self.name, "non-persistent").inc()
                self.log.warn("bridge {name}: message {id} is not persistent; ONCE_AND_ONLY_ONCE bridges "
                              "take persistent messages only: dropped", name=self.name, id=message.message_id)
                skipped.append((consumer, tag))
                continue
            key = source_key(message)
            if key and key in seen:
                self.metrics.duplicates.labels(self.name).inc()
                self.log.debug("bridge {name}: {id} twice in one batch; sent once", name=self.name, id=key)
                skipped.append((consumer, tag))
                continue
            seen.add(key)
            candidates.append((consumer, message, tag))
        # a local transaction needs no duplicate store: the provider commits consume and send together
        d = self.dedup.known(self.name, [key for key in seen if key]) if self.dedup is not None else succeed(set())

        def split(known: set[str]) -> tuple[list[tuple[_SourceConsumer, Message, Any]], list[Any]]:
            accepted = []
            for consumer, message, tag in candidates:
                if source_key(message) in known:
                    self.metrics.duplicates.labels(self.name).inc()
                    self.log.debug("bridge {name}: {id} already delivered; skipped", name=self.name,
                                   id=message.message_id)
                    skipped.append((consumer, tag))
                else:
                    accepted.append((consumer, message, tag))
            return accepted, skipped

        def unknown(failure: Failure) -> None:
            self._fail(f"cannot read delivered ids: {failure.getErrorMessage()}")
            raise _Abandoned()

        return d.addCallbacks(split, unknown)

    def _forward_fresh(self, split: tuple[list[tuple[_SourceConsumer, Message, Any]], list[Any]]) -> Deferred[None]:
        accepted, skipped = split
        tags = [(consumer, tag) for consumer, _, tag in accepted] + skipped
        d = self._transform([message for _, message, _ in accepted])
        self.qos.forward(self, d, accepted, tags)
        return d.addCallback(lambda _: None)

    def _batch_failed(self, failure: Failure) -> None:
        if failure.check(_NotAcknowledged):
            return
        if failure.check(_Abandoned):
            if self.qos.acknowledges_first:
                self.metrics.dropped.labels(self.name, "abandoned").inc()
            return
        if failure.check(BridgeFailed):
            self._fail(str(failure.value))
            return
        failure.raiseException()

    # --------------------------------------------------------- transformers

    def _transform(self, messages: list[Message]) -> Deferred[list[Message]]:
        """The messages to send: transformed, addressed, with a new id and the id list."""
        if self.chains is None:
            return succeed([self._addressed(message, message, self.config.target.destination) for message in messages])
        from gateway.transform import TransformContext

        outcomes = [
            maybeDeferred(
                self.chains.run, message,
                TransformContext("inbound", self.config.source.destination, self.config.target.destination),
            )
            for message in messages
        ]
        d = gather(outcomes)
        d.addCallback(self._outcomes, messages)
        return d

    def _outcomes(self, outcomes: list[Any], messages: list[Message]) -> list[Message]:
        from gateway.transform import DeadLettered, Deliver, Dropped

        outgoing: list[Message] = []
        for outcome, original in zip(outcomes, messages, strict=True):
            if isinstance(outcome, Deliver):
                outgoing.append(self._addressed(outcome.message, original, outcome.destination))
            elif isinstance(outcome, Dropped):
                self.metrics.dropped.labels(self.name, "transformer").inc()
            elif isinstance(outcome, DeadLettered):
                outgoing.append(self._addressed(outcome.message, original, outcome.destination))
            else:
                error = getattr(outcome, "error", outcome)
                raise BridgeFailed(f"a transformer rejected message {original.message_id}: {error}")
        return outgoing

    def _addressed(self, message: Message, original: Message, destination: str) -> Message:
        out = message.copy()
        out.destination = destination
        if self.qos.derives_ids and original.message_id:
            # the in-doubt check finds these copies at the target by their id; a JMS broker over
            # STOMP sets its own message-id, so the id also travels as Artemis's duplicate id
            out.message_id = target_message_id(self.name, source_key(original))
            out.properties[DUPLICATE_ID] = out.message_id
        else:
            out.message_id = new_message_id()
        out.redelivered = False
        out.redelivery_count = 0
        # The copy is a new message of this gateway: the origin of the source record (maybe this
        # gateway itself) must not make a router take it for one it produced (the cycle guard).
        out.properties.pop(ORIGIN_HEADER, None)
        if self.config.add_message_id_in_header and original.message_id:
            previous = out.properties.get(MESSAGE_ID_LIST)
            if isinstance(previous, bytes):
                previous = previous.decode("utf-8", "replace")
            out.properties[MESSAGE_ID_LIST] = f"{previous},{original.message_id}" if previous else original.message_id
        return out

    # -------------------------------------------------------------- target

    def _send(self, outgoing: list[Message]) -> Deferred[None]:
        """Send until the target confirms; retried every interval (ConnectorError),
        fails the bridge otherwise (and at once for a message the target refuses
        for good).  When the failed send may have reached the target (its
        confirmation lost), a ONCE_AND_ONLY_ONCE or AT_MOST_ONCE retry first asks
        the target what it already holds (the in-doubt check) and sends only
        the rest; AT_MOST_ONCE gives the batch up when the target cannot tell.
        Fails with _Abandoned if the bridge stops or fails."""
        if not outgoing:
            return succeed(None)
        done: Deferred[None] = Deferred()
        remaining = list(outgoing)
        total = len(outgoing)

        def attempt() -> None:
            self._send_waiters.discard(done)
            if done.called:
                return
            if not remaining:
                confirmed(None)
                return
            if len(remaining) == 1:
                sent = maybeDeferred(self.target.send, remaining[0])
            else:
                sent = maybeDeferred(self.target.send_batch, list(remaining))
            sent.addCallbacks(confirmed, refused)

        def confirmed(_: object) -> None:
            if done.called:
                return
            self.forwarded += total
            self._forward_fields.inc(total)
            if not self._target_ok:
                self.log.info("bridge {name}: target {target} is back", name=self.name,
                              target=self._describe(self.config.target))
            self._target_ok = True
            if self._source_ok:
                self.retries = 0
            self._update_state()
            done.callback(None)

        def refused(failure: Failure) -> None:
            if done.called:
                return
            self.metrics.failed.labels(self.name).inc()
            error = failure.value
            reason = f"sending {len(remaining)} message(s) to {self._describe(self.config.target)} failed: {error}"
            if not isinstance(error, ConnectorError) or error.permanent:
                if isinstance(error, ConnectorError):
                    reason = (f"the target {self._describe(self.config.target)} refused a message of a batch of "
                              f"{len(remaining)} (ids {', '.join(m.message_id for m in remaining[:5])}"
                              f"{' ...' if len(remaining) > 5 else ''}) for good: {error}")
                    if self.qos.acknowledges_first:  # acknowledged already: these are lost
                        self.metrics.dropped.labels(self.name, "refused").inc(len(remaining))
                self._fail(reason)
                done.errback(_Abandoned())
                return
            self._target_ok = False
            self._update_state()
            self._send_waiters.add(done)  # stop() or a failure abandons it while it waits
            if not self.qos.resends_in_doubt or not error.in_doubt:
                self._retry_later(reason, attempt)
            else:
                self._retry_later(reason, resend)

        def resend() -> None:
            """The in-doubt check before a retry: drop what the target already took."""
            destinations = sorted({message.destination for message in remaining})
            probes = [held_message_ids(self.target, destination, tail=max(1000, 4 * self.config.prefetch))
                      for destination in destinations]

            def looked(answers: list[set[str] | None]) -> None:
                if done.called:
                    return
                if self.qos.acknowledges_first and any(answer is None for answer in answers):
                    drop()
                    return
                held: set[str] = set()
                for answer in answers:
                    if answer is not None:
                        held |= answer
                taken = [message for message in remaining if message.message_id in held]
                if taken:
                    self.log.info("bridge {name}: the target already holds {count} of the {total} message(s) "
                                  "to send again; sending the rest", name=self.name, count=len(taken),
                                  total=len(remaining))
                    remaining[:] = [message for message in remaining if message.message_id not in held]
                attempt()

            def unknown(failure: Failure) -> None:
                self.log.warn("bridge {name}: cannot ask the target what it holds before a retry: {error}",
                              name=self.name, error=failure.getErrorMessage())
                if self.qos.acknowledges_first:
                    drop()
                else:
                    attempt()

            gather(probes).addCallbacks(looked, unknown)

        def drop() -> None:
            """AT_MOST_ONCE, the outcome of a send unknown and the target unable to tell:
            sending again could duplicate, so the (acknowledged) batch is given up."""
            self._send_waiters.discard(done)
            self.metrics.dropped.labels(self.name, "in-doubt").inc(len(remaining))
            self.log.warn("bridge {name}: AT_MOST_ONCE: {count} message(s) (ids {ids}) may or may not have reached "
                          "{target}, which cannot tell; not sent again", name=self.name, count=len(remaining),
                          ids=", ".join(m.message_id for m in remaining[:5]) + (" ..." if len(remaining) > 5 else ""),
                          target=self._describe(self.config.target))
            if not done.called:
                done.callback(None)

        attempt()
        return done

    def _send_and_ack_locally(self, outgoing: list[Message], tags: list[tuple[_SourceConsumer, Any]]) -> Any:
        """Send the batch and acknowledge it at the source in one local transaction of the
        provider; a failure rolls both back and the source delivers the batch again."""
        consumers = {consumer for consumer, _ in tags}
        consumer = next(iter(consumers), None)
        if consumer is None or consumer.subscription is None or not consumer.active or len(consumers) > 1:
            raise _Abandoned()  # that subscription is gone: the provider delivers the batch again
        subscription: Any = consumer.subscription  # an ITransactedSubscription (subscribe_transacted)
        d: Deferred[None] = maybeDeferred(subscription.forward, outgoing, [tag for _, tag in tags])

        def done(_: object) -> None:
            self.forwarded += len(outgoing)
            self._forward_fields.inc(len(outgoing))
            self._target_ok = True
            if self._source_ok:
                self.retries = 0

        def failed(failure: Failure) -> None:
            self.metrics.failed.labels(self.name).inc()
            error = failure.value
            if isinstance(error, ConnectorError) and error.permanent:
                # rolled back: the batch stays at the source; sending it again gives the same answer
                self._fail(f"the target {self._describe(self.config.target)} refused a message of a batch of "
                           f"{len(outgoing)} (ids {', '.join(m.message_id for m in outgoing[:5])}"
                           f"{' ...' if len(outgoing) > 5 else ''}) for good: {error}")
                raise _Abandoned()
            self._source_lost(consumer, ConnectorError(f"local transaction failed: {failure.getErrorMessage()}"))
            raise _Abandoned()

        return d.addCallbacks(done, failed)

    def _record(self, ids: list[str]) -> Deferred[None]:
        assert self.dedup is not None
        d = self.dedup.record(self.name, ids)

        def failed(failure: Failure) -> None:
            self._fail(f"cannot record delivered ids: {failure.getErrorMessage()}")
            raise _Abandoned()

        d.addErrback(failed)
        return d

    def _ack_behind(self, tags: list[tuple[_SourceConsumer, Any]]) -> None:
        """Acknowledge without holding up the next batch (the target has this one):
        a source whose acknowledgements are slow (a Kafka commit) still streams."""
        ack = self._ack(tags)
        answered: list[Any] = []
        ack.addBoth(_note, answered)
        if answered:
            return
        self._acking.add(ack)

        def forget(_: object) -> None:
            self._acking.discard(ack)

        ack.addBoth(forget)

    def _ack(self, tags: list[tuple[_SourceConsumer, Any]]) -> Deferred[None]:
        """Acknowledge at the source.  A failed acknowledgement is a lost source:
        the messages come again (skipped under ONCE_AND_ONLY_ONCE)."""
        by_consumer: dict[_SourceConsumer, list[Any]] = {}
        for consumer, tag in tags:
            by_consumer.setdefault(consumer, []).append(tag)
        acks = []
        for consumer, consumer_tags in by_consumer.items():
            subscription = consumer.subscription
            if subscription is None or not consumer.active:
                continue  # that subscription is gone: the source redelivers these
            acks.append(maybeDeferred(subscription.ack, consumer_tags))
        d = gather(acks)

        def failed(failure: Failure) -> None:
            consumers = list(by_consumer)
            for consumer in consumers:
                self._source_lost(consumer, ConnectorError(f"acknowledgement failed: {failure.getErrorMessage()}"))
            if failure.check(StaleDelivery):
                self.log.warn("bridge {name}: {error}; dropping the deliveries held from that connection",
                              name=self.name, error=failure.getErrorMessage())
            if self.qos.acknowledges_first:
                raise _NotAcknowledged()  # not acknowledged: sending could duplicate

        return d.addCallbacks(lambda _: None, failed)
