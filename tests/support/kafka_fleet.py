"""A fleet of real gateway processes in front of one Kafka, and STOMP clients that move between them.

What tests/integration/test_kafka_fleet_attacks*.py need to attack the promise of docs/kafka.md, "A fleet
of gateways in front of Kafka": nothing receipted is lost, what a dead gateway held comes again flagged
``redelivered``, a resend with the same ``x-dedup-id`` is stored once per gateway.

* :class:`Fleet`: several ``twistd jmsgateway`` processes (each its own data directory) with one
  ``[connectors.kafka]``; SIGKILL, SIGSTOP / SIGCONT of a gateway *and its consumer processes* (a
  stalled host), restart on the same port and data.
* :class:`Producer`: a stomp.py client with the fleet's host list that SENDs numbered messages
  (``persistent``, ``x-dedup-id``, a receipt each) with a window of SENDs in flight; when its
  connection goes, it connects to the next gateway that answers and resends every SEND not receipted.
* :class:`Consumer`: a stomp.py client with the host list, subscribed to the queue (``auto``,
  ``client`` or ``client-individual``, a prefetch); it can hold its deliveries (stop acknowledging),
  reconnect every few seconds, and moves to another gateway when its own dies.
* :func:`verdict`: counted by id, what is receipted and never acknowledged; on a loss it says where
  each missing record is in the topic (partition, offset, headers), the group's committed offsets, what
  each consumer saw of it and the gateways' Kafka group log (a record never stored, or one skipped).

Plain threads, no reactor: stomp.py runs its own receiver threads.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import stomp

from tests.support.gateway import GatewayProcess
from tests.support.kafka import committed_offsets, group_settings, read_records

Host = tuple[str, int]


def fleet_config(bootstrap: str, extra: str = "") -> str:
    """The ``[connectors.kafka]`` of every gateway of the fleet (quick group joins on Tansu)."""
    consumer = ", ".join(f'"{name}" = {value}' for name, value in group_settings().items())
    return f"""
[connectors.kafka]
uri = "kafka://{bootstrap}"
consumer = {{ {consumer} }}
{extra}

