"""One bridge: consume from a source connector, send to a target connector.

:class:`Bridge` is the per-batch engine of the JMS bridge of JBoss Messaging /
ActiveMQ Artemis on top of any two :class:`~gateway.interfaces.IConnector`.  It
holds the state, the retry policy and the batch in flight; the parts live in their
own modules, each behind a small port:

* **source** (:mod:`gateway.bridges.source`): one subscription in
  ``client-individual`` mode with a prefetch of at least twice ``max_batch_size``,
  the bridge's selector and, for a durable topic subscription, its
  ``subscription_name`` / ``client_id``; strict acknowledgements: one of a
  delivery from a previous connection fails, and the bridge drops what it holds
  from it and subscribes again;
* **batching** (:mod:`gateway.bridges.batching`): deliveries collect until
  ``max_batch_size`` messages or ``max_batch_time`` ms after the first one
  (``-1``: only a full batch), then go to the target as one unit
  (:meth:`IConnector.send_batch`; one message: :meth:`IConnector.send`); up
  to the strategy's ``window`` of batches are in flight at once (a batch
  repeating a source id in flight waits for it);
* **quality of service** (:mod:`gateway.bridges.qos`): a strategy per mode owns
  the order of a batch's steps (send, record, acknowledge), which it asks for
  through :class:`~gateway.bridges.qos.BatchPort` (this class's public methods);
* **the message sent** (:mod:`gateway.bridges.outgoing`): a transformed copy,
  built in the one place every engine shares;
* **in doubt** (:mod:`gateway.bridges.in_doubt`): a send whose confirmation was
  lost is sent again under AT_MOST_ONCE and ONCE_AND_ONLY_ONCE only without what
  the target already holds.  ONCE_AND_ONLY_ONCE asks until the target answers
  (state ``in_doubt``, nothing new consumed or sent), at start-up too; AT_MOST_ONCE
  gives the batch up when the target cannot tell;
* **resilience**: a failed subscription (or subscribe) is retried every
  ``failure_retry_interval`` ms, a failed send is resent after the same
  interval, up to ``max_retries`` consecutive attempts (``-1``: forever);
  then the bridge is *failed* (logged, state metric), the gateway goes on;
* **control**: :meth:`start`, :meth:`stop`, :meth:`pause`, :meth:`resume`
  return Deferreds; states are :class:`~gateway.interfaces.BridgeState`'s.

Errors that no retry can fix (a bad destination, a message the target
refuses for good: ``ConnectorError.permanent``, a transformer rejecting a
message, the duplicate store failing) fail the bridge at once: nothing is
acknowledged at the source that the target did not take.  The clock is
injected (a ``Clock`` in unit tests).  Nothing here blocks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.bridges.batching import Batcher, Delivery
from gateway.bridges.config import BridgeConfig
from gateway.bridges.dedup import DuplicateStore
from gateway.bridges.in_doubt import GaveUpInDoubt, InDoubtResolver
from gateway.bridges.metrics import BridgeMetrics
from gateway.bridges.outgoing import (
    KAFKA_FALLBACK_ID,
    MESSAGE_ID_LIST,
    CopyMaker,
    CopyRules,
    TransformRejected,
    source_key,
)
from gateway.bridges.probe import held_message_ids, source_id_of, target_message_id
from gateway.bridges.qos import BatchQuality, batch_quality
from gateway.bridges.source import BridgeSource, SourceConsumer, StaleSubscription
from gateway.deferreds import gather
from gateway.errors import ConnectorError, StaleDelivery
from gateway.interfaces import BridgeState, IBridge, IConnector
from gateway.message.model import Message

__all__ = ["KAFKA_FALLBACK_ID", "MESSAGE_ID_LIST", "Bridge", "BridgeFailed", "source_key"]

HELD_ANSWER_REUSE_S = 30.0
"""How long the target's answer about redelivered messages serves the messages that had arrived
before it was asked (:meth:`Bridge._redelivered_in_doubt`)."""

STARTING = BridgeState.STARTING
RUNNING = BridgeState.RUNNING
PAUSED = BridgeState.PAUSED
RETRYING = BridgeState.RETRYING
IN_DOUBT = BridgeState.IN_DOUBT
FAILED = BridgeState.FAILED
STOPPED = BridgeState.STOPPED


class BridgeFailed(ConnectorError):
    """The bridge gave up (retries exhausted or an error no retry can fix)."""


class _Abandoned(Exception):
    """A batch was dropped because the bridge stopped or failed meanwhile."""


class _NotAcknowledged(Exception):
    """An AT_MOST_ONCE batch whose acknowledgement failed: not sent (the source has it again)."""


def _note(result: Any, into: list[Any]) -> None:
    into.append(result)


def _open(gate: Deferred[None], result: Any) -> Any:
    """Fire ``gate`` (once), passing ``result`` on."""
    if not gate.called:
        gate.callback(None)
    return result


def _watch(d: Deferred[Any]) -> Deferred[None]:
    """A Deferred that fires (with None) when ``d`` does, leaving ``d``'s result alone."""
    watcher: Deferred[None] = Deferred()

    def fired(result: Any) -> Any:
        watcher.callback(None)
        return result

    d.addBoth(fired)
    return watcher


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
        self.copies = CopyMaker(
            CopyRules(self.name, config.source.destination, config.target.destination, self.qos.derives_ids,
                      config.add_message_id_in_header),
            chains, self.metrics.dropped.labels(self.name, "transformer").inc)
        self.subscription = BridgeSource(self, source, config)
        self.batches = Batcher(self, clock, config.max_batch_size, config.max_batch_time)
        self.in_doubt = InDoubtResolver(self, target, self._describe(config.target), clock,
                                        tail=max(1000, 4 * config.prefetch),
                                        first_delay=config.failure_retry_interval / 1000.0,
                                        max_attempts=config.max_retries)
        self._doubting = False
        self._target_ok = True
        self._paused = False
        self._arrivals = 0
        """Redelivered messages received so far (their arrival numbers)."""
        self._redelivered_at: dict[str, int] = {}
        """Source key -> arrival number of a redelivered message not yet in a batch (cleared when the
        subscription goes: the source redelivers them again)."""
        self._held_answer: tuple[float, int, set[str]] | None = None
        """The target's last answer: (when, the arrivals before it was asked, the ids it holds)."""
        self._retry_timers: set[IDelayedCall] = set()
        self._inflight: set[Deferred[None]] = set()
        """The batches in flight (at most the strategy's ``window``)."""
        self._inflight_keys: Counter[str] = Counter()
        """Source keys of the batches in flight: a batch repeating one waits for them."""
        self._acking: set[Deferred[None]] = set()
        self._flushing = False
        self._send_waiters: set[Deferred[None]] = set()
        self._start_waiters: list[Deferred[None]] = []
        self._start_check: Deferred[None] | None = None
        self._start_gate: Deferred[None] | None = None
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
        if self.state in (STARTING, RETRYING, IN_DOUBT):
            return waiter
        self.retries = 0
        self.last_error = None
        self._target_ok = True
        self._doubting = False
        self._paused = False
        self.subscription.paused = False
        self.batches.clear()
        self._set_state(STARTING)
        self.log.info("bridge {name} starting: {source} -> {target} ({qos})", name=self.name,
                      source=self._describe(self.config.source), target=self._describe(self.config.target),
                      qos=self.config.qos)
        if self.qos.checks_target_at_start:
            gate: Deferred[None] = Deferred()
            self._start_gate = gate
            checked = self._resolve_in_doubt()
            self._start_check = checked
            checked.addBoth(lambda result: _open(gate, result))
            checked.addCallback(lambda _: self._checked_at_start())
        else:
            self.subscription.subscribe()
        return waiter

    def _checked_at_start(self) -> None:
        if self.state in (STARTING, IN_DOUBT) and self.subscription.consumer is None:
            self._set_state(STARTING)
            self.subscription.subscribe()

    def in_doubt_resolved(self) -> Deferred[None]:
        """Fires once the in-doubt check of the last :meth:`start` is done (at once
        when there is none): what the target holds is recorded as delivered, so
        consumers of the target may take messages from then on.  Also fires when the
        target cannot be asked (the bridge is ``in_doubt`` and consumes nothing until it
        answers): the gateway's listeners do not wait for a broker that is away."""
        gate = self._start_gate
        if gate is None or gate.called:
            return succeed(None)
        return _watch(gate)

    def _resolve_in_doubt(self) -> Deferred[None]:
        """Count what the target already holds from this bridge as delivered (see
        :mod:`gateway.bridges.probe`): a crash between the target's commit and the
        duplicate store's is resolved by looking.  A target that cannot be asked is
        asked again until it answers (:mod:`gateway.bridges.in_doubt`): the bridge
        consumes nothing meanwhile."""
        assert self.dedup is not None
        dedup = self.dedup
        if self.qos.waits_for_answer:
            d = self.in_doubt.held([self.config.target.destination], "the start-up check")
        else:
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
            if failure.check(GaveUpInDoubt):
                return  # the bridge failed (in doubt) or stopped: it does not consume
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
        self.subscription.pause()
        self._update_state()
        self.log.info("bridge {name} paused", name=self.name)
        return self._drained()

    def resume(self) -> Deferred[None]:
        """Consume again after :meth:`pause`."""
        if not self._paused:
            return succeed(None)
        self._paused = False
        if not self._doubting:
            self.subscription.resume()
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
            "pending": len(self.batches),
            "in_flight": bool(self._inflight),
            "batches_in_flight": len(self._inflight),
            "in_doubt": self._doubting,
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
        if self._doubting:
            self._set_state(IN_DOUBT)
        elif not self.subscription.ok or not self._target_ok:
            if self.state != STARTING or self.subscription.consumer is None or not self._target_ok:
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
        self.batches.disarm()
        for timer in list(self._retry_timers):
            if timer.active():
                timer.cancel()
        self._retry_timers.clear()
        self.in_doubt.cancel()

    def _abandon_sends(self) -> None:
        waiters, self._send_waiters = self._send_waiters, set()
        for waiter in waiters:
            if not waiter.called:
                waiter.errback(_Abandoned())

    def _drained(self) -> Deferred[None]:
        """Fires when no batch is in flight and every acknowledgement was answered."""
        done: Deferred[None] = Deferred()

        def finished(_: object) -> None:
            if not done.called:
                acks = [_watch(ack) for ack in self._acking]
                gather(acks).addBoth(lambda _: done.callback(None))

        gather([_watch(batch) for batch in self._inflight]).addBoth(finished)
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

    # ------------------------------------------------ in doubt (InDoubtOwner)

    def in_doubt_began(self, reason: str) -> None:
        if not self._active():
            return
        self._doubting = True
        self.last_error = reason
        if self._start_gate is not None:
            _open(self._start_gate, None)
        self.subscription.pause()  # nothing new is consumed while the outcome is unknown
        self._update_state()

    def in_doubt_ended(self) -> None:
        self._doubting = False
        if not self._active():
            return
        if not self._paused:
            self.subscription.resume()
        if self._start_check is not None and not self._start_check.called:
            self._set_state(STARTING)  # the start-up check: the subscription comes next
            return
        self._update_state()

    def in_doubt_failed(self, reason: str) -> None:
        self._doubting = False
        self._fail(reason)

    def asking_allowed(self) -> bool:
        return self._active()

    # ------------------------------------------------- source (SourceOwner)

    def delivered(self, consumer: SourceConsumer, message: Message, tag: Any) -> None:
        if not self.subscription.current(consumer) or not self._active():
            return
        if message.redelivered and self.dedup is not None and self.qos.waits_for_answer:
            self._arrivals += 1
            self._redelivered_at[source_key(message)] = self._arrivals  # (see _redelivered_in_doubt)
        if consumer.subscription is None:
            self.batches.add((consumer, message, tag), timed=False)
            return  # delivered while subscribing: flushed once the subscription is ours
        if self.batches.add((consumer, message, tag)):
            self._flush()

    def source_up(self) -> None:
        if not self._active():
            self.subscription.close()
            return
        if self._target_ok:
            self.retries = 0
        self._update_state()
        self._flush()

    def source_down(self, consumer: SourceConsumer, reason: str, retryable: bool) -> None:
        if not self._active():
            return
        # Deliveries not yet sent were never acknowledged: the source has them again.
        self.batches.drop_from(consumer)
        self._redelivered_at.clear()
        if not retryable:
            self._fail(reason)
            return
        self._update_state()
        self._retry_later(reason, self.subscription.subscribe)

    def _close_subscription(self) -> Deferred[None]:
        self.batches.clear()
        self._redelivered_at.clear()
        return self.subscription.close()

    # ----------------------------------------------------- batches (BatchOwner)

    def batch_due(self) -> None:
        self._flush()

    def _ready(self) -> bool:
        if self._paused or self._doubting or not self._active() or len(self._inflight) >= self.qos.window:
            return False
        if not (self.subscription.ready() and self.batches.ready()):
            return False
        if self._inflight:
            # a message again (redelivered after a reconnection) while its first delivery is in
            # flight, or any redelivery under a duplicate store: wait until those batches are done
            for _, message, _ in self.batches.pending[:self.batches.size]:
                if source_key(message) in self._inflight_keys or (message.redelivered and self.qos.uses_dedup):
                    return False
        return True

    def _flush(self) -> None:
        """Send ready batches; a batch that completes at once lets the next go (a loop, not recursion)."""
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._ready():
                batch = self.batches.take()
                keys = [source_key(message) for _, message, _ in batch]
                self._inflight_keys.update(keys)
                marker: Deferred[None] = Deferred()
                self._inflight.add(marker)  # a send completing synchronously must not start another
                done = self._forward(batch)
                done.addErrback(self._unexpected)
                finished: list[Any] = []
                done.addBoth(_note, finished)
                self._inflight.discard(marker)
                if finished:  # the whole chain ran synchronously (``called`` is also true when paused)
                    self._inflight_keys.subtract(keys)
                    self._inflight_keys = +self._inflight_keys
                    marker.callback(None)
                    continue
                self._inflight.add(done)
                done.addBoth(self._batch_done, done, marker, keys)
        finally:
            self._flushing = False
        self.batches.settle()  # nothing left is overdue: the next delivery starts its own max_batch_time
        if not self._paused:
            self.batches.arm()

    def _batch_done(self, result: Any, done: Deferred[None], marker: Deferred[None], keys: list[str]) -> None:
        self._inflight.discard(done)
        self._inflight_keys.subtract(keys)
        self._inflight_keys = +self._inflight_keys  # (drops the keys at zero)
        marker.callback(None)
        self._flush()

    def _unexpected(self, failure: Failure) -> None:
        self.log.failure("bridge {name}: unexpected error", failure, name=self.name)
        self._fail(f"unexpected error: {failure.getErrorMessage()}")

    def _forward(self, batch: list[Delivery]) -> Deferred[None]:
        """Transform, send and acknowledge one batch per the QoS; never fails
        for a connector's fault (those become retries or a failed bridge)."""
        self._batch_sizes.observe(len(batch))
        d = self.qos.select(self, batch)
        d.addCallback(self._forward_fresh)
        d.addErrback(self._batch_failed)
        return d.addCallback(lambda _: None)

    def _forward_fresh(self, split: tuple[list[Delivery], list[Any]]) -> Deferred[None]:
        accepted, skipped = split
        tags = [(consumer, tag) for consumer, _, tag in accepted] + skipped
        d = self.copies.copies([message for _, message, _ in accepted])

        def rejected(failure: Failure) -> Failure:
            failure.trap(TransformRejected)
            return Failure(BridgeFailed(str(failure.value)))

        d.addErrback(rejected)
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

    # --------------------------------------------------- the port (BatchPort)

    def not_yet_delivered(self, batch: list[Delivery]) -> Deferred[Any]:
        """ONCE_AND_ONLY_ONCE: (messages to send, tags only to acknowledge): non-persistent
        messages, those the duplicate store knows and repeats within the batch (a source
        that redelivered after a reconnection while the first delivery was pending) are skipped."""
        skipped: list[tuple[SourceConsumer, Any]] = []
        candidates: list[Delivery] = []
        seen: set[str] = set()
        arrivals = self._redelivered_at
        arrived = {key: arrivals.pop(key, None) for key in (source_key(m) for _, m, _ in batch if m.redelivered)}
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

        def split(known: set[str]) -> tuple[list[Delivery], list[Any]]:
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

        selected: Deferred[Any] = d.addCallbacks(split, unknown)
        if self.dedup is not None and self.qos.waits_for_answer:
            selected.addCallback(self._redelivered_in_doubt, arrived)
        return selected

    def _redelivered_in_doubt(self, split: tuple[list[Delivery], list[Any]],
                              arrived: dict[str, int | None]) -> Deferred[Any] | Any:
        """A redelivered message the duplicate store does not know may have been sent by another
        consumer of the source (a second gateway running this bridge, whose connection died after
        its target committed): ask the target (until it answers) and skip what it holds.

        One answer serves every redelivered message that reached the bridge before the question
        was asked (``arrived``: the arrival number of each), for :data:`HELD_ANSWER_REUSE_S`: the consumer that
        had such a message lost it before it came here, so what its target committed by then is in
        the answer.  A backlog redelivered after a restart (a prefetch's worth, each message
        flagged) so costs one question, not one per batch: a question to a log (Kafka) reads the
        topic's tail, seconds per question, and a batch of 1 took minutes for 300 messages."""
        accepted, skipped = split
        redelivered = [entry for entry in accepted if entry[1].redelivered]
        if not redelivered:
            return split
        assert self.dedup is not None
        dedup = self.dedup
        now, arrivals = self.clock.seconds(), self._arrivals
        answer = self._held_answer
        if answer is not None and now - answer[0] <= HELD_ANSWER_REUSE_S and all(
                (at := arrived.get(source_key(entry[1]))) is not None and at <= answer[1] for entry in redelivered):
            asked: Deferred[set[str] | None] = succeed(answer[2])
        else:
            asked = self.in_doubt.held([self.config.target.destination],
                                       f"{len(redelivered)} redelivered message(s) the duplicate store does not know")

            def remember(held: set[str] | None) -> set[str] | None:
                if held is not None:
                    self._held_answer = (now, arrivals, held)
                return held

            asked.addCallback(remember)

        def looked(held: set[str] | None) -> Any:
            if not held:
                return split
            taken = [entry for entry in accepted
                     if entry[1].redelivered and target_message_id(self.name, source_key(entry[1])) in held]
            if not taken:
                return split
            self.metrics.duplicates.labels(self.name).inc(len(taken))
            self.log.info("bridge {name}: the target already holds {count} redelivered message(s) (sent by "
                          "another consumer of the source); not sent again", name=self.name, count=len(taken))
            keys = [source_key(entry[1]) for entry in taken]
            rest = [entry for entry in accepted if entry not in taken]
            return dedup.record(self.name, keys).addCallback(
                lambda _: (rest, skipped + [(consumer, tag) for consumer, _, tag in taken]))

        def gave_up(failure: Failure) -> None:
            failure.trap(GaveUpInDoubt)
            raise _Abandoned()

        return asked.addCallbacks(looked, gave_up)

    def send(self, outgoing: list[Message]) -> Deferred[None]:  # noqa: C901 (retry, in-doubt and give-up paths of one send: to split with the QoS strategies)
        """Send until the target confirms; retried every interval (ConnectorError),
        fails the bridge otherwise (and at once for a message the target refuses
        for good).  When the failed send may have reached the target (its
        confirmation lost), a ONCE_AND_ONLY_ONCE or AT_MOST_ONCE retry first asks
        the target what it already holds (the in-doubt check) and sends only
        the rest: ONCE_AND_ONLY_ONCE asks until it gets an answer (``in_doubt``),
        AT_MOST_ONCE gives the batch up when the target cannot tell.
        Fails with _Abandoned if the bridge stops or fails."""
        if not outgoing:
            return succeed(None)
        done: Deferred[None] = Deferred()
        remaining = list(outgoing)
        total = len(outgoing)
        target = self._describe(self.config.target)

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
                self.log.info("bridge {name}: target {target} is back", name=self.name, target=target)
            self._target_ok = True
            if self.subscription.ok:
                self.retries = 0
            self._update_state()
            done.callback(None)

        def refused(failure: Failure) -> None:
            if done.called:
                return
            self.metrics.failed.labels(self.name).inc()
            error = failure.value
            reason = f"sending {len(remaining)} message(s) to {target} failed: {error}"
            if not isinstance(error, ConnectorError) or error.permanent:
                if isinstance(error, ConnectorError):
                    reason = (f"the target {target} refused a message of a batch of "
                              f"{len(remaining)} (ids {_ids(remaining)}) for good: {error}")
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
            if self.qos.waits_for_answer:
                asked = self.in_doubt.held(destinations, f"a batch of {len(remaining)} ({_ids(remaining)})")
                asked.addCallbacks(lambda held: looked([held]), gave_up)
                return
            probes = [held_message_ids(self.target, destination, tail=max(1000, 4 * self.config.prefetch))
                      for destination in destinations]
            gather(probes).addCallbacks(looked, unknown)

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

        def gave_up(failure: Failure) -> None:
            failure.trap(GaveUpInDoubt)
            self._send_waiters.discard(done)
            if not done.called:
                done.errback(_Abandoned())

        def unknown(failure: Failure) -> None:
            self.log.warn("bridge {name}: cannot ask the target what it holds before a retry: {error}",
                          name=self.name, error=failure.getErrorMessage())
            if self.qos.acknowledges_first:
                drop()
            else:
                attempt()

        def drop() -> None:
            """AT_MOST_ONCE, the outcome of a send unknown and the target unable to tell:
            sending again could duplicate, so the (acknowledged) batch is given up."""
            self._send_waiters.discard(done)
            self.metrics.dropped.labels(self.name, "in-doubt").inc(len(remaining))
            self.log.warn("bridge {name}: AT_MOST_ONCE: {count} message(s) (ids {ids}) may or may not have reached "
                          "{target}, which cannot tell; not sent again", name=self.name, count=len(remaining),
                          ids=_ids(remaining), target=target)
            if not done.called:
                done.callback(None)

        attempt()
        return done

    def send_and_acknowledge_locally(self, outgoing: list[Message], tags: list[tuple[SourceConsumer, Any]]) -> Any:
        """Send the batch and acknowledge it at the source in one local transaction of the
        provider; a failure rolls both back and the source delivers the batch again."""
        consumers = {consumer for consumer, _ in tags}
        try:
            d = self.subscription.forward_locally(outgoing, tags)
        except StaleSubscription:
            raise _Abandoned() from None  # that subscription is gone: the provider delivers the batch again

        def done(_: object) -> None:
            self.forwarded += len(outgoing)
            self._forward_fields.inc(len(outgoing))
            self._target_ok = True
            if self.subscription.ok:
                self.retries = 0

        def failed(failure: Failure) -> None:
            self.metrics.failed.labels(self.name).inc()
            error = failure.value
            if isinstance(error, ConnectorError) and error.permanent:
                # rolled back: the batch stays at the source; sending it again gives the same answer
                self._fail(f"the target {self._describe(self.config.target)} refused a message of a batch of "
                           f"{len(outgoing)} (ids {_ids(outgoing)}) for good: {error}")
                raise _Abandoned()
            for consumer in consumers:
                self.subscription.lost(consumer, ConnectorError(f"local transaction failed: "
                                                                f"{failure.getErrorMessage()}"))
            raise _Abandoned()

        return d.addCallbacks(done, failed)

    def record(self, ids: list[str]) -> Deferred[None]:
        assert self.dedup is not None
        d = self.dedup.record(self.name, ids)

        def failed(failure: Failure) -> None:
            self._fail(f"cannot record delivered ids: {failure.getErrorMessage()}")
            raise _Abandoned()

        d.addErrback(failed)
        return d

    def acknowledge_behind(self, tags: list[tuple[SourceConsumer, Any]]) -> None:
        """Acknowledge without holding up the next batch (the target has this one):
        a source whose acknowledgements are slow (a Kafka commit) still streams."""
        ack = self.acknowledge(tags)
        answered: list[Any] = []
        ack.addBoth(_note, answered)
        if answered:
            return
        self._acking.add(ack)

        def forget(_: object) -> None:
            self._acking.discard(ack)

        ack.addBoth(forget)

    def acknowledge(self, tags: list[tuple[SourceConsumer, Any]]) -> Deferred[None]:
        """Acknowledge at the source.  A failed acknowledgement is a lost source:
        the messages come again (skipped under ONCE_AND_ONLY_ONCE)."""

        def failed(failure: Failure) -> None:
            if failure.check(StaleDelivery):
                self.log.warn("bridge {name}: {error}; dropping the deliveries held from that connection",
                              name=self.name, error=failure.getErrorMessage())
            if self.qos.acknowledges_first:
                raise _NotAcknowledged()  # not acknowledged: sending could duplicate

        return self.subscription.acknowledge(tags).addErrback(failed)


def _ids(messages: list[Message]) -> str:
    return ", ".join(m.message_id for m in messages[:5]) + (" ..." if len(messages) > 5 else "")
