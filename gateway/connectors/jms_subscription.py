"""A subscription of the ``jms`` connector: one JMS session on its own Java thread.

:class:`JmsSubscription` is the reactor side (:class:`ISubscription`);
:class:`ConsumerThread` owns the session, its ``MessageConsumer`` and every
JMS call on them.  The session is *transacted*, whatever the consumer's ack
mode, because a JMS acknowledgement (``acknowledge()``, ``commit()``) covers
every message the session received: the thread commits only once every
delivery it handed on is settled, so nothing is acknowledged before its
consumer acked it.  A NACK rolls the session back; the deliveries acked in
that window are recognised when the provider redelivers them and committed
without being delivered again.  While deliveries wait to be settled the thread
receives no further message: ``prefetch`` bounds what is unacknowledged.
On close, a window both acked and not is settled exactly (:meth:`ConsumerThread._close_window`:
for a queue, the unacked messages go back as marked copies in the commit that acks the window).

The thread blocks in ``receive(receive_timeout)`` when it may take a message and
on its command queue otherwise; messages go to the reactor with
``reactor.callFromThread``.  An *idle* subscription costs no thread and no CPU:
after :data:`PARK_AFTER` empty receives with nothing unsettled, the thread sets a
``MessageListener`` on its consumer (a doorbell) and ends, keeping the session
(*parked*).  The first message (handed to the listener on the provider's thread)
or command starts a new thread for the session, which takes the listener off
again and goes on with ``receive``; a provider that refuses listeners keeps
its thread polling.  In *batch* mode (a bridge's local
transaction) it hands on whole batches and :meth:`JmsSubscription.forward`
sends the batch's copies and commits, in the session that consumed them.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.connectors.jms_mapping import from_jms, returned_copy, to_jms
from gateway.connectors.jms_provider import SESSION_TRANSACTED, JavaThread, java_error
from gateway.connectors.jms_settings import JmsSettings
from gateway.connectors.stomp_settings import StompBrokerMetrics
from gateway.connectors.stomp_subscription import durable_subscription_name
from gateway.errors import (
    ConnectorError,
    ConnectorUnavailable,
    DestinationError,
    MessageRefused,
    SelectorError,
    StaleDelivery,
)
from gateway.interfaces import IConsumer, ITransactedSubscription, SubscriptionSpec
from gateway.message.model import Message

if TYPE_CHECKING:  # pragma: no cover
    from gateway.connectors.jms_link import Link


PARK_AFTER = 10
"""Empty receives in a row, with nothing unsettled, after which a subscription parks (its thread ends)."""

PREFIX_REDELIVERY_WAIT = 5000
"""ms a closing durable topic subscription waits for each acknowledged message the provider
redelivers after its rollback (a provider may delay redeliveries: ActiveMQ by 1 s by default)."""


class SubscriptionOwner(Protocol):
    """What a :class:`JmsSubscription` and its thread use of their connector (the ``QueueOwner`` shape:
    :class:`~gateway.connectors.jms_api.JmsConnector` provides it; a unit test gives a fake)."""

    name: str
    """The connector's name, for logs and metrics labels."""
    reactor: Any
    """Where the subscription's thread hands its results (``callFromThread``)."""
    settings: JmsSettings
    """The connector's settings (``receive_timeout`` …)."""
    metrics: StompBrokerMetrics
    """Counts deliveries per connector."""

    def jpype(self) -> Any:
        """The jpype module (the JVM runs)."""

    def forget(self, subscription: JmsSubscription) -> None:
        """``subscription`` is closed: not restored after a reconnection."""

    def closing_durable(self, subscription: JmsSubscription, closing: Deferred[None]) -> None:
        """A durable subscription closes; a new one to the same name waits for ``closing``."""

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        """Delete an inactive durable subscription at the provider."""

    def lost(self, link: Link | None, reason: str) -> None:
        """(reactor thread) A JMS call on ``link`` failed: the connection is lost."""


class _Command:
    __slots__ = ("args", "done", "kind")

    def __init__(self, kind: str, args: Any = None, done: Deferred[Any] | None = None) -> None:
        self.kind = kind
        self.args = args
        self.done = done


