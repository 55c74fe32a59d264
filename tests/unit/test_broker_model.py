"""Model-based test of the embedded broker through the STOMP session layer.

A hypothesis ``RuleBasedStateMachine`` drives up to three STOMP 1.2
connections (the real protocol and session over in-memory transports) to the
real embedded broker on a real SQLite store in a temporary directory: SEND
(persistent or not, priorities, expiry), SUBSCRIBE in each ack mode with
prefetch, selectors, durable names and exclusive consumers (messages to ``/queue/a`` in
two message groups), ACK, NACK, BEGIN / COMMIT / ABORT
(with a failing member), UNSUBSCRIBE, connection loss, a peer that stops
reading (its transport fills and pauses the session, as a socket does),
time passing and a restart from the store, and scheduled SENDs
(``AMQ_SCHEDULED_DELAY`` / ``_PERIOD`` / ``_REPEAT``, jobs in the schedule's SQLite file)
delivered as time passes.  After every step the frames the
broker wrote are checked against :class:`tests.support.jms_model.Model`, and
the RECEIPTs and ERRORs each connection got against the order it asked for
them in (issue 38).  Pipelined SENDs (persistence mixed, a receipt on the
last only) are followed now and then by a crash right after that RECEIPT: a
copy of what the store had committed at that moment is what the broker
restarts from.  The ``Limited*`` machines give ``/queue/b`` a ``max_size``
with room for three messages under FAIL, DROP and BLOCK.

``BrokerMachine`` is reused by ``python -m bench.bench_model`` for long runs;
``JMSGATEWAY_MODEL_EXAMPLES`` raises the number of examples here.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from typing import Any, Literal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.testing import StringTransport

from gateway.broker import queue as queue_module
from gateway.broker.broker import EmbeddedBroker
from gateway.broker.paging import page_file as paging_module
from gateway.broker.scheduler import DELAY, PERIOD, REPEAT, SCHEDULE_DATABASE, SqliteSchedule
from gateway.broker.settings import BrokerSettings, DestinationLimits
from gateway.broker.store.sqlite_store import SqliteStore
from gateway.errors import StompProtocolError
from gateway.routing.destination_map import DestinationMap
from gateway.stomp import protocol as stomp_protocol
from gateway.stomp.protocol import StompServerFactory, StompServerProtocol
from gateway.stomp.settings import StompSettings
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame
from tests.support.jms_model import Model, Sent, Subscription, Violation
from tests.unit.test_store_broker import PumpedClock

MAX_REDELIVERIES = 1
CONNECTIONS = 3
QUEUES = ("/queue/a", "/queue/b")
TOPIC = "/topic/t"
DLQS = ("/queue/DLQ.a", "/queue/DLQ.b", "/queue/DLQ.t")
DURABLES = {"all": None, "red": "red"}  # durable name -> selector color (fixed per name)
MESSAGES = st.tuples(
    st.sampled_from((*QUEUES, *QUEUES, TOPIC)),  # destination
    st.booleans(),  # persistent
    st.sampled_from((0, 4, 4, 9)),  # priority
    st.sampled_from((0, 0, 0, 1000)),  # time to live (ms)
    st.sampled_from(("red", "blue")),  # the property selectors look at
)
MESSAGES_IN_TRANSACTION = st.lists(MESSAGES, max_size=2)
PIPELINE = st.lists(MESSAGES, min_size=2, max_size=6)
GROUPED = "/queue/a"
"""Messages to it carry ``JMSXGroupID`` = their color (two groups; dead letters keep it)."""
LIMITED = "/queue/b"
"""The destination the ``Limited*`` machines give a ``max_size``."""
ROOM = 3
"""Messages of the model (about 630 counted bytes each) that fit in :data:`LIMITED_SIZE`."""
LIMITED_SIZE = 2200
TRANSPORT_BOUND = 700  # bytes a transport takes before it asks the session to pause
SCHEDULES = st.sampled_from(((500, 0, 0), (1000, 0, 0), (2500, 0, 0), (500, 1000, 2), (1000, 500, 1)))
"""(AMQ_SCHEDULED_DELAY, _PERIOD, _REPEAT) of a scheduled SEND (ms, ms, occurrences after the first)."""
MODEL_GRACE = 300
SETTLE_ROUNDS = 2000
"""Rounds of the reactor and the store a step may take to settle (a few, normally): past them the
broker is caught in a loop, reported as such rather than left to the test run's timeout."""
"""The protocol's WRITE_GRACE while the model runs (192 KB would never be reached by its small messages)."""


def inline(call: Callable[[], Any]) -> Deferred[Any]:
    """The schedule's executor here: its SQLite work done at once, not on a thread (deterministic)."""
    return maybeDeferred(call)


def known_body(headers: dict[str, str], body: str) -> str:
    """The model's name of a MESSAGE's body: the n-th repeat of a scheduled message (message id
    ``<id>:<n>``) is ``<body>#<n>``."""
    if "scheduledJobId" in headers:
        message_id = headers.get("message-id", "")
        head, _, n = message_id.rpartition(":")
        if n.isdigit() and ":" in head:
            return f"{body}#{n}"
    return body


class BoundedTransport(StringTransport):
    """A transport whose buffer is bounded as a socket's is: past ``bound`` bytes it
    pauses its producer (the session), and reading it empties it and resumes.  The protocol
    may write ``WRITE_GRACE`` bytes from the write that filled it on; a MESSAGE written after
    those is written to a full transport."""

    def __init__(self, bound: int) -> None:
        super().__init__()
        self.bound = bound
        self.paused = False
        self.over = 0  # bytes written since the write that filled it (that one included)
        self.written_while_paused: list[bytes] = []

    def write(self, data: bytes) -> None:
        if self.paused:
            if data.startswith(b"MESSAGE") and self.over >= stomp_protocol.WRITE_GRACE:
                self.written_while_paused.append(data)
            self.over += len(data)
        super().write(data)
        if not self.paused and len(self.value()) > self.bound and self.producer is not None:
            self.paused = True
            self.over = len(data)
            self.producer.pauseProducing()

    def read(self) -> bytes:
        data: bytes = self.value()
        self.clear()
        if self.paused:
            self.paused = False
            if self.producer is not None:
                self.producer.resumeProducing()
        return data