[[destinations]]
pattern = "/queue/kafka.*"
connector = "kafka"
"""


def descendants(pid: int) -> list[int]:
    """``pid``'s child processes, grandchildren and so on (from /proc)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children[int(fields[1])].append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Fleet:
    """``size`` gateway processes with one Kafka connector (``extra`` TOML in it), in ``workdir``."""

    def __init__(self, workdir: Path, bootstrap: str, size: int, *, extra: str = "", debug: bool = True) -> None:
        args = ["--log-level", "debug"] if debug else []
        self.gateways = [GatewayProcess(workdir / f"gw{n}", fleet_config(bootstrap, extra), args=args)
                         for n in range(size)]
        self.stopped: dict[int, list[int]] = {}

    @property
    def hosts(self) -> list[Host]:
        return [gateway.address for gateway in self.gateways]

    def start(self) -> Fleet:
        for gateway in self.gateways:
            gateway.start()
        return self

    def kill(self, n: int) -> None:
        """SIGKILL gateway ``n`` (its consumer processes exit when they see it gone)."""
        self.gateways[n].kill()

    def restart(self, n: int) -> None:
        """Start gateway ``n`` again on its port and data directory."""
        self.gateways[n].start()

    def freeze(self, n: int) -> None:
        """SIGSTOP gateway ``n`` and its consumer processes: a host that stalls (no heartbeats, no
        answers), its group sessions expire."""
        process = self.gateways[n].process
        assert process is not None
        pids = [process.pid, *descendants(process.pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        self.stopped[n] = pids

    def thaw(self, n: int) -> None:
        """SIGCONT what :meth:`freeze` stopped: the zombie members wake up."""
        for pid in self.stopped.pop(n, []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def logs(self) -> str:
        """The Kafka group lines of every gateway's log (assignments, partitions given up), and warnings."""
        lines = []
        for n, gateway in enumerate(self.gateways):
            for line in gateway.log().splitlines():
                if any(mark in line for mark in ("kafka group", "Traceback", "#warn", "#error", "#critical")):
                    lines.append(f"gw{n}: {line}")
        return "\n".join(lines[-300:])

    def close(self) -> None:
        for n in list(self.stopped):
            self.thaw(n)
        for gateway in self.gateways:
            gateway.kill()


class _Link(stomp.ConnectionListener):
    """One connection's events, forwarded to its client with the connection's number."""

    def __init__(self, owner: _Client, number: int) -> None:
        self.owner, self.number = owner, number
        self.connected = threading.Event()
        self.lost = threading.Event()

    def on_connected(self, frame: Any) -> None:
        self.connected.set()

    def on_disconnected(self) -> None:
        self.lost.set()
        self.connected.set()

    def on_heartbeat_timeout(self) -> None:
        self.lost.set()

    def on_error(self, frame: Any) -> None:
        self.owner.errors.append(f"{frame.headers.get('message')}: {frame.body}")

    def on_receipt(self, frame: Any) -> None:
        self.owner.receipt(self.number, frame.headers["receipt-id"])

    def on_message(self, frame: Any) -> None:
        self.owner.message(self.number, frame)


class _Client(threading.Thread):
    """A stomp.py client with the fleet's host list (starting at ``prefer``) that reconnects."""

    def __init__(self, name: str, hosts: list[Host], prefer: int) -> None:
        super().__init__(name=name, daemon=True)
        self.hosts, self.prefer = hosts, prefer
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.connection: Any = None
        self.link: _Link | None = None
        self.number = 0
        self.port = 0
        self.moves: list[tuple[float, int]] = []
        """(when, port) of each connection made."""
        self.finish = threading.Event()
        self.failure: BaseException | None = None

    def connect(self, deadline: float = 90.0) -> None:
        """Connect to the first gateway of the list (from the preferred one on) that answers CONNECT."""
        self.drop()
        give_up = time.monotonic() + deadline
        start = self.prefer
        while time.monotonic() < give_up:
            for step in range(len(self.hosts)):
                hosts = self.hosts[(start + step) % len(self.hosts):] + self.hosts[:(start + step) % len(self.hosts)]
                self.number += 1
                link = _Link(self, self.number)
                connection: Any = stomp.Connection12(hosts, heartbeats=(2000, 2000), reconnect_attempts_max=1,
                                                     reconnect_sleep_initial=0.05, timeout=2.0, auto_decode=True)
                connection.set_listener("fleet", link)
                try:
                    connection.connect(wait=False)
                except Exception:
                    with contextlib.suppress(Exception):
                        connection.disconnect()
                    continue
                if link.connected.wait(3.0) and not link.lost.is_set():
                    self.connection, self.link = connection, link
                    self.port = connection.transport.current_host_and_port[1]
                    self.moves.append((time.monotonic(), self.port))
                    self.connected()
                    return
                with contextlib.suppress(Exception):
                    connection.disconnect()
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no gateway of {self.hosts} answered for {deadline}s")

    def connected(self) -> None:
        """Called with a new connection (subscribe, resend)."""

    def drop(self, graceful: bool = False) -> None:
        connection, self.connection, self.link = self.connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                if graceful:
                    connection.disconnect(receipt=f"bye-{self.number}")
                else:  # (the socket closed: the receiver thread ends; transport.stop() would wait for it)
                    connection.transport.running = False
                    connection.transport.disconnect_socket()

    def alive(self) -> bool:
        link = self.link
        return link is not None and not link.lost.is_set()

    def abandon(self) -> None:
        """Give the connection up as a client whose heart-beats timed out does (it connects again)."""
        link = self.link
        if link is not None:
            link.lost.set()

    def receipt(self, number: int, receipt: str) -> None:
        """A RECEIPT on connection ``number``."""

    def message(self, number: int, frame: Any) -> None:
        """A MESSAGE on connection ``number``."""

    def run(self) -> None:
        try:
            self.work()
        except BaseException as error:  # (reported by stop())
            self.failure = error
        finally:
            self.drop()

    def work(self) -> None:
        raise NotImplementedError


class Producer(_Client):
    """SENDs ``<name>-<n>`` to ``destination`` until :meth:`stop_sending`, ``window`` in flight at most,
    ``pause`` seconds between two; resends what is not receipted on each new connection."""

    def __init__(self, name: str, hosts: list[Host], destination: str, *, prefer: int = 0, window: int = 5,
                 pause: float = 0.01) -> None:
        super().__init__(name, hosts, prefer)
        self.destination, self.window, self.pause = destination, window, pause
        self.pending: dict[str, int] = {}
        """Id -> SENDs of it so far, while not receipted."""
        self.receipted: dict[str, int] = {}
        """Id -> SENDs of it made (more than 1: resent)."""
        self.sent_to: dict[str, set[int]] = defaultdict(set)
        """Id -> ports of the gateways a SEND of it went to."""
        self.stopping = threading.Event()
        self.count = 0

    def send(self, message_id: str) -> None:
        with self.lock:
            self.pending[message_id] = attempt = self.pending.get(message_id, 0) + 1
            self.sent_to[message_id].add(self.port)
        try:
            self.connection.send(self.destination, message_id, headers={
                "persistent": "true", "x-dedup-id": message_id, "receipt": f"{message_id}#{attempt}"})
        except Exception:
            if self.link is not None:
                self.link.lost.set()

    def connected(self) -> None:
        with self.lock:
            again = sorted(self.pending)
        for message_id in again:
            self.send(message_id)

    def receipt(self, number: int, receipt: str) -> None:
        message_id = receipt.split("#", 1)[0]
        with self.lock:
            attempts = self.pending.pop(message_id, None)
            if attempts is not None:
                self.receipted[message_id] = attempts

    def work(self) -> None:
        self.connect()
        while True:
            with self.lock:
                in_flight = len(self.pending)
            if self.stopping.is_set() and not in_flight:
                return
            if not self.alive():
                self.connect()
                continue
            if not self.stopping.is_set() and in_flight < self.window:
                self.send(f"{self.name}-{self.count}")
                self.count += 1
                if self.pause:
                    time.sleep(self.pause)
            else:
                time.sleep(0.005)

    def stop_sending(self, timeout: float = 60.0) -> None:
        self.stopping.set()
        self.join(timeout)
        if self.is_alive():
            import traceback

            frame = sys._current_frames().get(self.ident or 0)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
            raise AssertionError(f"{self.name}: SENDs not receipted after {timeout}s: {sorted(self.pending)[:20]}; "
                                 f"moves {self.moves}\n{stack}")
        assert self.failure is None, f"{self.name}: {self.failure!r}"


@dataclass
class Delivery:
    """One MESSAGE a consumer got."""

    message_id: str
    redelivered: bool
    port: int
    at: float
    ack: str


class Consumer(_Client):
    """Subscribes to ``destination`` with ``ack`` mode and ``prefetch``; acknowledges each delivery (with a
    receipt) unless :attr:`holding`; when ``reconnect_every`` is set, reconnects that many seconds after the
    first delivery on each connection (a member that leaves about 1 s after it joined jams a Tansu group for
    a minute or more: docs/kafka.md, "Bridges across a stalled link")."""

    def __init__(self, name: str, hosts: list[Host], destination: str, *, prefer: int = 0,
                 ack: str = "client-individual", prefetch: int = 10, reconnect_every: float = 0.0,
                 ack_batch: int = 5, wander: bool = False, backwards: bool = False) -> None:
        super().__init__(name, hosts, prefer)
        self.hold_every = 1
        """While :attr:`holding`: hold one delivery of each ``hold_every`` and acknowledge the others."""
        self.taken = 0
        self.backwards = backwards
        """``client-individual``: ACK each ``ack_batch`` deliveries last first (out of order)."""
        self.wander = wander
        """Each reconnection of its own (``reconnect_every``) prefers the next gateway of the list."""
        self.destination, self.ack_mode, self.prefetch = destination, ack, prefetch
        self.reconnect_every, self.ack_batch = reconnect_every, ack_batch
        self.inbox: queue.Queue[tuple[int, Any]] = queue.Queue()
        self.deliveries: list[Delivery] = []
        self.ack_sent: set[str] = set()
        """Ids an ACK was sent for (or delivered in ``auto`` mode)."""
        self.acked: set[str] = set()
        """Ids whose ACK was receipted."""
        self.receipts: dict[str, list[str]] = {}
        self.holding = threading.Event()
        self.held: list[Delivery] = []
        """What this consumer holds unacknowledged while :attr:`holding`."""
        self.unacked: list[Delivery] = []
        """``client`` mode: delivered on this connection, not yet covered by an ACK."""

    def connected(self) -> None:
        self.holding.clear()  # (what it held on the connection gone comes again; it acknowledges on this one)
        self.held = []
        self.unacked = []
        self.connection.subscribe(self.destination, id="1", ack=self.ack_mode,
                                  headers={"activemq.prefetchSize": str(self.prefetch)})

    def message(self, number: int, frame: Any) -> None:
        self.inbox.put((number, frame))

    def receipt(self, number: int, receipt: str) -> None:
        with self.lock:
            self.acked.update(self.receipts.pop(receipt, ()))

    def _ack(self, covered: list[Delivery], ack_id: str) -> None:
        receipt = f"ack-{self.number}-{ack_id}"
        with self.lock:
            self.receipts[receipt] = [d.message_id for d in covered]
        try:
            self.connection.ack(ack_id, receipt=receipt)
        except Exception:
            if self.link is not None:
                self.link.lost.set()
            return
        with self.lock:
            self.ack_sent.update(d.message_id for d in covered)

    def work(self) -> None:
        self.connect()
        since: float | None = None  # (the first delivery on this connection: its member has partitions)
        while not self.finish.is_set():
            due = self.reconnect_every and since is not None and time.monotonic() - since > self.reconnect_every
            if not self.alive() or due:
                if self.wander and self.alive():
                    self.prefer = (self.prefer + 1) % len(self.hosts)
                self.drop(graceful=self.alive())
                self.connect()
                since = None
            try:
                number, frame = self.inbox.get(timeout=0.05)
            except queue.Empty:
                if self.unacked and (not self.holding.is_set() or self.ack_mode != "client"):
                    self._ack_unacked()
                continue
            if number != self.number and self.ack_mode != "auto":
                continue  # from a connection given up: it comes again (an auto delivery is consumed)
            if since is None and number == self.number:
                since = time.monotonic()
            delivery = Delivery(frame.body, frame.headers.get("redelivered") == "true", self.port, time.monotonic(),
                                frame.headers.get("ack", ""))
            with self.lock:
                self.deliveries.append(delivery)
                if self.ack_mode == "auto":
                    self.ack_sent.add(delivery.message_id)
                    self.acked.add(delivery.message_id)
            if self.ack_mode == "auto":
                continue
            if self.ack_mode == "client":
                self.unacked.append(delivery)  # (a later ACK covers what is held too)
            self.taken += 1
            if self.holding.is_set() and (self.ack_mode == "client" or self.taken % self.hold_every == 0):
                self.held.append(delivery)
            elif self.ack_mode == "client-individual" and not self.backwards:
                self._ack([delivery], delivery.ack)
            else:
                if self.ack_mode == "client-individual":
                    self.unacked.append(delivery)
                if len(self.unacked) >= self.ack_batch:
                    self._ack_unacked()

    def _ack_unacked(self) -> None:
        """ACK what :attr:`unacked` holds: one cumulative ACK (``client``), or each, last first."""
        if self.ack_mode == "client":
            self._ack(self.unacked, self.unacked[-1].ack)
        else:
            for delivery in reversed(self.unacked):
                self._ack([delivery], delivery.ack)
        self.unacked = []

    def release(self) -> None:
        """Acknowledge again from now on (what is held stays held: it comes again on a new connection)."""
        self.holding.clear()

    def stop(self) -> None:
        self.finish.set()
        self.join(15)
        assert self.failure is None, f"{self.name}: {self.failure!r}"


def all_acked(producers: list[Producer], consumers: list[Consumer]) -> bool:
    """Whether every receipted id has had an ACK sent (or an ``auto`` delivery)."""
    receipted = set().union(*(p.receipted for p in producers))
    with contextlib.ExitStack() as stack:
        for consumer in consumers:
            stack.enter_context(consumer.lock)
        done = set().union(*(c.ack_sent for c in consumers))
    return receipted <= done


def wait_all_acked(producers: list[Producer], consumers: list[Consumer], timeout: float = 90.0) -> None:
    """Wait until every receipted id was acknowledged (returns at the deadline either way: see :func:`verdict`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all_acked(producers, consumers):
        time.sleep(0.2)


def verdict(fleet: Fleet, bootstrap: str, topic: str, partitions: int, producers: list[Producer],
            consumers: list[Consumer], *, held: dict[str, float] | None = None, killed_at: float = 0.0) -> None:
    """Fail with where the missing records are when a receipted id was never acknowledged; check the
    ``x-dedup-id`` promise (no more records per id than gateways its SENDs went to) and, for ``held``
    (id -> when a consumer of a gateway killed at ``killed_at`` got it), the redelivered flag."""
    receipted: dict[str, int] = {}
    sent_to: dict[str, set[int]] = {}
    for producer in producers:
        receipted.update(producer.receipted)
        sent_to.update(producer.sent_to)
    acked = set().union(*(c.ack_sent for c in consumers))
    missing = sorted(set(receipted) - acked)
    sent_records = sum(len(ports) for ports in sent_to.values())
    records = read_records(bootstrap, topic, sent_records, timeout=10.0, settle=1.0)
    where: dict[str, list[str]] = defaultdict(list)
    for record in records:
        where[record.value().decode()].append(f"p{record.partition()}@{record.offset()}")
    problems: list[str] = []
    if missing:
        group = f"jmsgateway.queue.{topic}"
        lines = [f"{len(missing)} receipted messages never acknowledged (of {len(receipted)}):"]
        shown = 0
        for record in records:
            message_id = record.value().decode()
            if message_id in missing and shown < 30:
                shown += 1
                lines.append(f"  {message_id}: partition {record.partition()} offset {record.offset()} "
                             f"headers {dict((k, v) for k, v in record.headers() or [])}")
        never = [m for m in missing if m not in where]
        by_partition: dict[int, list[int]] = defaultdict(list)
        for record in records:
            if record.value().decode() in missing:
                by_partition[record.partition()].append(record.offset())
        lines.append(f"  missing per partition (count, first, last offset): "
                     f"{ {p: (len(o), min(o), max(o)) for p, o in sorted(by_partition.items())} }")
        lines.append(f"  not in the topic at all: {never}")
        lines.append(f"  SENDs of them (attempts, ports): "
                     f"{[(m, receipted[m], sorted(sent_to.get(m, ()))) for m in missing[:30]]}")
        committed = committed_offsets(bootstrap, group, topic, partitions)
        lines.append(f"  group {group} committed: {committed}")
        past = sum(1 for r in records if r.value().decode() in missing and r.offset() < committed[r.partition()])
        waiting = sum(1 for r in records if r.value().decode() in missing and r.offset() >= committed[r.partition()])
        lines[0] += (f" {len(never)} never stored, {past} records the group committed past (skipped), "
                     f"{waiting} after the committed offset (not delivered yet: a stalled or jammed group)")
        ends: dict[int, int] = defaultdict(lambda: -1)
        for record in records:
            ends[record.partition()] = max(ends[record.partition()], record.offset())
        lines.append(f"  last offsets in the topic: {dict(sorted(ends.items()))}")
        for consumer in consumers:
            seen = [d for d in consumer.deliveries if d.message_id in missing]
            lines.append(f"  {consumer.name} ({consumer.ack_mode}, prefetch {consumer.prefetch}) got {len(seen)} of "
                         f"them: {seen[:10]}; "
                         f"moves {consumer.moves}")
        lines.append(fleet.logs())
        problems.append("\n".join(lines))
    twice = {m: (len(where[m]), sorted(sent_to[m])) for m in receipted if len(where[m]) > len(sent_to[m])}
    if twice:
        problems.append(f"ids stored more often than gateways their SENDs went to (x-dedup-id): {twice}")
    if held:
        resent = {m for m, attempts in receipted.items() if attempts > 1}
        again: dict[str, bool] = {}
        later = sorted((d for c in consumers for d in c.deliveries
                        if d.message_id in held and d.at > killed_at and d.message_id not in resent),
                       key=lambda d: d.at)
        for delivery in later:
            again.setdefault(delivery.message_id, delivery.redelivered)
        unflagged = sorted(m for m, flagged in again.items() if not flagged)
        if unflagged:
            problems.append(f"held by the killed gateway's consumer, delivered again without redelivered:true: "
                            f"{unflagged}")
    errors = [e for c in (*producers, *consumers) for e in c.errors]
    assert not problems, "\n\n".join(problems) + f"\nERROR frames: {errors[:5]}"


class Busy:
    """``count`` busy-loop processes beside the test (CPU load on the host), ended by their pids."""

    def __init__(self, count: int) -> None:
        self.processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(5)


def stats(consumers: list[Consumer]) -> str:
    """Deliveries per consumer and how many were flagged (for the test's output)."""
    return ", ".join(f"{c.name}: {len(c.deliveries)} ({sum(d.redelivered for d in c.deliveries)} flagged, "
                     f"{len(Counter(d.message_id for d in c.deliveries))} ids)" for c in consumers)


def held_before(consumer: Consumer, before: float) -> dict[str, float]:
    """Id -> when ``consumer`` got it, of what it holds unacknowledged since before ``before``."""
    return {d.message_id: d.at for d in list(consumer.held) if d.at < before}


def finish(fleet: Fleet, bootstrap: str, topic: str, partitions: int, producers: list[Producer],
           consumers: list[Consumer], *, held: dict[str, float] | None = None, killed_at: float = 0.0) -> None:
    """The end of an attack: the producers stop, every receipted message is waited for until acknowledged,
    the consumers stop, and :func:`verdict` judges (AssertionError naming what is missing and where)."""
    for producer in producers:
        producer.stop_sending()
    wait_all_acked(producers, consumers)
    for consumer in consumers:
        consumer.stop()
    print(stats(consumers), {p.name: len(p.receipted) for p in producers})
    verdict(fleet, bootstrap, topic, partitions, producers, consumers, held=held, killed_at=killed_at)


def start_all(clients: list[Any]) -> None:
    """Start the clients' threads; wait until each is connected."""
    for client in clients:
        client.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(c.moves or c.failure for c in clients):
        time.sleep(0.05)
    failed = [f"{c.name}: {c.failure!r}" for c in clients if c.failure or not c.moves]
    assert not failed, failed


def start_fleet(fleet: Fleet) -> None:
    """Start the gateways side by side (each waits for its listener)."""
    errors: list[BaseException] = []

    def start(gateway: GatewayProcess) -> None:
        try:
            gateway.start(timeout=60)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=start, args=(g,)) for g in fleet.gateways]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