@implementer(ITransactedSubscription)
class JmsSubscription:
    """One consumer's subscription at the JMS provider (see the module docstring)."""

    log = Logger()

    def __init__(self, connector: SubscriptionOwner, spec: SubscriptionSpec, consumer: IConsumer, *,
                 batch_time: int | None = None) -> None:
        self.connector = connector
        self.spec = spec
        self.consumer = consumer
        self.closed = False
        self.paused = False
        self.epoch = 0
        self.batch_time = batch_time
        """Batch mode (a bridge's local transaction): ms a batch may wait to fill (-1: full only)."""
        self._backlog: list[tuple[Message, Any]] = []
        self.lock = threading.Lock()
        """Guards :attr:`thread` and :attr:`parked` (the reactor, the thread and the doorbell use them)."""
        self.parked: ConsumerThread | None = None
        """The thread that parked the session (ended, its listener set), or None."""
        self.thread = ConsumerThread(self)
        self.thread.start()

    def _command(self, command: _Command) -> None:
        """Queue ``command`` for the session's thread; a parked session gets a new thread."""
        with self.lock:
            self.thread.commands.put(command)
            parked, self.parked = self.parked, None
            if parked is not None:
                self.thread = ConsumerThread(self, previous=parked)
                self.thread.start()

    def doorbell(self, session: Any, message: Any) -> None:
        """(the provider's thread) The listener of the parked ``session`` got ``message``: wake the session."""
        self._command(_Command("delivered", (session, message)))

    # -- reactor side ------------------------------------------------------------

    def establish(self, link: Link) -> Deferred[None]:
        """Make the session and consumer on ``link`` (first time or after a reconnection)."""
        self.epoch += 1
        self._backlog.clear()
        done: Deferred[None] = Deferred()
        self._command(_Command("establish", (link, self.epoch), done))
        return done

    def connection_lost(self) -> None:
        """The session is gone with its connection: its deliveries come again after the reconnection."""
        self.epoch += 1
        self._backlog.clear()
        self._command(_Command("lost"))

    def fail(self, error: Exception) -> None:
        """End the subscription without the consumer asking."""
        if self.closed:
            return
        self._stop_thread()
        self.consumer.subscription_failed(error)

    def _received(self, epoch: int, batch: list[tuple[Message, Any]]) -> None:
        if self.closed or epoch != self.epoch:
            return
        self.connector.metrics.deliveries.labels(self.connector.name).inc(len(batch))
        for message, tag in batch:
            if self.paused or self._backlog:
                self._backlog.append((message, tag))
            else:
                self._deliver(message, tag)

    def _deliver(self, message: Message, tag: Any) -> None:
        consumer: Any = self.consumer
        try:
            handed_on = consumer.deliver(message, tag)
        except Exception:
            self.log.failure("consumer of {destination} failed on message {id}", destination=self.spec.destination,
                             id=message.message_id)
            return
        if self.spec.ack_mode == "auto" and handed_on is not False and not self.closed and self.batch_time is None:
            self._command(_Command("ack", [tag]))

    def _settle(self, what: str, tags: list[Any]) -> Deferred[None]:
        if self.spec.strict_acks and any(tag[0] != self.epoch for tag in tags):
            # made on an earlier session: the provider delivers it again, it was not acknowledged
            return fail(StaleDelivery(f"{what} of a delivery from an earlier session of {self.spec.destination}"))
        if self.closed:
            return succeed(None)
        done: Deferred[None] = Deferred()
        self._command(_Command(what, list(tags), done))
        return done

    def ack(self, tags: list[Any]) -> Deferred[None]:
        """Fires once the provider committed the transaction that acknowledges them."""
        return self._settle("ack", tags)

    def nack(self, tags: list[Any]) -> Deferred[None]:
        """Rolled back (redelivered by the provider) once every delivery of the window is settled."""
        return self._settle("nack", tags)

    def forward(self, messages: list[Message], tags: list[Any]) -> Deferred[None]:
        """:class:`ITransactedSubscription`: send and acknowledge in one local transaction."""
        if self.closed:
            return fail(ConnectorUnavailable(f"subscription to {self.spec.destination} is closed"))
        done: Deferred[None] = Deferred()
        self._command(_Command("forward", (messages, list(tags)), done))
        return done

    def pause(self) -> None:
        self.paused = True
        self._command(_Command("pause"))

    def resume(self) -> None:
        self.paused = False
        self._command(_Command("resume"))
        while self._backlog and not self.paused and not self.closed:
            message, tag = self._backlog.pop(0)
            self._deliver(message, tag)

    def close(self) -> Deferred[None]:
        """Close the consumer and its session; what was not acknowledged is redelivered."""
        if self.closed:
            return succeed(None)
        self.connector.forget(self)
        closing = self._stop_thread()
        self.connector.closing_durable(self, closing)
        return closing

    def _stop_thread(self) -> Deferred[None]:
        self.closed = True
        self._backlog.clear()
        done: Deferred[None] = Deferred()
        self._command(_Command("close", None, done))
        return done

    def unsubscribe(self) -> Deferred[None]:
        """Close and, for a durable subscription, delete it at the provider."""
        closing = self.close()
        spec = self.spec
        if not (spec.durable_name and spec.destination.startswith("/topic/")):
            return closing
        name = spec.durable_name
        return closing.addCallback(lambda _: self.connector.unsubscribe_durable(spec.client_id or "", name))