class Peer:
    """One client connection: its protocol, transport, and the frames not yet checked."""

    def __init__(self, factory: StompServerFactory, number: int) -> None:
        self.number = number
        self.transport = BoundedTransport(TRANSPORT_BOUND)
        self.protocol: StompServerProtocol = factory.buildProtocol(None)
        self.protocol.makeConnection(self.transport)
        self.decoder = FrameDecoder(version="1.2")
        self.seen = 0  # bytes of the transport's buffer already decoded
        self.reading = True
        self.receipts: set[str] = set()
        self.answers: list[str] = []
        """The receipt ids of the RECEIPTs and ERRORs got since the last check, in arrival order."""
        self.errors: list[Frame] = []
        self.subscriptions: dict[str, Subscription] = {}

    def send(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.protocol.dataReceived(encode_frame(Frame(command, headers, body), "1.2"))

    def new_frames(self) -> list[Frame]:
        """Frames written since the last call (a stalled peer's stay in its buffer)."""
        data = self.transport.value()[self.seen:]
        if self.reading:
            self.transport.read()
            self.seen = 0
        else:
            self.seen += len(data)
        frames = []
        for item in self.decoder.feed(data):
            assert not isinstance(item, StompProtocolError), item
            frames.append(item)
        return frames


class BrokerMachine(RuleBasedStateMachine):
    """Random client sessions against the broker, checked step by step against the model."""

    memory_limit: int | None = None
    """The broker's memory_limit (None: its default, nothing pages)."""
    full_policy: Literal["BLOCK", "FAIL", "DROP"] | None = None
    """The full_policy of :data:`LIMITED` (None: no max_size)."""
    group_window = False
    """Whether the page's search stops after one message (see ``Model.group_window``)."""

    def __init__(self) -> None:
        super().__init__()
        self._grace = stomp_protocol.WRITE_GRACE
        stomp_protocol.WRITE_GRACE = MODEL_GRACE
        self.directory = tempfile.mkdtemp(prefix="broker-model-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.clock = PumpedClock()
        limits = {LIMITED: DestinationLimits(max_size=LIMITED_SIZE, full_policy=self.full_policy)} \
            if self.full_policy else {}
        self.settings = BrokerSettings(persistence="sqlite", max_redeliveries=MAX_REDELIVERIES,
                                       expiry_check_interval_ms=500, memory_limit=self.memory_limit,
                                       destinations=limits)
        self.model = Model(MAX_REDELIVERIES, {LIMITED: self.full_policy} if self.full_policy else None, ROOM,
                           group_window=self.group_window)
        self.model.now_ms = self._now()
        self.peers: dict[int, Peer] = {}
        self.broker: EmbeddedBroker | None = None
        self.factory: StompServerFactory | None = None
        self.bodies = itertools.count()
        self.receipts = itertools.count()
        self.sub_ids = itertools.count()
        self.expected: list[tuple[Peer, str, bool]] = []  # (peer, receipt, must fail)
        self.failing: set[int] = set()
        """Connections the model expects an ERROR on in this step (a refused SEND without a receipt)."""
        self.steps = 0
        self.last: dict[str, int] = {}
        self._start()

    # -- plumbing --------------------------------------------------------------

    def _now(self) -> int:
        return int(self.clock.seconds() * 1000)

    def _start(self) -> None:
        store = SqliteStore(os.path.join(self.directory, "broker.sqlite"), self.clock, synchronous="NORMAL",
                            min_free=0, lazy_recovery=self.memory_limit is not None)
        schedule = SqliteSchedule(os.path.join(self.directory, SCHEDULE_DATABASE), self.clock, synchronous="NORMAL",
                                  executor=inline)
        self.broker = EmbeddedBroker(self.clock, self.settings, store, schedule=schedule,
                                     page_path=os.path.join(self.directory, "broker-pages.sqlite"))
        self.clock.wait(self.broker.start())
        self.factory = StompServerFactory(self.clock, DestinationMap({"embedded": self.broker}),
                                          settings=StompSettings(default_prefetch=3))

    def teardown(self) -> None:
        try:
            if self.broker is not None:
                self.clock.wait(self.broker.stop())
            for peer in list(self.peers.values()):
                peer.protocol.connectionLost()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
            stomp_protocol.WRITE_GRACE = self._grace

    def _receipt(self, peer: Peer, fails: bool = False) -> dict[str, str]:
        receipt = f"r{next(self.receipts)}"
        self.expected.append((peer, receipt, fails))
        return {"receipt": receipt}

    def _settle(self) -> list[tuple[Peer, list[Frame]]]:
        """Run the store and the reactor until nothing moves; the frames each peer got."""
        assert self.broker is not None
        got: dict[int, list[Frame]] = {number: [] for number in self.peers}
        store: Any = self.broker.store
        quiet = 0
        rounds = 0
        while quiet < 2:  # (two rounds in which only the barrier itself was written, and no frame)
            rounds += 1
            if rounds > SETTLE_ROUNDS:
                raise Violation(f"the broker did not settle within {SETTLE_ROUNDS} rounds (a timer or a write "
                                "that keeps coming back)")
            before = store.stats.operations + store.stats.failures
            self.clock.advance(0)
            self.clock.wait(store.add_batch([]))
            self.clock.run_thread_calls()
            moved = False
            for number, peer in list(self.peers.items()):
                frames = peer.new_frames()
                got[number] += frames
                moved = moved or bool(frames)
            busy = store.stats.operations + store.stats.failures - before > 1
            quiet = 0 if (moved or busy) else quiet + 1
        return [(self.peers[number], frames) for number, frames in got.items() if number in self.peers]

    def _step(self, check_order: bool = True) -> None:
        """Settle, check every frame against the model, check receipts and the settled state."""
        self.steps += 1
        self._observe()
        while any(peer.errors for peer in self.peers.values()):
            for number, peer in list(self.peers.items()):
                if peer.errors:
                    assert peer.transport.disconnecting, "an ERROR did not close the connection"
                    self._lose(number)
            self._observe()  # (what the closed connection held went to the others)
        reading = {number for number, peer in self.peers.items() if peer.reading}
        self.model.check_settled(reading, check_order)
        self.model.begin_step()

    def _observe(self) -> None:
        """Settle; check every frame written since the last time, and the receipts asked for."""
        for peer, frames in self._settle():
            for frame in frames:
                self._check_frame(peer, frame)
            assert not peer.transport.written_while_paused, "a MESSAGE was written to a full transport"
        for peer, receipt, fails in self.expected:
            if fails:
                assert any(e.headers.get("receipt-id") == receipt for e in peer.errors), \
                    f"no ERROR for {receipt}: {peer.errors}"
            else:
                assert receipt in peer.receipts, f"no RECEIPT {receipt} (errors: {peer.errors})"
        for number, peer in self.peers.items():
            # a connection's answers come in the order of its frames, and only those asked for
            asked = [receipt for owner, receipt, _ in self.expected if owner is peer]
            if peer.answers != asked:
                raise Violation(f"connection {number} got the answers {peer.answers}, asked for {asked} "
                                "(in this order)")
            peer.answers = []
            if peer.errors and number not in self.failing and not any(
                    owner is peer and fails for owner, _, fails in self.expected):
                raise Violation(f"connection {number} got an unexpected ERROR: {peer.errors}")
        self.expected = []
        self.failing = set()

    def _check_frame(self, peer: Peer, frame: Frame) -> None:
        if frame.command == "RECEIPT":
            peer.receipts.add(frame.headers["receipt-id"])
            peer.answers.append(frame.headers["receipt-id"])
        elif frame.command == "ERROR":
            peer.errors.append(frame)
            if "receipt-id" in frame.headers:
                peer.answers.append(frame.headers["receipt-id"])
        elif frame.command == "MESSAGE":
            sub = peer.subscriptions.get(frame.headers["subscription"])
            if sub is None:
                raise Violation(f"MESSAGE for unknown subscription: {frame.headers}")
            self.model.delivered(sub, frame.headers.get("ack"), frame.headers,
                                 known_body(frame.headers, frame.body.decode()))
        elif frame.command != "CONNECTED":
            raise Violation(f"unexpected {frame.command}")

    def _lose(self, number: int) -> None:
        """The connection ends (after the frames it got were checked)."""
        peer = self.peers.pop(number)
        peer.protocol.connectionLost()
        self.model.connection_lost(number)

    def _quiet(self, what: str, steps: int) -> bool:
        """Whether ``what`` (a rare event: restart, connection loss...) last happened ``steps`` steps ago."""
        return self.steps - self.last.get(what, 0) >= steps

    def _happened(self, what: str) -> None:
        self.last[what] = self.steps

    def _peer(self, data: st.DataObject) -> Peer:
        return self.peers[data.draw(st.sampled_from(sorted(self.peers)))]

    def _with_transaction(self) -> bool:
        return any(number in self.model.transactions for number in self.peers)

    def _inflight(self) -> bool:
        return any(sub.inflight for peer in self.peers.values() for sub in peer.subscriptions.values())

    # -- rules -------------------------------------------------------------------

    @initialize()
    def first_connection(self) -> None:
        self._connect(0)

    @precondition(lambda self: len(self.peers) < CONNECTIONS)
    @rule()
    def connect(self) -> None:
        self._connect(next(n for n in range(CONNECTIONS) if n not in self.peers))

    def _connect(self, number: int) -> None:
        assert self.factory is not None
        peer = self.peers[number] = Peer(self.factory, number)
        peer.send("CONNECT", {"accept-version": "1.2", "host": "model", "client-id": f"c{number}"})
        self._step()
        assert peer.protocol.session is not None and peer.protocol.session.state == "connected"

    @precondition(lambda self: bool(self.peers))
    @rule(data=st.data(), messages=st.lists(MESSAGES, min_size=1, max_size=4), transactional=st.booleans())
    def send(self, data: st.DataObject, messages: list[tuple[str, bool, int, int, str]], transactional: bool) -> None:
        """One to four SENDs in one write (one producer), each with a receipt."""
        peer = self._peer(data)
        transactional = transactional and peer.number in self.model.transactions
        self._pipeline(peer, [(*message, True) for message in messages], transactional)
        self._step()
        if not transactional:
            self._check_held(peer, messages)

    @precondition(lambda self: bool(self.peers))
    @rule(data=st.data(), messages=PIPELINE, last_persistent=st.booleans())
    def pipeline(self, data: st.DataObject, messages: list[tuple[str, bool, int, int, str]],
                 last_persistent: bool) -> None:
        """Two to six SENDs in one write, persistence mixed, a receipt on the last only (issue 38)."""
        peer = self._peer(data)
        self._pipeline(peer, self._receipted_last(messages, last_persistent), False)
        self._step()
        self._check_held(peer, messages)

    @staticmethod
    def _receipted_last(messages: list[tuple[str, bool, int, int, str]],
                        last_persistent: bool) -> list[tuple[str, bool, int, int, str, bool]]:
        destination, _, priority, ttl, color = messages[-1]
        return [(*message, False) for message in messages[:-1]] + \
            [(destination, last_persistent, priority, ttl, color, True)]

    def _pipeline(self, peer: Peer, messages: list[tuple[str, bool, int, int, str, bool]],
                  transactional: bool) -> str | None:
        """SENDs in one write (``True`` last: with a receipt); the receipt id of the last one
        the model expects a RECEIPT for.  A SEND the model says FAIL refuses expects the ERROR;
        the ones after it are written too, and must be neither answered nor stored."""
        data = b""
        refused = False
        receipt = None
        for destination, persistent, priority, ttl, color, receipted in messages:
            body = f"m{next(self.bodies):06}"  # (one length: a message's counted size hardly varies)
            if destination == LIMITED and self.full_policy:
                # (a non-persistent one may reach a consumer at once, before the model counts it gone)
                persistent, ttl = True, 0
            expiration = self._now() + ttl if ttl else 0
            group = color if destination == GROUPED else None
            sent = Sent(body, destination, persistent, priority, expiration, color, group)
            headers = {"destination": destination, "persistent": str(persistent).lower(),
                       "priority": str(priority), "color": color}
            if group is not None:
                headers["JMSXGroupID"] = group
            if expiration:
                headers["expires"] = str(expiration)
            if transactional:
                headers["transaction"] = "tx"
            if refused:
                if receipted:
                    headers["receipt"] = f"never-{next(self.receipts)}"
            elif self.model.send(peer.number, sent, transactional):
                if receipted:
                    headers.update(self._receipt(peer))
                    receipt = headers["receipt"]
            else:
                refused = True
                self.failing.add(peer.number)
                if receipted:
                    headers.update(self._receipt(peer, fails=True))
            data += encode_frame(Frame("SEND", headers, body.encode()), "1.2")
        peer.protocol.dataReceived(data)
        return None if refused else receipt

    def _check_held(self, peer: Peer, messages: list[tuple[str, bool, int, int, str]]) -> None:
        """BLOCK: a sender that left :data:`LIMITED` past its room is held (until consumers make room)."""
        if self.full_policy != "BLOCK" or peer.number not in self.peers:
            return
        if any(message[0] == LIMITED for message in messages) and len(self.model.backlogs[LIMITED].available) > ROOM:
            assert peer.transport.producerState == "paused", \
                f"{LIMITED} holds {len(self.model.backlogs[LIMITED].available)} messages: its sender is not held"

    @precondition(lambda self: bool(self.peers))
    @rule(data=st.data(), destination=st.sampled_from((GROUPED, GROUPED, TOPIC)), persistent=st.booleans(),
          priority=st.sampled_from((0, 4, 9)), color=st.sampled_from(("red", "blue")), schedule=SCHEDULES,
          transactional=st.booleans())
    def schedule(self, data: st.DataObject, destination: str, persistent: bool, priority: int, color: str,
                 schedule: tuple[int, int, int], transactional: bool) -> None:
        """A scheduled SEND (receipted): it reaches its destination only once due, as often as it repeats."""
        peer = self._peer(data)
        transactional = transactional and peer.number in self.model.transactions
        delay, period, repeat = schedule
        body = f"m{next(self.bodies):06}"
        group = color if destination == GROUPED else None
        headers = {"destination": destination, "persistent": str(persistent).lower(), "priority": str(priority),
                   "color": color, DELAY: str(delay)}
        if period:
            headers.update({PERIOD: str(period), REPEAT: str(repeat)})
        if group is not None:
            headers["JMSXGroupID"] = group
        if transactional:
            headers["transaction"] = "tx"
        self.model.send(peer.number, Sent(body, destination, persistent, priority, 0, color, group, delay, period,
                                          repeat), transactional)
        peer.send("SEND", {**headers, **self._receipt(peer)}, body.encode())
        self._step()

    @precondition(lambda self: bool(self.peers) and self._quiet("restart", 15))
    @rule(data=st.data(), messages=PIPELINE, last_persistent=st.booleans())
    def crash_after_a_receipt(self, data: st.DataObject, messages: list[tuple[str, bool, int, int, str]],
                              last_persistent: bool) -> None:
        """Pipelined SENDs with a receipt on the last; the broker crashes the moment that RECEIPT
        is written: it restarts from what the store had committed then (a copy taken at once).
        Only to destinations no one consumes now (a consumer's acknowledgements are written
        without being waited for, so a crash may or may not keep them: not this test's question)."""
        self._happened("restart")
        busy = {sub.destination for sub in self.model.subscriptions.values()
                if sub.destination != TOPIC or sub.durable is not None}
        idle = [message for message in messages if message[0] not in busy]
        if not idle:
            return
        peer = self._peer(data)
        receipt = self._pipeline(peer, self._receipted_last(idle, last_persistent), False)
        if receipt is None:  # (FAIL refused one: nothing covers the ones before it)
            self._step()
            return
        assert self.broker is not None
        deadline = 2000
        while f"receipt-id:{receipt}\n".encode() not in peer.transport.value():
            deadline -= 1
            assert deadline, f"no RECEIPT {receipt}"
            self.clock.advance(0)
            self.clock.run_thread_calls(timeout=0.005)
        crashed = tempfile.mkdtemp(prefix="broker-model-crash-", dir=os.path.dirname(self.directory))
        for name in ("broker.sqlite", SCHEDULE_DATABASE):
            source = sqlite3.connect(os.path.join(self.directory, name))
            target = sqlite3.connect(os.path.join(crashed, name))
            try:
                source.backup(target)  # (what is committed now: what SIGKILL leaves)
            finally:
                source.close()
                target.close()
        self.expected = []  # (the RECEIPT is checked above; the connection goes now)
        self.failing = set()
        self.clock.wait(self.broker.stop())
        for peer in self.peers.values():
            peer.protocol.connectionLost()
        self.model.restart(list(self.peers))
        self.peers.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = crashed
        self._start()
        self._step(check_order=False)

    @precondition(lambda self: self._with_transaction() and self._quiet("gone", 8))
    @rule(data=st.data())
    def send_to_a_destination_that_is_gone(self, data: st.DataObject) -> None:
        self._happened("gone")
        peer = self.peers[data.draw(st.sampled_from(sorted(n for n in self.peers if n in self.model.transactions)))]
        self.model.send_failing(peer.number)
        peer.send("SEND", {"destination": "/remote-temp-queue/gone", "transaction": "tx", **self._receipt(peer)},
                  b"lost")
        self._step()

    @precondition(lambda self: bool(self.peers))
    @rule(data=st.data(), destination=st.sampled_from((*QUEUES, *QUEUES, *QUEUES, TOPIC, TOPIC, TOPIC, *DLQS)),
          ack=st.sampled_from(("auto", "client", "client-individual")), prefetch=st.sampled_from((1, 2, 5)),
          color=st.sampled_from((None, None, "red")), durable=st.sampled_from((None, None, "all", "red")),
          exclusive=st.sampled_from((False, False, False, True)))
    def subscribe(self, data: st.DataObject, destination: str, ack: str, prefetch: int, color: str | None,
                  durable: str | None, exclusive: bool) -> None:
        peer = self._peer(data)
        sub_id = f"s{next(self.sub_ids)}"
        headers = {"destination": destination, "id": sub_id, "ack": ack, "activemq.prefetchSize": str(prefetch)}
        exclusive = exclusive and destination.startswith("/queue/")
        if exclusive:
            headers["activemq.exclusive"] = "true"
        if destination != TOPIC:
            durable = None
        if durable is not None:
            color = DURABLES[durable]
            key = f"durable:c{peer.number}:{durable}"
            if any(sub.backlog == key for sub in self.model.subscriptions.values()):
                return  # (one active subscriber per durable subscription: tested elsewhere)
            headers["activemq.subscriptionName"] = durable
            backlog = key
        elif destination == TOPIC:
            backlog = f"sub:c{peer.number}:{sub_id}"
        else:
            backlog = destination
        if color is not None:
            headers["selector"] = f"color = '{color}'"
        headers.update(self._receipt(peer))
        sub = Subscription(peer.number, sub_id, destination, backlog, ack, prefetch, color, durable,
                           exclusive=exclusive)
        peer.subscriptions[sub_id] = sub
        self.model.subscribe(sub)
        peer.send("SUBSCRIBE", headers)
        self._step()

    @precondition(lambda self: len(self.peers) < CONNECTIONS and self._quiet("audit", 20))
    @rule()
    def consume_everything(self) -> None:
        """A new connection takes every queue and dead-letter queue (ack:auto): every
        message the model says waits there must arrive, and nothing else."""
        self._happened("audit")
        number = next(n for n in range(CONNECTIONS) if n not in self.peers)
        self._connect(number)
        peer = self.peers[number]
        for destination in (*QUEUES, *DLQS):
            sub = Subscription(peer.number, f"s{next(self.sub_ids)}", destination, destination, "auto", 1, None)
            peer.subscriptions[sub.id] = sub
            self.model.subscribe(sub)
            peer.send("SUBSCRIBE", {"destination": destination, "id": sub.id, "ack": "auto", **self._receipt(peer)})
            self._observe()
        self._step()
        for sub in peer.subscriptions.values():
            left = [copy.sent.body for copy in self.model.backlogs[sub.backlog].available.values()
                    if not self.model.held_back(sub, copy) and not self.model.behind_a_held_group(sub, copy)]
            assert not left, f"{sub.backlog} was not emptied: {left} (not for an exclusive consumer or a group owner)"

    def _pick_delivery(self, data: st.DataObject) -> tuple[Peer, Subscription, str]:
        choices = [(peer, sub, ack_id) for peer in self.peers.values() for sub in peer.subscriptions.values()
                   for ack_id in sub.inflight]
        return choices[data.draw(st.integers(0, len(choices) - 1))]

    @precondition(lambda self: self._inflight())
    @rule(data=st.data(), transactional=st.booleans(), receipted=st.booleans())
    def ack(self, data: st.DataObject, transactional: bool, receipted: bool) -> None:
        self._settle_delivery(data, False, transactional, receipted)

    @precondition(lambda self: self._inflight())
    @rule(data=st.data(), transactional=st.booleans(), receipted=st.booleans())
    def nack(self, data: st.DataObject, transactional: bool, receipted: bool) -> None:
        self._settle_delivery(data, True, transactional, receipted)

    def _settle_delivery(self, data: st.DataObject, nack: bool, transactional: bool, receipted: bool) -> None:
        """(An ACK with its id alone - no receipt, no transaction - takes the session's fast path.)"""
        peer, sub, ack_id = self._pick_delivery(data)
        transactional = transactional and peer.number in self.model.transactions
        headers = {"id": ack_id, **(self._receipt(peer) if receipted else {})}
        if transactional:
            headers["transaction"] = "tx"
        self.model.ack(sub, ack_id, transactional, nack)
        peer.send("NACK" if nack else "ACK", headers)
        self._step(check_order=not nack or transactional)

    @precondition(lambda self: any(n not in self.model.transactions for n in self.peers))
    @rule(data=st.data())
    def begin(self, data: st.DataObject) -> None:
        peer = self.peers[data.draw(st.sampled_from(sorted(n for n in self.peers if n not in self.model.transactions)))]
        self.model.begin(peer.number)
        peer.send("BEGIN", {"transaction": "tx", **self._receipt(peer)})
        self._step()

    @precondition(lambda self: self._with_transaction())
    @rule(data=st.data(), commit=st.booleans())
    def end_transaction(self, data: st.DataObject, commit: bool) -> None:
        peer = self.peers[data.draw(st.sampled_from(sorted(n for n in self.peers if n in self.model.transactions)))]
        if commit:
            ok = self.model.commit(peer.number)
            peer.send("COMMIT", {"transaction": "tx", **self._receipt(peer, fails=not ok)})
            self._step(check_order=ok)
        else:
            self.model.abort(peer.number)
            peer.send("ABORT", {"transaction": "tx", **self._receipt(peer)})
            self._step(check_order=False)

    @precondition(lambda self: self._inflight())
    @rule(data=st.data(), acks=st.lists(st.booleans(), min_size=1, max_size=4), sends=MESSAGES_IN_TRANSACTION,
          failing=st.booleans(), unsubscribe=st.booleans(), end=st.sampled_from(("COMMIT", "ABORT", "lost")))
    def whole_transaction(self, data: st.DataObject, acks: list[bool], sends: list[tuple[str, bool, int, int, str]],
                          failing: bool, unsubscribe: bool, end: str) -> None:
        """BEGIN, ACK/NACK (True: ACK) deliveries, SENDs, maybe one that fails, maybe UNSUBSCRIBE
        a subscription whose delivery it acknowledged, then COMMIT, ABORT or the connection lost:
        as one write, checked once."""
        peer, sub, _ = self._pick_delivery(data)
        if peer.number in self.model.transactions:
            return
        self.model.begin(peer.number)
        peer.send("BEGIN", {"transaction": "tx"})
        self._observe()
        for ack in acks:
            if not sub.inflight:
                break
            ack_id = data.draw(st.sampled_from(sorted(sub.inflight)))
            self.model.ack(sub, ack_id, True, not ack)
            peer.send("ACK" if ack else "NACK", {"id": ack_id, "transaction": "tx"})
            self._observe()  # (an ACK in a transaction frees credit: deliveries may follow)
        for destination, persistent, priority, _, color in sends:
            body = f"m{next(self.bodies)}"
            self.model.send(peer.number, Sent(body, destination, persistent, priority, 0, color), True)
            peer.send("SEND", {"destination": destination, "persistent": str(persistent).lower(),
                               "priority": str(priority), "color": color, "transaction": "tx"}, body.encode())
        if failing:
            self.model.send_failing(peer.number)
            peer.send("SEND", {"destination": "/remote-temp-queue/gone", "transaction": "tx"}, b"lost")
        if unsubscribe:
            del peer.subscriptions[sub.id]
            self.model.unsubscribe(sub, False)
            peer.send("UNSUBSCRIBE", {"id": sub.id})
        self._observe()
        if end == "lost":
            self._lose(peer.number)
        elif end == "ABORT":
            self.model.abort(peer.number)
            peer.send("ABORT", {"transaction": "tx", **self._receipt(peer)})
        else:
            ok = self.model.commit(peer.number)
            peer.send("COMMIT", {"transaction": "tx", **self._receipt(peer, fails=not ok)})
        self._step(check_order=False)

    @precondition(lambda self: any(p.subscriptions for p in self.peers.values()))
    @rule(data=st.data(), delete=st.booleans())
    def unsubscribe(self, data: st.DataObject, delete: bool) -> None:
        peer = self.peers[data.draw(st.sampled_from(sorted(n for n, p in self.peers.items() if p.subscriptions)))]
        sub = peer.subscriptions.pop(data.draw(st.sampled_from(sorted(peer.subscriptions))))
        headers = {"id": sub.id, **self._receipt(peer)}
        if delete and sub.durable is not None:
            headers["activemq.subscriptionName"] = sub.durable
        self.model.unsubscribe(sub, delete and sub.durable is not None)
        peer.send("UNSUBSCRIBE", headers)
        self._step(check_order=False)

    @precondition(lambda self: bool(self.peers) and self._quiet("loss", 6))
    @rule(data=st.data())
    def lose_connection(self, data: st.DataObject) -> None:
        self._happened("loss")
        self._lose(self._peer(data).number)
        self._step(check_order=False)

    @precondition(lambda self: any(p.reading for p in self.peers.values()) and self._quiet("stall", 4))
    @rule(data=st.data())
    def stop_reading(self, data: st.DataObject) -> None:
        self._happened("stall")
        peer = self.peers[data.draw(st.sampled_from(sorted(n for n, p in self.peers.items() if p.reading)))]
        peer.reading = False
        self._step()

    @precondition(lambda self: any(not p.reading for p in self.peers.values()))
    @rule(data=st.data())
    def read_again(self, data: st.DataObject) -> None:
        peer = self.peers[data.draw(st.sampled_from(sorted(n for n, p in self.peers.items() if not p.reading)))]
        peer.reading = True
        self._step()

    @precondition(lambda self: self._quiet("time", 5))
    @rule(seconds=st.sampled_from((0.5, 2.0)))
    def time_passes(self, seconds: float) -> None:
        self._happened("time")
        self.clock.advance(seconds)
        self.model.advance(self._now())
        self._step()

    @precondition(lambda self: self._quiet("restart", 15))
    @rule()
    def restart(self) -> None:
        self._happened("restart")
        assert self.broker is not None
        self._settle()  # (nothing is pending: every step settled)
        self.clock.wait(self.broker.stop())
        for peer in self.peers.values():
            peer.protocol.connectionLost()
        self.model.restart(list(self.peers))
        self.peers.clear()
        self._start()
        self._step(check_order=False)

    @invariant()
    def nothing_left_unchecked(self) -> None:
        assert not self.expected


def machine_settings(examples: int, steps: int = 50) -> settings:
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                    print_blob=True)


TestBrokerModel = BrokerMachine.TestCase
TestBrokerModel.settings = machine_settings(int(os.environ.get("JMSGATEWAY_MODEL_EXAMPLES", "300")))


class PagingBrokerMachine(BrokerMachine):
    """The same, with a memory limit of about two messages: nearly every queue pages."""

    memory_limit = 1500


TestPagingBrokerModel = PagingBrokerMachine.TestCase
TestPagingBrokerModel.settings = machine_settings(int(os.environ.get("JMSGATEWAY_MODEL_EXAMPLES", "300")))


class SlicedSearchBrokerMachine(PagingBrokerMachine):
    """Paging, with every search of a page stopping after one message and going on in the
    next reactor turn (docs/paging.md: a search takes at most 20 ms per turn).  The search for a
    message another consumer may take while what memory holds waits for its groups' owners is one
    slice, not resumed (docs/stomp.md, message groups): the model lets a message wait behind one of
    a group another subscription owns."""

    group_window = True

    def __init__(self) -> None:
        self._slices = (paging_module.SEARCH_CLOCK_EVERY, queue_module.SEARCH_SLICE)  # type: ignore[attr-defined]
        paging_module.SEARCH_CLOCK_EVERY, queue_module.SEARCH_SLICE = 1, 0.0  # type: ignore[attr-defined]
        super().__init__()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            paging_module.SEARCH_CLOCK_EVERY, queue_module.SEARCH_SLICE = self._slices  # type: ignore[attr-defined]


class LimitedFailBrokerMachine(BrokerMachine):
    """:data:`LIMITED` has room for :data:`ROOM` messages; past it a SEND is refused (ERROR)."""

    full_policy = "FAIL"


class LimitedDropBrokerMachine(BrokerMachine):
    """:data:`LIMITED` keeps at most :data:`ROOM` messages; the rest are dropped (and receipted)."""

    full_policy = "DROP"


class LimitedBlockBrokerMachine(BrokerMachine):
    """Past :data:`LIMITED`'s room its senders are held until consumers make room."""

    full_policy = "BLOCK"


TestLimitedFailBrokerModel = LimitedFailBrokerMachine.TestCase
TestLimitedFailBrokerModel.settings = machine_settings(int(os.environ.get("JMSGATEWAY_MODEL_EXAMPLES", "300")) // 3)
TestLimitedDropBrokerModel = LimitedDropBrokerMachine.TestCase
TestLimitedDropBrokerModel.settings = machine_settings(int(os.environ.get("JMSGATEWAY_MODEL_EXAMPLES", "300")) // 3)
TestLimitedBlockBrokerModel = LimitedBlockBrokerMachine.TestCase
TestLimitedBlockBrokerModel.settings = machine_settings(int(os.environ.get("JMSGATEWAY_MODEL_EXAMPLES", "300")) // 3)

TestSlicedSearchBrokerModel = SlicedSearchBrokerMachine.TestCase
TestSlicedSearchBrokerModel.settings = machine_settings(int(os.environ.get("JMSGATEWAY_MODEL_EXAMPLES", "300")) // 3)


def run(examples: int, steps: int = 50, *, paging: bool = False, **kwargs: Any) -> None:
    """Run the machine ``examples`` times (bench.bench_model); ``paging``: the one with a tiny memory limit."""
    from hypothesis.stateful import run_state_machine_as_test

    machine = PagingBrokerMachine if paging else BrokerMachine
    run_state_machine_as_test(machine, settings=machine_settings(examples, steps), **kwargs)


def test_resuming_stops_when_the_transport_fills_again(monkeypatch: Any) -> None:
    """Found by the model: resuming the subscriptions one after the other went on after the
    first ones had filled the transport again, so the rest wrote into a full transport."""
    from twisted.internet.task import Clock

    monkeypatch.setattr(stomp_protocol, "WRITE_GRACE", MODEL_GRACE)

    clock = Clock()
    broker = EmbeddedBroker(clock)
    broker.start()
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}))
    peer = Peer(factory, 0)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "model"})
    for n in range(4):
        for i in range(5):
            peer.send("SEND", {"destination": f"/queue/r{n}"}, f"m{n}.{i}".encode())
    peer.reading = False
    for n in range(4):
        peer.send("SUBSCRIBE", {"destination": f"/queue/r{n}", "id": f"s{n}", "ack": "auto"})
    assert peer.transport.paused
    for _ in range(10):
        peer.transport.read()  # the client reads, the transport resumes the session, which fills it again
        assert not peer.transport.written_while_paused, "a MESSAGE was written to a full transport"
    broker.stop()


