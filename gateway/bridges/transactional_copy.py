"""ONCE_AND_ONLY_ONCE through the transactions of a log (Kafka -> Kafka): copies and source
positions in one transaction.

:class:`TransactionalCopyBridge` is the :class:`~gateway.interfaces.IBridge` of the
:class:`~gateway.bridges.qos.TransactionalCopy` strategy.  The Kafka connector's
subscriptions commit offsets on their own, so this engine does not use them: one thread
drives an :class:`~gateway.interfaces.ITransactionalCopy` the source connector made
(:meth:`~gateway.interfaces.IExactlyOnceSource.transactional_copy`; for Kafka,
:mod:`gateway.connectors.kafka_transactions`: a ``read_committed`` consumer in a child
process and a producer with ``transactional.id = jmsgateway-bridge-<name>``) and loops::

    messages = copy.consume(max_batch_size, max_batch_time)
    copy.commit(transformed messages)   # records and source offsets in one transaction

So the copies and the source offsets become visible together or not at all.  A crash
leaves an open transaction that the next start fences and aborts; the consumer then
resumes at the committed offsets.  A batch holding records of a partition a rebalance took away
is dropped before its transaction (:class:`~gateway.errors.BatchRevoked`, logged, not a failure).
A failed transaction is aborted, the consumer rewound
(:meth:`~gateway.interfaces.ITransactionalCopy.recover`), and the batch tried again after
``failure_retry_interval`` (up to ``max_retries``).  Readers of the target must use
``isolation.level=read_committed`` (librdkafka's default) to see no aborted copies.
Source and target must be one cluster (offsets commit on the producer's cluster); the
duplicate-store strategy runs otherwise.

The thread talks to the reactor only through ``callFromThread``; transformers run on the
reactor thread (``blockingCallFromThread``).  No Kafka client code here: the copy has it.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.threads import blockingCallFromThread
from twisted.logger import Logger
from zope.interface import implementer

from gateway.bridges.config import BridgeConfig
from gateway.bridges.metrics import BridgeMetrics
from gateway.bridges.outgoing import CopyMaker, CopyRules, TransformRejected, make_copy
from gateway.errors import BatchRevoked, ConnectorError, MessageRefused
from gateway.interfaces import BridgeState, IBridge, ITransactionalCopy
from gateway.message.model import Message

STARTING = BridgeState.STARTING
RUNNING = BridgeState.RUNNING
PAUSED = BridgeState.PAUSED
RETRYING = BridgeState.RETRYING
FAILED = BridgeState.FAILED
STOPPED = BridgeState.STOPPED


@implementer(IBridge)
class TransactionalCopyBridge:
    """A bridge moving batches in transactions of the source's log (see the module docstring)."""

    log = Logger()

    def __init__(
        self,
        config: BridgeConfig,
        copy: ITransactionalCopy,
        *,
        clock: Any,
        metrics: BridgeMetrics | None = None,
        chains: Any = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.copy = copy
        self.reactor = clock
        self.metrics = metrics or BridgeMetrics()
        self.chains = chains
        dropped = self.metrics.dropped.labels(self.name, "transformer")
        self.copies = CopyMaker(
            CopyRules(self.name, config.source.destination, config.target.destination, True,
                      config.add_message_id_in_header),
            chains, lambda: self.reactor.callFromThread(dropped.inc))
        self.state = STOPPED
        self.last_error: str | None = None
        self.forwarded = 0
        self.retries = 0
        self._thread: threading.Thread | None = None
        self._commands: queue.SimpleQueue[tuple[str, Deferred[None] | None]] = queue.SimpleQueue()
        self._halt = threading.Event()
        self._paused = False
        self._start_waiters: list[Deferred[None]] = []
        self.metrics.state.labels(self.name).state(STOPPED)

    # ------------------------------------------------------------ control API

    def start(self) -> Deferred[None]:
        """Start the bridge thread; fires once it consumes (or failed)."""
        if self._thread is not None and self._thread.is_alive():
            return succeed(None)
        self._halt.clear()
        self._paused = False
        self.retries = 0
        self.last_error = None
        self._set_state(STARTING)
        waiter: Deferred[None] = Deferred()
        self._start_waiters.append(waiter)
        self._thread = threading.Thread(target=self._run, name=f"bridge-{self.name}", daemon=True)
        self._thread.start()
        return waiter

    def in_doubt_resolved(self) -> Deferred[None]:
        """Nothing is in doubt: copies and offsets commit in one transaction."""
        return succeed(None)

    def stop(self) -> Deferred[None]:
        """Finish the transaction under way and stop; fires when the thread ended."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            self._set_state(STOPPED)
            return succeed(None)
        done: Deferred[None] = Deferred()
        self._commands.put(("stop", done))
        self._halt.set()
        return done

    def pause(self) -> Deferred[None]:
        """Stop consuming after the transaction under way; fires then."""
        return self._command("pause")

    def resume(self) -> Deferred[None]:
        """Consume again."""
        return self._command("resume")

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "qos": self.config.qos,
            "engine": "kafka-transactions",
            "source": f"{self.config.source.connector}:{self.config.source.destination}",
            "target": f"{self.config.target.connector}:{self.config.target.destination}",
            "forwarded": self.forwarded,
            "transaction": self.copy.open_transaction,
            "transactions": self.copy.transactions_begun,
            "retries": self.retries,
            "last_error": self.last_error,
        }

    def _command(self, kind: str) -> Deferred[None]:
        if self._thread is None or not self._thread.is_alive():
            return succeed(None)
        done: Deferred[None] = Deferred()
        self._commands.put((kind, done))
        return done

    # --------------------------------------------------- reactor-thread helpers

    def _set_state(self, state: BridgeState) -> None:
        self.state = state
        self.metrics.state.labels(self.name).state(state)
        if state in (RUNNING, PAUSED, FAILED, STOPPED):
            waiters, self._start_waiters = self._start_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _forwarded(self, count: int, batch: int) -> None:
        self.forwarded += count
        self.metrics.forwarded.labels(self.name).inc(count)
        self.metrics.batch_size.labels(self.name).observe(batch)
        if self.retries or self.state in (RETRYING, STARTING):
            self.retries = 0
            self._set_state(PAUSED if self._paused else RUNNING)

    def _failed_attempt(self, reason: str, retries: int) -> None:
        self.retries = retries
        self.last_error = reason
        self.metrics.failed.labels(self.name).inc()
        self.metrics.retries.labels(self.name).inc()
        self._set_state(RETRYING)
        self.log.warn("bridge {name}: {reason}; retry {count} in {delay}s", name=self.name, reason=reason,
                      count=retries, delay=self.config.failure_retry_interval / 1000.0)

    def _batch_dropped(self, reason: str) -> None:
        self.log.info("bridge {name}: {reason}", name=self.name, reason=reason)

    def _gave_up(self, reason: str) -> None:
        self.last_error = reason
        self._set_state(FAILED)
        self.log.error("bridge {name} FAILED: {reason}", name=self.name, reason=reason)

    @staticmethod
    def _fire(done: Deferred[None] | None) -> None:
        if done is not None and not done.called:
            done.callback(None)

    # ------------------------------------------------------------ bridge thread

    def _run(self) -> None:
        call = self.reactor.callFromThread
        copy = self.copy
        selector = None
        if self.config.selector:
            from gateway.selector import compile_selector

            selector = compile_selector(self.config.selector).matches
        failures = 0
        try:
            while not self._halt.is_set():
                try:
                    if copy.open():
                        call(self._set_state, PAUSED if self._paused else RUNNING)
                    if not self._serve_commands():
                        break
                    if self._paused:
                        self._halt.wait(0.05)
                        continue
                    moved = self._one_batch(selector)
                    if moved is not None:
                        failures = 0
                        if moved:
                            call(self._forwarded, moved[0], moved[1])
                except BatchRevoked as exc:
                    # a rebalance took a partition of the batch away: nothing was written, not a failure
                    copy.recover(exc)
                    call(self._batch_dropped, str(exc))
                except Exception as exc:
                    failures += 1
                    settled = copy.recover(exc)
                    reason = f"kafka transaction failed: {exc}" + (f"; {settled}" if settled else "")
                    if (isinstance(exc, ConnectorError) and exc.permanent) or copy.permanent(exc):
                        # the same batch would fail the same way: nothing is committed
                        call(self._gave_up, f"{reason} (no retry can help; the batch stays at the source, its "
                                            "offsets not committed)")
                        return
                    limit = self.config.max_retries
                    if limit != -1 and failures > limit:
                        call(self._gave_up, f"{reason} (gave up after {limit} retries)")
                        return
                    call(self._failed_attempt, reason, failures)
                    self._halt.wait(self.config.failure_retry_interval / 1000.0)
        finally:
            copy.close()
            pending: list[Deferred[None] | None] = []
            while not self._commands.empty():
                pending.append(self._commands.get()[1])
            if self.state != FAILED:
                call(self._set_state, STOPPED)
            for done in pending:
                call(self._fire, done)

    def _serve_commands(self) -> bool:
        """Apply pause/resume/stop; False means stop."""
        call = self.reactor.callFromThread
        while not self._commands.empty():
            kind, done = self._commands.get()
            if kind == "stop":
                self._commands.put((kind, done))
                return False
            if kind == "pause":
                self._paused = True
                call(self._set_state, PAUSED)
            elif kind == "resume":
                self._paused = False
                call(self._set_state, RUNNING)
            call(self._fire, done)
        return True

    def _one_batch(self, selector: Any) -> tuple[int, int] | None:
        """Move one batch in one transaction; returns (messages sent, messages consumed)."""
        batch_time = self.config.max_batch_time
        timeout = 1.0 if batch_time == -1 else batch_time / 1000.0
        messages = self.copy.consume(self.config.max_batch_size, timeout)
        if not messages:
            return None
        while batch_time == -1 and len(messages) < self.config.max_batch_size and not self._halt.is_set():
            messages.extend(self.copy.consume(self.config.max_batch_size - len(messages), 1.0))
        outgoing = []
        for message in messages:
            if selector is not None and not selector(message):
                continue
            outgoing.extend(self._transformed(message))
        self.copy.commit(outgoing)
        return len(outgoing), len(messages)

    def _transformed(self, message: Message) -> list[Message]:
        """The copy of ``message`` to commit (:mod:`gateway.bridges.outgoing`), transformed on the
        reactor thread; none when a transformer dropped it."""
        if self.chains is None:
            return [make_copy(self.copies.rules, message, message, self.config.target.destination)]
        outcome = blockingCallFromThread(self.reactor, self.chains.run, message, self.copies.context())
        try:
            copy = self.copies.copy_of(outcome, message)
        except TransformRejected as error:
            raise MessageRefused(str(error)) from None
        return [] if copy is None else [copy]