class ConsumerThread(JavaThread):
    """The Java thread of one :class:`JmsSubscription` (every JMS call of its session)."""

    log = Logger()

    def __init__(self, subscription: JmsSubscription, previous: ConsumerThread | None = None) -> None:
        super().__init__(f"jms-{subscription.connector.name}-{subscription.spec.destination}")
        self.subscription = subscription
        self.connector = subscription.connector
        self.reactor = subscription.connector.reactor
        self.commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self.session: Any = None
        self.consumer: Any = None
        self.producer: Any = None
        self.link: Any = None
        self.epoch = 0
        self.paused = False
        self.idle = 0
        """Empty receives in a row with nothing unsettled (:data:`PARK_AFTER`)."""
        self.parking = False
        self.unparked = previous is not None
        """Woken from a parked session: the listener comes off first thing."""
        self.outstanding: dict[Any, str] = {}
        """tag -> JMSMessageID of every delivery since the last commit/rollback, in order."""
        self.received: dict[Any, Any] = {}
        """tag -> the JMS message itself, for the same deliveries (copied back on close)."""
        self.acked: set[Any] = set()
        self.nacked: set[Any] = set()
        self.waiting: list[Deferred[None]] = []
        self.acked_before_rollback: set[str] = set()
        self.batch: list[tuple[Message, Any]] = []
        self.batch_started = 0.0
        self.batch_handed = False
        self.sequence = itertools.count(1)
        self.running = True
        if previous is not None:  # the parked session goes on (nothing was unsettled when it parked)
            self.commands = previous.commands
            self.session, self.consumer, self.producer = previous.session, previous.consumer, previous.producer
            self.link, self.epoch, self.paused = previous.link, previous.epoch, previous.paused
            self.acked_before_rollback = previous.acked_before_rollback
            self.sequence = previous.sequence

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        self.reactor.callFromThread(function, *args)

    def run(self) -> None:
        jpype = self.connector.jpype()
        self.attach(jpype)
        try:
            if self.unparked and self.consumer is not None:
                self._set_listener(None)
            while self.running:
                command = self._next_command()
                if command is not None:
                    self._handle(command)
                elif self._may_receive():
                    self._receive()
        finally:
            if not self.parking:
                self._drop_session()
            self.detach(jpype)

    # -- parking -----------------------------------------------------------------

    def _set_listener(self, listener: Any) -> bool:
        try:
            self.consumer.setMessageListener(listener)
            return True
        except Exception as error:  # a provider without listeners on this consumer, or a dead session
            self.log.debug("jms {name}: {destination}: no listener: {error}", name=self.connector.name,
                           destination=self.subscription.spec.destination, error=java_error(error))
            return False

    def _park(self) -> None:
        """Idle: a listener (the doorbell) instead of this thread, which ends keeping the session."""
        self.idle = 0
        subscription = self.subscription
        session, api = self.session, self.link.api

        def on_message(message: Any) -> None:
            subscription.doorbell(session, message)

        if not self._set_listener(api.jpype.JProxy(api.MessageListener, dict={"onMessage": on_message})):
            return
        with subscription.lock:
            if self.commands.empty() and subscription.thread is self:
                subscription.parked = self
                self.parking = True
                self.running = False
                return
        self._set_listener(None)  # something came meanwhile: go on

    def _next_command(self) -> _Command | None:
        try:
            if self._may_receive():
                return self.commands.get_nowait()
            if self.batch and not self.batch_handed and self.subscription.batch_time is not None:
                return self.commands.get(timeout=max(0.001, self._batch_remaining()))
            return self.commands.get()
        except queue.Empty:
            # no command: a batch goes once full (in _receive) or once its time ran out, never
            # merely because no command is waiting (that handed batches of one message)
            if self.batch and not self.batch_handed and self._batch_remaining() <= 0:
                self._hand_batch()
            return None

    def _batch_remaining(self) -> float:
        batch_time = self.subscription.batch_time
        if batch_time is None or batch_time < 0:
            return 3600.0
        return self.batch_started + batch_time / 1000.0 - time.monotonic()

    def _may_receive(self) -> bool:
        if self.session is None or self.paused or not self.running:
            return False
        if self.subscription.batch_time is not None:
            if self.batch_handed or len(self.outstanding) >= self.subscription.spec.prefetch:
                return False
            return not (self.batch and self._batch_remaining() <= 0)
        prefetch = max(1, self.subscription.spec.prefetch)
        # prefetch bounds the unsettled deliveries; settled ones wait for the rest of their window
        # (one commit acknowledges every message the session received), at most another prefetch.
        unsettled = len(self.outstanding) - len(self.acked) - len(self.nacked)
        return unsettled < prefetch and len(self.outstanding) < 2 * prefetch

    # -- commands ----------------------------------------------------------------

    def _handle(self, command: _Command) -> None:
        kind = command.kind
        try:
            if kind == "ack" or kind == "nack":
                self._settle(command)
            elif kind == "forward":
                self._forward(command)
            elif kind == "establish":
                self._establish(command)
            elif kind == "delivered":
                session, message = command.args
                if session is self.session:  # else its session is gone: the provider has it again
                    self._take(message)
            elif kind == "lost":
                self._drop_session()
            elif kind == "pause":
                self.paused = True
            elif kind == "resume":
                self.paused = False
            elif kind == "close":
                self.running = False
                self._close_window()
                self._drop_session()
                self._answer(command.done, None)
        except Exception as error:  # a JMS call failed: the connection is in trouble
            self._failed(error, command.done)

    def _answer(self, done: Deferred[Any] | None, result: Any) -> None:
        if done is not None:
            self.call(done.callback, result)

    def _answer_error(self, done: Deferred[Any] | None, error: Exception) -> None:
        if done is not None:
            self.call(done.errback, Failure(error))

    def _failed(self, error: BaseException, done: Deferred[Any] | None) -> None:
        reason = java_error(error)
        if isinstance(error, ConnectorError | SelectorError | DestinationError):
            self._answer_error(done, error)
            return
        self._answer_error(done, ConnectorUnavailable(f"{self.subscription.spec.destination}: {reason}"))
        for waiter in self.waiting:
            self._answer_error(waiter, ConnectorUnavailable(reason))
        self.waiting = []
        self._drop_session()
        self.call(self.connector.lost, self.link, reason)

    def _establish(self, command: _Command) -> None:
        self._drop_session()
        link, epoch = command.args
        spec = self.subscription.spec
        api = link.api
        self.link = link
        self.epoch = epoch
        session = link.connection.createSession(True, SESSION_TRANSACTED)
        try:
            destination = link.destination(session, spec.destination, spec.exclusive)
            selector = spec.selector or None
            if spec.durable_name and spec.destination.startswith("/topic/"):
                name = durable_subscription_name(spec.client_id, spec.durable_name)
                consumer = session.createDurableSubscriber(destination, name, selector, False)
            elif selector is None:
                consumer = session.createConsumer(destination)
            else:
                consumer = session.createConsumer(destination, selector)
        except api.InvalidSelectorException as error:
            session.close()
            raise SelectorError(java_error(error), selector=spec.selector or "") from None
        except api.InvalidDestinationException as error:
            session.close()
            raise DestinationError(f"{spec.destination}: {java_error(error)}") from None
        except api.JMSException as error:
            session.close()
            raise ConnectorError(f"{spec.destination}: {java_error(error)}") from None
        except BaseException:
            session.close()
            raise
        self.session, self.consumer = session, consumer
        self.producer = None
        self.acked_before_rollback.clear()
        self._answer(command.done, None)

    def _settle(self, command: _Command) -> None:
        tags = command.args
        known = [tag for tag in tags if tag in self.outstanding]
        if not known:  # from an earlier session (redelivered anyway) or already settled
            self._answer(command.done, None)
            return
        (self.acked if command.kind == "ack" else self.nacked).update(known)
        if command.done is not None:
            self.waiting.append(command.done)
        self._maybe_end_transaction()
        if self.subscription.batch_time is None and self.waiting:
            # A client's ACK does not wait for the other deliveries of the window (it may hold
            # them until it got this receipt): it is recorded now, committed with the window.
            waiting, self.waiting = self.waiting, []
            for done in waiting:
                self._answer(done, None)

    def _maybe_end_transaction(self) -> None:
        if len(self.acked) + len(self.nacked) < len(self.outstanding) or self.session is None:
            return
        if self.nacked:
            self.acked_before_rollback.update(self.outstanding[tag] for tag in self.acked)
            self.session.rollback()
        else:
            self.session.commit()
        self.outstanding.clear()
        self.received.clear()
        self.acked.clear()
        self.nacked.clear()
        self.batch = []
        self.batch_handed = False
        waiting, self.waiting = self.waiting, []
        for done in waiting:
            self._answer(done, None)

    def _forward(self, command: _Command) -> None:
        messages, tags = command.args
        if self.session is None or set(tags) != set(self.outstanding):
            self._answer_error(command.done, ConnectorUnavailable(
                f"{self.subscription.spec.destination}: the batch is no longer the session's (reconnected)"))
            return
        link = self.link
        if self.producer is None:
            self.producer = self.session.createProducer(None)
        try:
            for message in messages:
                jms, mode, priority, ttl = to_jms(message, self.session, link.api,
                                                  lambda name: link.destination(self.session, name))
                self.producer.send(link.destination(self.session, message.destination), jms, mode, priority, ttl)
        except (ConnectorError, link.api.InvalidDestinationException, link.api.MessageFormatException) as error:
            self.session.rollback()
            self._clear_window()
            self._answer_error(command.done, MessageRefused(f"refused by the provider: {java_error(error)}"))
            return
        self.session.commit()
        self._clear_window()
        self._answer(command.done, None)

    def _close_window(self) -> None:
        """On close: the window's acknowledged deliveries stay acknowledged, the others come again.

        One JMS commit acknowledges every message the session received, so a window holding
        both is settled by what the destination allows:

        * a queue: one transaction acknowledges the whole window and sends a copy of each
          unacknowledged message back to its queue (:func:`~gateway.connectors.jms_mapping.returned_copy`:
          same body, headers and properties, marked with the original message id and delivery
          count, so the gateway delivers it again as the same message, flagged redelivered);
          nothing is lost and nothing acknowledged comes again, whatever the provider's
          redelivery order, delay or other consumers;
        * a durable topic subscription (a copy would reach every subscriber): the acknowledged
          leading deliveries are received again after a rollback and committed
          (:meth:`_commit_acked_prefix`); one acknowledged after an unacknowledged one comes again;
        * a non-durable topic subscription: what it held ends with it (JMS), nothing to do.

        A window with nothing acknowledged is rolled back (the provider redelivers it, flagged),
        a window all acknowledged is committed."""
        session = self.session
        if session is None or not self.outstanding:
            return
        unsettled = [tag for tag in self.outstanding if tag not in self.acked]
        if not unsettled:
            session.commit()
            self._clear_window()
            return
        if len(unsettled) == len(self.outstanding):
            return  # closing the session rolls it back
        destination = self.subscription.spec.destination
        if destination.startswith("/queue/"):
            self._return_copies(unsettled)
        elif self.subscription.spec.durable_name:
            self._commit_acked_prefix()

    def _return_copies(self, unsettled: list[Any]) -> None:
        """Acknowledge the window and send copies of ``unsettled`` back, in one transaction."""
        session, link = self.session, self.link
        count = len(unsettled)
        try:
            if self.producer is None:
                self.producer = session.createProducer(None)
            for tag in unsettled:
                original = self.received[tag]
                copy, mode, priority, ttl = returned_copy(original, link.api)
                where = original.getJMSDestination()
                if where is None:
                    where = link.destination(session, self.subscription.spec.destination)
                self.producer.send(where, copy, mode, priority, ttl)
            session.commit()
        except Exception as error:
            with contextlib.suppress(Exception):  # the connection may be gone: then so is the transaction
                session.rollback()
            self.log.warn("jms {name}: closing {destination}: could not return {count} unacknowledged messages "
                          "as copies ({error}); the provider redelivers the whole window, acknowledged ones "
                          "included", name=self.connector.name, destination=self.subscription.spec.destination,
                          count=count, error=java_error(error))
            return
        self._clear_window()

    def _commit_acked_prefix(self) -> None:
        """On close of a durable topic subscription: keep the acknowledgements of the window's
        leading acked deliveries.  The session is rolled back and exactly those are received
        again (the provider redelivers in order) and committed; if anything else comes first,
        everything is rolled back (at least once)."""
        session, consumer = self.session, self.consumer
        if session is None or consumer is None:
            return
        prefix: list[str] = []
        for tag, message_id in self.outstanding.items():
            if tag not in self.acked:
                break
            prefix.append(message_id)
        if not prefix:
            return
        session.rollback()
        self._clear_window()
        wait = max(PREFIX_REDELIVERY_WAIT, self.connector.settings.receive_timeout)
        for expected in prefix:
            again = consumer.receive(wait)
            if again is None or str(again.getJMSMessageID()) != expected:
                session.rollback()
                self.log.warn("jms {name}: closing {destination}: the provider did not redeliver the acknowledged "
                              "messages first; they come again", name=self.connector.name,
                              destination=self.subscription.spec.destination)
                return
        session.commit()

    def _clear_window(self) -> None:
        self.outstanding.clear()
        self.received.clear()
        self.acked.clear()
        self.nacked.clear()
        self.batch = []
        self.batch_handed = False

    def _drop_session(self) -> None:
        session, self.session, self.consumer, self.producer = self.session, None, None, None
        self.outstanding.clear()
        self.received.clear()
        self.acked.clear()
        self.nacked.clear()
        self.batch = []
        self.batch_handed = False
        for waiter in self.waiting:  # those deliveries come again from the provider
            self._answer(waiter, None)
        self.waiting = []
        if session is not None:
            with contextlib.suppress(Exception):  # gone already
                session.close()  # rolls back what was not committed

    # -- receiving ---------------------------------------------------------------

    def _receive(self) -> None:
        timeout = self.connector.settings.receive_timeout
        if self.batch:
            timeout = max(1, min(timeout, int(self._batch_remaining() * 1000)))
        try:
            received = self.consumer.receive(timeout)
        except Exception as error:
            self._failed(error, None)
            return
        if received is None:
            if self.batch and not self.batch_handed and self._batch_remaining() <= 0:
                self._hand_batch()
            elif not self.outstanding and not self.batch:
                self.idle += 1
                if self.idle >= PARK_AFTER:
                    self._park()
            return
        self.idle = 0
        self._take(received)

    def _take(self, received: Any) -> None:
        """A message the session received (from ``receive`` or the doorbell): handed on, or batched."""
        subscription = self.subscription
        link = self.link
        tag = (self.epoch, next(self.sequence))
        message_id = str(received.getJMSMessageID())
        self.outstanding[tag] = message_id
        self.received[tag] = received
        if message_id in self.acked_before_rollback and bool(received.getJMSRedelivered()):
            self.acked_before_rollback.discard(message_id)
            self.acked.add(tag)  # its consumer acked it before the rollback another NACK caused
            self._maybe_end_transaction()
            return
        try:
            message = from_jms(received, link.api, subscription.spec.destination)
        except Exception as error:
            self.log.warn("jms {name}: cannot read message {id}: {error}", name=self.connector.name, id=message_id,
                          error=java_error(error))
            self.nacked.add(tag)
            self._maybe_end_transaction()
            return
        if subscription.batch_time is not None:
            if not self.batch:
                self.batch_started = time.monotonic()
            self.batch.append((message, tag))
            if len(self.batch) >= subscription.spec.prefetch:
                self._hand_batch()
            return
        self.call(subscription._received, self.epoch, [(message, tag)])

    def _hand_batch(self) -> None:
        self.batch_handed = True
        self.call(self.subscription._received, self.epoch, list(self.batch))