# -- the randomized run's failures, kept as plain step sequences ---------------------------------


class Draws:
    """A ``st.DataObject`` stand-in for replaying a printed failing case: each ``draw`` returns the
    next of the values hypothesis printed (``Draw n: ...``), whatever the strategy."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: Any, label: Any = None) -> Any:
        return self.values.pop(0)


RED_A = ("/queue/a", False, 0, 0, "red")


def _replay(machine: BrokerMachine, steps: Callable[[Any], None]) -> None:
    """Run ``steps`` (the machine's rules in order, each checked as the state machine checks it)."""
    try:
        machine.first_connection()
        steps(machine)
        machine.consume_everything()
    finally:
        machine.teardown()


def test_a_refused_first_message_of_a_group_leaves_the_group_free() -> None:
    """Randomized run of 2026-11-29, TestBrokerModel: "m000007 waits in /queue/a while subscription
    s4 of connection 1 has room for it".  The first message of group blue was picked for s3, whose
    connection had stopped reading; its transport refused it, yet the group stayed s3's, so the
    auditor's subscription never got it."""

    def steps(s: Any) -> None:
        for _ in range(3):
            s.send(data=Draws(0), messages=[RED_A], transactional=False)
        s.stop_reading(data=Draws(0))
        for destination, ack in (("/queue/b", "auto"), ("/queue/b", "auto"), ("/queue/a", "client")):
            s.subscribe(ack=ack, color=None, data=Draws(0), destination=destination, durable=None, exclusive=False,
                        prefetch=1)
        for _ in range(4):
            s.nack(data=Draws(0), receipted=False, transactional=False)
        s.send(data=Draws(0), messages=[RED_A], transactional=False)
        s.send(data=Draws(0), messages=[RED_A], transactional=False)
        s.send(data=Draws(0), messages=[RED_A, RED_A, ("/queue/a", False, 0, 0, "blue")], transactional=False)
        s.crash_after_a_receipt(data=Draws(), last_persistent=False, messages=[RED_A, RED_A])
        s.subscribe(ack="auto", color=None, data=Draws(0), destination="/queue/a", durable=None, exclusive=False,
                    prefetch=1)
        for _ in range(4):
            s.send(data=Draws(0), messages=[RED_A], transactional=False)

    _replay(BrokerMachine(), steps)


def test_a_refused_first_message_keeps_priority_order_when_paged() -> None:
    """Randomized run of 2026-11-29, TestSlicedSearchBrokerModel: "m000016 delivered to s2 of
    connection 1 before m000014, which waited with a better place" (group red stayed with a
    subscription of a connection that stopped reading, which had refused its first message)."""

    def steps(s: Any) -> None:
        s.schedule(color="red", data=Draws(0), destination="/queue/a", persistent=False, priority=0,
                   schedule=(500, 0, 0), transactional=False)
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A] * 4)
        s.begin(data=Draws(0))
        s.stop_reading(data=Draws(0))
        s.end_transaction(commit=False, data=Draws(0))
        s.subscribe(ack="auto", color=None, data=Draws(0), destination="/queue/a", durable=None, exclusive=False,
                    prefetch=1)
        s.begin(data=Draws(0))
        s.time_passes(seconds=0.5)
        s.unsubscribe(data=Draws(0, "s0"), delete=False)
        s.schedule(color="red", data=Draws(0), destination="/queue/a", persistent=False, priority=0,
                   schedule=(500, 0, 0), transactional=False)
        s.subscribe(ack="auto", color=None, data=Draws(0), destination="/queue/a", durable=None, exclusive=False,
                    prefetch=1)
        s.send(data=Draws(0), messages=[RED_A], transactional=False)
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A] * 2)
        s.time_passes(seconds=0.5)
        s.connect()
        s.lose_connection(data=Draws(1))
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A] * 5 + [("/queue/a", False, 4, 0, "red")])
        s.schedule(color="red", data=Draws(0), destination="/queue/a", persistent=False, priority=0,
                   schedule=(500, 0, 0), transactional=False)
        s.send(data=Draws(0), messages=[("/queue/a", False, 4, 0, "blue")], transactional=False)

    _replay(SlicedSearchBrokerMachine(), steps)


def test_a_refused_first_message_does_not_strand_a_paged_group() -> None:
    """Randomized run of 2026-11-29, TestSlicedSearchBrokerModel: "m000000 waits in /queue/a while
    subscription s3 of connection 1 has room for it" (the same cause, with paging)."""

    def steps(s: Any) -> None:
        s.schedule(color="red", data=Draws(0), destination="/queue/a", persistent=False, priority=0,
                   schedule=(500, 0, 0), transactional=False)
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A] * 2)
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A] * 4)
        s.begin(data=Draws(0))
        s.stop_reading(data=Draws(0))
        s.end_transaction(commit=False, data=Draws(0))
        s.subscribe(ack="auto", color=None, data=Draws(0), destination="/queue/a", durable=None, exclusive=False,
                    prefetch=1)
        s.begin(data=Draws(0))
        s.time_passes(seconds=0.5)
        s.end_transaction(commit=False, data=Draws(0))
        s.unsubscribe(data=Draws(0, "s0"), delete=False)
        s.schedule(color="red", data=Draws(0), destination="/queue/a", persistent=False, priority=0,
                   schedule=(500, 0, 0), transactional=False)
        s.subscribe(ack="auto", color=None, data=Draws(0), destination="/queue/a", durable=None, exclusive=False,
                    prefetch=1)
        s.send(data=Draws(0), messages=[RED_A], transactional=False)
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A] * 2)
        s.unsubscribe(data=Draws(0, "s1"), delete=False)
        s.subscribe(ack="auto", color=None, data=Draws(0), destination="/queue/a", durable=None, exclusive=False,
                    prefetch=1)
        s.connect()
        s.lose_connection(data=Draws(1))

    _replay(SlicedSearchBrokerMachine(), steps)


def test_a_paged_message_behind_another_owners_group_may_be_passed() -> None:
    """Randomized run of 2026-11-29 afternoon (3,000 examples), TestSlicedSearchBrokerModel: "m000001 delivered to
    s1 of connection 0 before m000015, which waited with a better place".  s0 owns group red (its prefetch of 1
    full); m000015 (blue, priority 4) is paged out behind red messages, deeper than the sliced search reaches, while
    m000001 (blue, priority 0) is in memory: s1 gets m000001 first.  The page's message may wait for an ACK there
    (docs/stomp.md, message groups), so it may be passed too, as behind ActiveMQ's page-in window; the model said
    only the first."""
    blue = ("/queue/a", False, 0, 0, "blue")
    red4 = ("/queue/a", False, 4, 0, "red")

    def steps(s: Any) -> None:
        s.begin(data=Draws(0))
        s.send(data=Draws(0), messages=[RED_A, blue], transactional=False)
        s.schedule(color="red", data=Draws(0), destination="/queue/a", persistent=False, priority=0,
                   schedule=(500, 0, 0), transactional=False)
        s.pipeline(data=Draws(0), last_persistent=True, messages=[RED_A, RED_A])
        s.connect()
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A, RED_A, RED_A, red4])
        s.send(data=Draws(0), messages=[RED_A], transactional=False)
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A, red4])
        s.send(data=Draws(0), messages=[RED_A], transactional=False)
        s.send(data=Draws(0), messages=[red4, RED_A, ("/queue/a", False, 4, 0, "blue")], transactional=False)
        s.time_passes(seconds=0.5)
        s.subscribe(ack="client", color=None, data=Draws(0), destination="/queue/a", durable=None, exclusive=False,
                    prefetch=1)
        s.connect()
        s.begin(data=Draws(1))
        s.subscribe(ack="auto", color=None, data=Draws(0), destination="/queue/a", durable=None, exclusive=False,
                    prefetch=1)
        s.lose_connection(data=Draws(2))  # (room for the replay's auditing connection)

    _replay(SlicedSearchBrokerMachine(), steps)


def test_a_paged_message_a_ready_consumer_may_take_is_not_passed_by_a_worse_one_in_memory() -> None:
    """Randomized run of 2026-11-29 evening (3,000 examples), TestPagingBrokerModel: "m000001 delivered to s9 of
    connection 0 before m000016, which waited with a better place".  Memory held blue messages (priority 9)
    that wait for their group's owner (a client-individual subscription, its prefetch of 1 full) and m000001
    (red, priority 0); m000016 (red, priority 4) was paged out.  With a message skipped for its owner, the page
    was searched before the next one in memory only for selectors: s9 got m000001 first.  Now the page is
    searched (one slice) for what a ready consumer may take, before the worse message in memory goes."""
    topic = ("/topic/t", False, 0, 0, "red")

    def schedule(s: Any, transactional: bool = False) -> None:
        s.schedule(color="red", data=Draws(0), destination="/queue/a", persistent=False, priority=0,
                   schedule=(500, 0, 0), transactional=transactional)

    def subscribe(s: Any, destination: str, ack: str = "auto", durable: str | None = None) -> None:
        s.subscribe(ack=ack, color=None, data=Draws(0), destination=destination, durable=durable, exclusive=False,
                    prefetch=1)

    def steps(s: Any) -> None:
        s.pipeline(data=Draws(0), last_persistent=True, messages=[
            topic, RED_A, RED_A, RED_A, ("/queue/a", True, 0, 0, "red"), ("/queue/a", False, 9, 0, "blue")])
        subscribe(s, "/topic/t", durable="all")
        subscribe(s, "/topic/t", durable="all")
        schedule(s, transactional=True)
        subscribe(s, "/queue/DLQ.b")
        subscribe(s, "/topic/t")
        schedule(s)
        subscribe(s, "/topic/t", ack="client")
        s.pipeline(data=Draws(0), last_persistent=False, messages=[topic, ("/queue/a", False, 9, 0, "blue")])
        schedule(s)
        s.pipeline(data=Draws(0), last_persistent=False, messages=[RED_A] * 5 + [("/queue/a", False, 4, 0, "red")])
        subscribe(s, "/queue/a", ack="client-individual")
        s.nack(data=Draws(0), receipted=False, transactional=False)
        subscribe(s, "/queue/DLQ.t")
        schedule(s)
        subscribe(s, "/queue/DLQ.t")
        subscribe(s, "/queue/DLQ.b")
        schedule(s)
        subscribe(s, "/queue/a", ack="client-individual")

    _replay(PagingBrokerMachine(), steps)


def test_two_dead_letters_of_one_topic_message_both_come_back_to_the_dlq() -> None:
    """Randomized run of 2026-11-29 evening (3,000 examples), TestPagingBrokerModel: "acknowledged message came
    back: m000025 to subscription s13 of connection 0 (/queue/DLQ.t)".  A model defect, not the broker's: two
    subscribers' copies of one topic message are dead-lettered (two copies in /queue/DLQ.t), a DLQ consumer takes
    both and its connection is lost; the model put both back under one key, so it knew of one copy while the
    broker rightly redelivered two."""
    blue = ("/topic/t", True, 0, 0, "blue")

    def steps(s: Any) -> None:
        s.connect()
        for peer in (0, 1):
            s.subscribe(ack="client", color=None, data=Draws(peer), destination="/topic/t", durable=None,
                        exclusive=False, prefetch=1)
        s.send(data=Draws(0), messages=[blue], transactional=False)
        for _ in range(2 * (MAX_REDELIVERIES + 1)):
            s.nack(data=Draws(0), receipted=False, transactional=False)
        s.subscribe(ack="client-individual", color=None, data=Draws(0), destination="/queue/DLQ.t", durable=None,
                    exclusive=False, prefetch=2)
        s.lose_connection(data=Draws(0))

    _replay(BrokerMachine(), steps)
