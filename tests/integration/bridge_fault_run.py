"""One run of the bridge fault matrix: a real gateway process bridging hundreds of
messages from a source to a target while a fault strikes, then an exact count.

Sides: ``embedded`` (the gateway's own broker, filled over STOMP with receipts),
``amq`` (ActiveMQ 5.17 over STOMP, filled directly), ``jms`` (the same ActiveMQ
through the JMS-API connector: its OpenWire client jars in the gateway's JVM; filled and
read over STOMP like ``amq``), ``kafka`` (Tansu, filled directly with plain records: no
``jms.MessageId``, so the bridge sees fallback ids).  Every message carries a
``seq``.  At the end the target is read, and so is what is left at the source
(the embedded queue through a gateway started with the bridge disabled,
ActiveMQ's queue directly, the Kafka records past the bridge's committed offset).  Then, for every confirmed seq:

* ``lost``: neither at the target nor left at the source (acknowledged, not
  sent): allowed under AT_MOST_ONCE only;
* ``duplicated``: at the target more than once: allowed under DUPLICATES_OK only.

A fault that stops the bridge on purpose (a message the target refuses, a
transformer rejecting one) must leave it ``failed`` with the rest at the source.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.test_bridge_gateway import Producer, Tally
from tests.support.activemq import ActiveMQBroker
from tests.support.gateway import REPO, GatewayProcess
from tests.support.kafka import committed_offsets, create_topics, group_settings, read_records
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

SIDES = ("embedded", "amq", "kafka", "jms")
QOS_MODES = ("AT_MOST_ONCE", "DUPLICATES_OK", "ONCE_AND_ONLY_ONCE")
FAULTS = ("kill", "cut-source", "cut-target", "broker-restart", "refused", "transformer-reject", "rebalance",
          "routed", "recreate", "stall", "slow")
WAN_FAULTS = ("stall", "slow")
"""Faults of a WAN link (issue 32), on the target's connection (the source's into the embedded
broker): ``stall`` passes nothing either way for STALL_SECONDS (no RST); ``slow`` holds every
answer SLOW_LATENCY seconds (more than the connector's send timeout) for SLOW_SECONDS."""
WAN_SEND_TIMEOUT = 2000
"""ms: the struck connector's ``send_timeout`` (a Kafka producer's ``message.timeout.ms``) in a WAN case."""
STALL_SECONDS = 6.0
SLOW_SECONDS = 6.0
SLOW_LATENCY = 3.5
SLOW_JITTER = 0.5
WAN_SEED = 32
"""The jitter's seed: the same delays every run."""
STOPPING_FAULTS = ("refused", "transformer-reject")
"""Faults after which the bridge must be failed (a message no retry can deliver)."""
POISON = 120
"""The index of the poison message of a stopping fault."""
BIG = 1_200_000
"""A body over Kafka's default ``message.max.bytes`` (1 MB)."""
COMPRESSION_FLAG = "JMSGW_COMPRESSION"
ACTIVEMQ_SIDES = ("amq", "jms")
"""The sides that are the ActiveMQ broker (over STOMP, over OpenWire through the JMS API)."""
JMS_CLIENT_JARS = [f"/usr/share/activemq/lib/{jar}" for jar in (
    "activemq-client.jar", "geronimo-jms_1.1_spec.jar", "hawtbuf.jar", "slf4j-api.jar",
    "geronimo-j2ee-management-1.1-spec.jar")]
RECREATE_GAP = 3.0
"""Seconds a ``recreate`` case leaves the source topic deleted once the bridge noticed: long enough for
a retry's new consumer to join its group (Tansu assigns about half the session timeout after a join)
while the topic is not there."""
REFUSED_TYPES = '{"n": "int"}'
"""The poison of a ``refused`` case into the jms target: a ``jmsgateway.types`` header declaring
property ``n`` an int, and ``n`` not a number: no JMS message can be made of it, for good."""


def applies(source: str, target: str, fault: str) -> str | None:
    """Why ``fault`` does not apply to source -> target, or None when it does."""
    if fault == "cut-source" and source == "embedded":
        return "the embedded broker has no connection to cut"
    if fault == "cut-target" and target == "embedded":
        return "the embedded broker has no connection to cut"
    if fault == "cut-target" and source == target == "kafka":
        return "one Kafka connection serves both sides: cut-source covers it"
    if fault == "broker-restart" and not {source, target} & set(ACTIVEMQ_SIDES):
        return "Tansu keeps its topics in memory: only ActiveMQ is restarted"
    if fault == "refused" and target not in ("kafka", "jms"):
        return ("only Kafka (a record over message.max.bytes) and the jms connector (a property that cannot be "
                "typed) refuse a message for good here")
    if fault in ("rebalance", "recreate") and source != "kafka":
        return "a Kafka source fault"
    if fault == "routed" and target != "kafka":
        return "[routing] routes to Kafka"
    if fault in WAN_FAULTS and source == target == "embedded":
        return "the embedded broker has no connection to stall or slow down"
    return None


def struck_side(source: str, target: str, fault: str) -> str | None:
    """``"src"`` or ``"dst"``: the role whose connection goes through a proxy in this case, or None."""
    if fault == "cut-source":
        return "src"
    if fault == "cut-target":
        return "dst"
    if fault in WAN_FAULTS:
        return "dst" if target != "embedded" else "src"
    return None


_BODY_ID = re.compile(rb"^body ([a-z]-[0-9]+)$")


def message_id_of(body: bytes | str | None, seq: str | bytes | None) -> str:
    """The message id a run wrote into the body (``body s-17`` -> ``s-17``); a body without
    one (a poison message) falls back to the ``seq`` header, then to ``?``."""
    raw = body.encode() if isinstance(body, str) else (body or b"")
    found = _BODY_ID.match(raw)
    if found:
        return found.group(1).decode()
    if isinstance(seq, bytes):
        seq = seq.decode(errors="replace")
    return seq or "?"


@dataclass
class Outcome:
    """What one run found."""

    receipted: set[str]
    arrived: Counter[str]
    left: set[str]
    status: dict[str, Any]
    log: str = ""
    aborted_copies: int = 0
    """Kafka transactions only: copies at the target (read_uncommitted: Tansu serves aborted records to
    every reader) written by transactions that did not commit (:func:`count_transactions`)."""
    problems: list[str] = field(default_factory=list)
    """Kafka transactions only: what the bridge's log does not explain of the copies' transactions."""
    recorded: int | None = None
    """Source ids the bridge's duplicate store (its commit log, ``bridges.sqlite``) holds, if it has one."""
    unsettled: list[str] = field(default_factory=list)
    """Kafka transactions only: transactions not ended while the target was read (:func:`unsettled_at_count`):
    their copies are neither delivered nor known aborted, so the count proves nothing of them."""

    @property
    def lost(self) -> set[str]:
        return self.receipted - set(self.arrived) - self.left

    @property
    def duplicated(self) -> dict[str, int]:
        return {seq: n for seq, n in self.arrived.items() if n > 1}

    def summary(self) -> str:
        extra = f", copies of aborted transactions {self.aborted_copies}" if self.aborted_copies else ""
        if self.problems:
            extra += f", unexplained transactions {self.problems}"
        if self.recorded is not None:
            extra += f", recorded in the duplicate store {self.recorded}"
        if self.unsettled:
            extra += f", counted while {'; '.join(self.unsettled)}"
        return (f"confirmed {len(self.receipted)}, at the target {len(self.arrived)}, left at the source "
                f"{len(self.left)}, lost {len(self.lost)}, duplicated {len(self.duplicated)}, "
                f"state {self.status.get('state')}, forwarded {self.status.get('forwarded')}{extra}")


@dataclass
class Brokers:
    """The brokers a run may use (started by the test's fixtures)."""

    activemq: ActiveMQBroker | None = None
    kafka: str | None = None
    proxied_kafka: tuple[Any, TcpProxy] | None = None


@dataclass
class FaultRun:
    """Configure, run and count one source x target x QoS x fault case."""

    tmp_path: Path
    source: str
    target: str
    qos: str
    fault: str
    brokers: Brokers
    count: int = 300
    batch: int = 10
    name: str = "fm"
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    amq_proxy: TcpProxy | None = None
    gateway: GatewayProcess | None = None
    admin_port: int = field(default_factory=free_port)
    receipted: set[str] = field(default_factory=set)
    gateway_id: str = field(default_factory=lambda: f"fm-gw-{uuid.uuid4().hex[:8]}")
    copies: list[tuple[str, str | None]] = field(default_factory=list)
    """Kafka target: (seq, ``jmsbridge.txn``) of every record, in the target's order."""

    # -- names -----------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        if self.brokers.proxied_kafka is not None:
            return str(self.brokers.proxied_kafka[0].bootstrap)
        assert self.brokers.kafka is not None
        return self.brokers.kafka

    @property
    def kafka_proxy(self) -> TcpProxy | None:
        return self.brokers.proxied_kafka[1] if self.brokers.proxied_kafka is not None else None

    def destination(self, side: str, role: str) -> str:
        if side == "kafka":
            return f"/queue/fm-{role}-{self.tag}" if role == "src" else f"/topic/fm-{role}-{self.tag}"
        return f"/queue/fm-{role}-{self.tag}"

    def topic(self, role: str) -> str:
        return f"fm-{role}-{self.tag}"

    def connector(self, side: str, role: str) -> str:
        if side == "embedded":
            return "embedded"
        if side in ACTIVEMQ_SIDES:
            return f"{side}_{role}"
        return "kafka"

    # -- configuration ----------------------------------------------------------

    def config(self, *, enabled: bool = True) -> str:
        parts = [f'[admin]\nlisten = ["tcp:{self.admin_port}:interface=127.0.0.1"]\n']
        for role, side in (("src", self.source), ("dst", self.target)):
            cut = struck_side(self.source, self.target, self.fault) == role
            send_timeout = WAN_SEND_TIMEOUT if cut and self.fault in WAN_FAULTS else 20000
            if side == "amq":
                assert self.brokers.activemq is not None
                port = self.amq_proxy.port if cut and self.amq_proxy is not None else self.brokers.activemq.stomp_port
                parts.append(f'[connectors.amq_{role}]\nuri = "stomp://127.0.0.1:{port}"\n'
                             f"failure_retry_interval = 200\nsend_timeout = {send_timeout}\nheartbeat = [0, 0]\n")
            if side == "jms":
                assert self.brokers.activemq is not None
                port = (self.amq_proxy.port if cut and self.amq_proxy is not None
                        else self.brokers.activemq.openwire_port)
                parts.append(f'[connectors.jms_{role}]\ntype = "jms"\nclasspath = {json.dumps(JMS_CLIENT_JARS)}\n'
                             f"failure_retry_interval = 200\nsend_timeout = {send_timeout}\n"
                             'connection_factory = { class = "org.apache.activemq.ActiveMQConnectionFactory", '
                             f'properties = {{ brokerURL = "tcp://127.0.0.1:{port}", '
                             "watchTopicAdvisories = false } }\n")
        if "kafka" in (self.source, self.target):
            consumer = ", ".join(f'"{key}" = {value}' for key, value in group_settings().items())
            producer = ""
            if self.fault in WAN_FAULTS and self.side_of_cut() == "kafka":
                producer = f'producer = {{ "message.timeout.ms" = {WAN_SEND_TIMEOUT} }}\n'
            parts.append(f'[connectors.kafka]\nuri = "kafka://{self.bootstrap}"\nconsumer = {{ {consumer} }}\n'
                         + producer)
        if self.fault == "routed":
            parts.append(f'[routing]\nconnector = "kafka"\n[[routing.routes]]\nname = "to-dst"\n'
                         f'include = "msg.address == \'{self.destination("kafka", "dst")}\'"\n'
                         f'topic = "{self.topic("dst")}"\n')
        lines = ["[[bridges]]", f'name = "{self.name}"',
                 f'source = {{ connector = "{self.connector(self.source, "src")}", '
                 f'destination = "{self.destination(self.source, "src")}" }}',
                 f'target = {{ connector = "{self.connector(self.target, "dst")}", '
                 f'destination = "{self.destination(self.target, "dst")}" }}',
                 f'qos = "{self.qos}"', *self.batching(),
                 "failure_retry_interval = 200", f"enabled = {'true' if enabled else 'false'}"]
        if self.fault == "transformer-reject":
            lines.append('transformers = [{ transformer = "compress", options = { mode = "decompress" } }]')
        if self.fault == "transformer-reject":
            parts.append(f'[transform]\nplugin_dirs = ["{REPO / "plugins"}"]\n')
        parts.append("\n".join(lines) + "\n")
        return "\n".join(parts)

    @property
    def kafka_transactions(self) -> bool:
        """Kafka -> Kafka ONCE_AND_ONLY_ONCE: the transactions engine (no pending deliveries to hold)."""
        return self.source == self.target == "kafka" and self.qos == "ONCE_AND_ONLY_ONCE"

    @property
    def batches_at_source(self) -> bool:
        """No deliveries wait in the bridge one by one: Kafka's transactions engine, or a jms
        source (a transacted session hands whole batches, forwarded at once): the cut strikes
        mid-stream, between small batches."""
        return self.kafka_transactions or self.source == "jms"

    def batching(self) -> list[str]:
        if self.fault == "cut-source" and not self.batches_at_source:
            # Every delivery waits in the bridge while the connection is cut and the broker
            # redelivers on the next one: what the acknowledgements of the first deliveries say matters.
            return [f"max_batch_size = {self.count + 100}", "max_batch_time = 3000"]
        return [f"max_batch_size = {self.batch}", "max_batch_time = 20"]

    # -- filling the source -------------------------------------------------------

    def poison(self, index: int) -> bool:
        return self.fault in STOPPING_FAULTS and index == POISON

    def fill_external(self) -> None:
        """Fill an ActiveMQ or Kafka source before the gateway starts."""
        if self.source in ACTIVEMQ_SIDES:
            assert self.brokers.activemq is not None
            client = Client(("127.0.0.1", self.brokers.activemq.stomp_port))
            try:
                events = []
                for index in range(self.count):
                    seq, receipt = f"s-{index}", f"r-{self.tag}-{index}"
                    events.append((seq, client.listener.receipt_event(receipt)))
                    headers, body = self.poison_parts(index, {"seq": seq, "persistent": "true", "receipt": receipt})
                    client.connection.send(self.destination(self.source, "src"), body, headers=headers)
                for seq, event in events:
                    assert event.wait(60), f"no receipt from ActiveMQ for {seq}"
                    self.receipted.add(seq)
            finally:
                client.disconnect()
        elif self.source == "kafka":
            create_topics(self.bootstrap, self.topic("src"), partitions=2)
            self.produce_source(range(self.count))

    def produce_source(self, indexes: range, prefix: str = "s") -> None:
        records: list[tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]] = []  # (value, key, headers)
        for index in indexes:
            headers: list[tuple[str, str | bytes | None]] = [("jms.seq", f"{prefix}-{index}".encode())]
            if self.fault == "routed":  # written by this very gateway earlier: the cycle guard's case
                headers.append(("jmsbridge.origin", self.gateway_id.encode()))
            value = f"body {prefix}-{index}".encode()
            if self.poison(index) and self.fault == "refused":
                value = b"x" * BIG
            if self.poison(index) and self.fault == "refused" and self.target == "jms":
                value = f"body {prefix}-{index}".encode()
                headers += [("jms.jmsgateway.types", REFUSED_TYPES.encode()), ("jms.n", b"not a number")]
            if self.poison(index) and self.fault == "transformer-reject":
                headers.append((f"jms.{COMPRESSION_FLAG}", b"gzip"))
                value = b"\xff\xfe not gzip"  # not UTF-8: a BytesMessage
            records.append((value, str(index).encode(), headers))
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "message.max.bytes": 2 * BIG})
        for value, key, record_headers in records:
            producer.produce(self.topic("src"), value=value, key=key, headers=record_headers)
        assert producer.flush(30) == 0, "source records not delivered"
        self.receipted.update(f"{prefix}-{index}" for index in indexes)

    def poison_parts(self, index: int, headers: dict[str, str]) -> tuple[dict[str, str], str | bytes]:
        body: str | bytes = f"body {headers['seq']}"
        if self.poison(index) and self.fault == "refused":
            body = b"x" * BIG
            if self.target == "jms":
                body = f"body {headers['seq']}"
                headers = {**headers, "jmsgateway.types": REFUSED_TYPES, "n": "not a number"}
        if self.poison(index) and self.fault == "transformer-reject":
            headers = {**headers, COMPRESSION_FLAG: "gzip"}
            body = b"not gzip at all"
        return headers, body

    def fill_embedded(self, gateway: GatewayProcess) -> Producer:
        """A thread sending the embedded source's messages through the gateway, one receipt each."""
        tally = Tally()
        run = self

        class Filler(Producer):
            def run(self) -> None:  # the poison message goes with its own headers and body
                from tests.integration.test_bridge_gateway import send_receipted

                for index in range(run.count):
                    if self.halt.is_set():
                        return
                    seq = f"s-{index}"
                    headers, body = run.poison_parts(index, {"seq": seq, "persistent": "true"})
                    if not send_receipted(self.client, self.destination, body, **headers):  # type: ignore[arg-type]
                        return
                    with tally.lock:
                        tally.receipted.add(seq)

        filler = Filler(gateway, self.destination("embedded", "src"), tally, "s")
        self._tally = tally
        return filler

    # -- status ---------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/bridges/{self.name}", timeout=5) as r:
                answer: dict[str, Any] = json.loads(r.read())
                return answer
        except OSError:
            return {}

    def settle(self, quiet: float = 2.5, timeout: float = 90.0) -> dict[str, Any]:
        """Wait until the bridge failed, or forwarded nothing new for ``quiet`` seconds with nothing pending.

        Kafka's transactions engine (:attr:`kafka_transactions`) has nothing pending to show: a commit held
        behind a fault changes nothing for longer than ``quiet``.  There the quiet seconds count only with no
        transaction open (the status's ``transaction``: begun and not committed, aborted or settled by a new
        producer's ``init_transactions``) and none begun (``transactions`` still), and a transaction still
        open when ``timeout`` passed (or at a failed bridge, whose thread ended) fails the run: its copies at
        the target are neither delivered nor known aborted, a count then proves nothing of them."""
        deadline = time.monotonic() + timeout
        last: tuple[Any, ...] | None = None
        since = time.monotonic()
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = self.status()
            if status.get("state") == "failed":
                self.settled_transactions(status, "the bridge failed")
                return status
            mark = (status.get("forwarded"), status.get("pending"), status.get("in_flight"), status.get("state"),
                    status.get("transaction"), status.get("transactions"))
            if mark != last:
                last, since = mark, time.monotonic()
            elif (time.monotonic() - since >= quiet and status.get("state") == "running" and not status.get("pending")
                  and not (self.kafka_transactions and status.get("transaction") is not None)):
                self.settled_transactions(status, f"nothing changed for {quiet} s")
                return status
            time.sleep(0.2)
        self.settled_transactions(status, f"{timeout:.0f} s passed")
        return status

    def settled_transactions(self, status: dict[str, Any], when: str) -> None:
        """Kafka transactions: AssertionError unless ``status`` says no transaction is open."""
        if not self.kafka_transactions:
            return
        assert "transaction" in status, (
            f"{when}: the bridge's status does not say whether a transaction is open: {status or 'no answer'}")
        assert status["transaction"] is None, (
            f"{when} with transaction {status['transaction']} still open (neither committed nor aborted): "
            f"its copies cannot be counted; status {status}")

    # -- the fault ------------------------------------------------------------------------

    def strike(self, gateway: GatewayProcess, started: Callable[[], bool]) -> None:
        """Inject the fault once the bridge moves."""
        wait_until(started, 60, "the bridge to start moving")
        if self.fault == "kill":
            time.sleep(0.15)
            gateway.kill()
            gateway.start()
            time.sleep(0.4)
            gateway.kill()
            gateway.start()
        elif self.fault in ("cut-source", "cut-target"):
            proxy = self.amq_proxy if self.side_of_cut() in ACTIVEMQ_SIDES else self.kafka_proxy
            assert proxy is not None
            proxy.cut()
            time.sleep(1.0)
            proxy.restore()
        elif self.fault == "stall":
            proxy = self.wan_proxy
            proxy.stall("both")  # no RST: the link passes nothing, both ends keep waiting
            time.sleep(STALL_SECONDS)
            proxy.flow()
        elif self.fault == "slow":
            proxy = self.wan_proxy
            proxy.delay(SLOW_LATENCY, jitter=SLOW_JITTER, direction="to_client")  # answers later than send_timeout
            time.sleep(SLOW_SECONDS)
            proxy.delay(0)
        elif self.fault == "broker-restart":
            assert self.brokers.activemq is not None
            self.brokers.activemq.restart()
        elif self.fault == "rebalance":
            self.rebalance()
        elif self.fault == "recreate":
            self.recreate(gateway)

    def side_of_cut(self) -> str:
        """The side whose connection goes through the proxy (cut, stalled or slowed)."""
        return self.source if struck_side(self.source, self.target, self.fault) == "src" else self.target

    @property
    def wan_proxy(self) -> TcpProxy:
        proxy = self.amq_proxy if self.side_of_cut() in ACTIVEMQ_SIDES else self.kafka_proxy
        assert proxy is not None, "a WAN fault needs its proxy"
        return proxy

    def rebalance(self) -> None:
        """Another member joins the bridge's consumer group for a while, then leaves."""
        from confluent_kafka import Consumer

        group = (f"jmsgateway.bridge.{self.name}" if self.source == self.target == "kafka"
                 and self.qos == "ONCE_AND_ONLY_ONCE" else f"jmsgateway.queue.{self.topic('src')}")
        intruder = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", **group_settings()})
        intruder.subscribe([self.topic("src")])
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            intruder.poll(0.2)  # takes part in the group, never commits: what it got comes again
        intruder.close()

    def recreate(self, gateway: GatewayProcess) -> None:
        """Once the first records are bridged, delete the source topic under the running
        bridge and create it again with new records whose offsets (and fallback ids) repeat
        the old ones.  The gateway must stay up (librdkafka's SIGSEGV on a deleted topic ends
        only the consumer's child process); the bridge's source fails and is retried."""
        from confluent_kafka.admin import AdminClient

        self.settle(quiet=2.0, timeout=60)
        before = self.status().get("last_error")
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.delete_topics([self.topic("src")], operation_timeout=15).values():
            future.result(15)
        # the topic is created again only once the bridge noticed it gone (its consumer crashed or said
        # so) and a retry had time to subscribe while it is not there: a consumer subscribed then does
        # not see the topic come back before its next metadata refresh (5 min), the case the
        # Kafka -> Kafka engine missed until 2026-11-29 (it copied nothing of the new records)
        wait_until(lambda: self.status().get("last_error") not in (None, before), 30,
                   "the bridge to notice its source topic deleted")
        time.sleep(RECREATE_GAP)
        assert gateway.process is not None and gateway.process.poll() is None, (
            f"the gateway died when its source topic was deleted:\n{gateway.log()[-3000:]}")
        create_topics(self.bootstrap, self.topic("src"), partitions=2)
        self.produce_source(range(self.count), prefix="n")

    # -- reading ----------------------------------------------------------------------------

    def read_target(self, gateway: GatewayProcess) -> Counter[str]:
        arrived: Counter[str] = Counter()
        if self.target == "kafka":
            # read_uncommitted: every copy written, committed or not (Tansu serves aborted
            # transactions' records to read_committed readers as well: never trust that alone)
            self.copies.clear()
            for record in read_records(self.bootstrap, self.topic("dst"), 10**9, timeout=4, settle=0,
                                       **{"isolation.level": "read_uncommitted"}):
                headers = dict(record.headers() or ())
                seq = message_id_of(record.value(), headers.get("jms.seq") or f"?{record.offset()}")
                txn = headers.get("jmsbridge.txn")
                self.copies.append((seq, txn.decode() if txn is not None else None))
                arrived[seq] += 1
            return arrived
        address = gateway.address if self.target == "embedded" else ("127.0.0.1", self.brokers.activemq.stomp_port)  # type: ignore[union-attr]  # amq, jms
        return drain_counting(address, self.destination(self.target, "dst"))

    def read_leftovers(self, gateway: GatewayProcess) -> set[str]:
        """What is still at the source once the bridge stopped."""
        if self.source == "kafka":
            group = (f"jmsgateway.bridge.{self.name}" if self.target == "kafka" and self.qos == "ONCE_AND_ONLY_ONCE"
                     else f"jmsgateway.queue.{self.topic('src')}")
            committed = committed_offsets(self.bootstrap, group, self.topic("src"), partitions=2)
            left = set()
            for record in read_records(self.bootstrap, self.topic("src"), 10**9, timeout=4, settle=0):
                if record.offset() >= max(0, committed[record.partition()]):
                    left.add(message_id_of(record.value(), dict(record.headers() or ()).get("jms.seq")))
            return left
        if self.source in ACTIVEMQ_SIDES:
            return set(drain_counting(("127.0.0.1", self.brokers.activemq.stomp_port),  # type: ignore[union-attr]
                                      self.destination(self.source, "src")))
        gateway.config_path.write_text(gateway.config_path.read_text().replace("enabled = true", "enabled = false"))
        gateway.start()
        try:
            return set(drain_counting(gateway.address, self.destination("embedded", "src")))
        finally:
            gateway.stop()

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> Outcome:
        if struck_side(self.source, self.target, self.fault) and self.side_of_cut() in ACTIVEMQ_SIDES:
            assert self.brokers.activemq is not None
            broker = self.brokers.activemq
            port = broker.stomp_port if self.side_of_cut() == "amq" else broker.openwire_port
            self.amq_proxy = TcpProxy("127.0.0.1", port, seed=WAN_SEED)
        if "kafka" in (self.source, self.target):
            create_topics(self.bootstrap, self.topic("dst"))
        self.fill_external()
        gateway = GatewayProcess(self.tmp_path / "gw", self.config(), args=[
            "--set", 'broker.persistence="sqlite"', "--set", f'gateway.id="{self.gateway_id}"'])
        self.gateway = gateway
        filler: Producer | None = None
        status: dict[str, Any] = {}
        try:
            gateway.start()
            if self.source == "embedded":
                filler = self.fill_embedded(gateway)
                filler.start()
            if self.fault == "cut-source" and not self.batches_at_source:
                self.strike(gateway, lambda: int(self.status().get("pending") or 0) >= min(self.count, 100))
            else:
                self.strike(gateway, lambda: int(self.status().get("forwarded") or 0) > 0 or
                            self.status().get("state") == "failed")
            if filler is not None:
                filler.join(120)
                if self.fault == "kill":  # the filler's connection died with the gateway: send the rest
                    self.refill(gateway)
            status = self.settle()
            arrived = self.read_target(gateway)
            after = self.status() if self.kafka_transactions else {}
            if filler is not None:
                self.receipted |= self._tally.receipted
            gateway.stop()
            left = self.read_leftovers(gateway)
        except BaseException:
            lines = [line for line in gateway.log().splitlines() if "GET /bridges" not in line]
            print("\n".join(lines)[-8000:])
            if gateway.process is not None:
                print(f"gateway process: exit status {gateway.process.poll()}")
                if gateway.process.poll() is not None and gateway.process.stdout is not None:
                    print(gateway.process.stdout.read().decode(errors="replace")[-3000:])
            raise
        finally:
            gateway.kill()
            if self.amq_proxy is not None:
                self.amq_proxy.close()
        outcome = Outcome(self.receipted, arrived, left, status, gateway.log(),
                          recorded=recorded_ids(gateway.data_dir, self.name))
        if self.kafka_transactions:
            self.count_by_transaction(outcome)
            outcome.unsettled = unsettled_at_count(status, after)
        return outcome

    def count_by_transaction(self, outcome: Outcome) -> None:
        """Kafka transactions: count the target by the transaction that wrote each copy (:attr:`copies`), as
        the two-gateway test does: a copy of a transaction the log says aborted (or of a SIGKILLed process's
        last one, every record of it copied again) is no delivery; two copies from committed transactions
        are a duplicate."""
        killed = unlogged_ends(self.copies, outcome.log) if self.fault == "kill" else set()  # else none ends unlogged
        count = count_transactions(self.copies, outcome.log, killed)
        outcome.arrived = count.delivered
        outcome.aborted_copies = sum(count.aborted.values())
        outcome.problems = count.problems

    def refill(self, gateway: GatewayProcess) -> None:
        sent = set(self._tally.receipted)
        client = Client(gateway.address)
        try:
            from tests.integration.test_bridge_gateway import send_receipted

            for index in range(self.count):
                if f"s-{index}" in sent:
                    continue
                # a new seq: the first SEND may have been stored before the kill (its receipt lost)
                seq = f"r-{index}"
                headers, body = self.poison_parts(index, {"seq": seq, "persistent": "true"})
                if send_receipted(client, self.destination("embedded", "src"), body, **headers):  # type: ignore[arg-type]
                    with self._tally.lock:
                        self._tally.receipted.add(seq)
        finally:
            client.disconnect()


def unsettled_at_count(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What of a Kafka-transactions bridge was not settled while its target was read, from its status when
    the count began (``before``: what :meth:`FaultRun.settle` returned) and when it ended: a transaction open
    then (the status's ``transaction``), one begun meanwhile (``transactions`` moved), or a status that does
    not say.  Empty when every copy read was written by a transaction that had ended."""
    found = []
    for when, status in (("the count began", before), ("the count ended", after)):
        if "transaction" not in status:
            found.append(f"no bridge status with a transaction field when {when} ({status or 'no answer'})")
        elif status["transaction"] is not None:
            found.append(f"transaction {status['transaction']} open when {when}")
    began = int(after.get("transactions") or 0) - int(before.get("transactions") or 0)
    if began > 0:
        found.append(f"{began} transaction(s) begun during the count")
    return found


ABORTED_TRANSACTION = re.compile(r"transaction (\S+) \((\d+) copies\) aborted")
"""How the transactions engine logs a failed transaction it aborted (a ``kafka transaction failed``
line, gateway.connectors.kafka_transactions.KafkaTransactionalCopy.recover)."""


@dataclass
class TransactionCount:
    """What a ``read_uncommitted`` reader saw of a Kafka-transactions bridge's target, told apart by
    the transaction that wrote each copy (its ``jmsbridge.txn`` header): see :func:`count_transactions`."""

    delivered: Counter[str]
    """Copies per seq written by transactions that committed (not logged aborted)."""
    aborted: dict[str, int]
    """Copies at the target per transaction the bridge logged as aborted (or the killed gateway's
    transaction in flight, when every record of it was copied by a committed one too)."""
    problems: list[str]
    """What the log does not explain (an aborted transaction with more copies than it logged, a
    killed gateway's transaction in flight partly copied again)."""


def unlogged_ends(copies: Sequence[tuple[str, str | None]], log: str) -> set[str]:
    """The last transaction of every producer (``jmsbridge.txn`` is ``<producer>-<n>``) that ended without
    a word in the log, the last producer to write left out: a SIGKILLed process's transaction in flight.
    A producer replaced after a failure is named in the log (``transaction <producer>-<n> …``)."""
    last: dict[str, str] = {}
    for _, txn in copies:
        if txn is not None:
            last[txn.rpartition("-")[0]] = txn
    final = next((txn.rpartition("-")[0] for _, txn in reversed(copies) if txn is not None), None)
    return {txn for producer, txn in last.items() if producer != final and f"transaction {producer}-" not in log}


def count_transactions(copies: Sequence[tuple[str, str | None]], log: str,
                       in_flight: str | Collection[str] | None = None) -> TransactionCount:
    """Count ``copies`` ((seq, transaction) in the target's order) by transaction.

    A copy counts as delivered unless its transaction is logged as aborted with at least as many
    copies as the target holds of it (``transaction <id> (<n> copies) aborted``; a transaction is
    logged aborted only when it never asked to commit or its abort succeeded).  ``in_flight`` is
    the transaction a SIGKILLed gateway wrote last (or several, one per kill): its outcome is logged
    nowhere, so it counts as aborted when every one of its records was also copied by a transaction that committed, as
    committed when none was, and a mix is a problem (a transaction commits or aborts whole).
    Never are two copies from committed transactions both accepted: they are a duplicate."""
    logged = {txn: int(n) for txn, n in ABORTED_TRANSACTION.findall(log)}
    seen: Counter[str | None] = Counter(txn for _, txn in copies)
    problems = [f"transaction {txn} logged aborted with {logged[txn]} copies, {seen[txn]} at the target"
                for txn in logged if seen[txn] > logged[txn]]
    aborted = {txn for txn in logged if seen[txn] and seen[txn] <= logged[txn]}
    killed = {in_flight} if isinstance(in_flight, str) else set(in_flight or ())
    for last in sorted(killed - aborted):
        others = {seq for seq, txn in copies if txn not in killed and txn not in aborted}
        own = [seq in others for seq, txn in copies if txn == last]
        if own and all(own):
            aborted.add(last)
        elif any(own):
            problems.append(f"the killed gateway's last transaction {last}: {sum(own)} of its {len(own)} "
                            "records copied again (a transaction commits or aborts whole)")
    delivered: Counter[str] = Counter(seq for seq, txn in copies if txn not in aborted)
    return TransactionCount(delivered, {txn: seen[txn] for txn in sorted(aborted)}, problems)


def recorded_ids(data_dir: Path, bridge: str) -> int | None:
    """How many source ids the bridge's duplicate store (``<data_dir>/bridges.sqlite``) recorded as
    delivered, or None when it has none (read only, after the gateway stopped)."""
    path = data_dir / "bridges.sqlite"
    if not path.exists():
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
                if "bridge" in columns:
                    return int(db.execute(f"SELECT COUNT(*) FROM {table} WHERE bridge = ?", (bridge,)).fetchone()[0])
    except sqlite3.Error:
        return None
    return None


def drain_counting(address: tuple[str, int], destination: str, quiet: float = 1.5, timeout: float = 60.0
                   ) -> Counter[str]:
    """Consume ``destination`` until nothing came for ``quiet`` seconds; seq -> how often."""
    import queue as queues

    counts: Counter[str] = Counter()
    client = Client(address)
    try:
        client.subscribe(destination, f"drain-{uuid.uuid4().hex[:6]}", ack="auto")
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < quiet:
            try:
                frame = client.listener.messages.get(timeout=0.1)
            except queues.Empty:
                continue
            last = time.monotonic()
            counts[message_id_of(frame.body, frame.headers.get("seq"))] += 1
    finally:
        client.disconnect()
    return counts


REPORT_ENV = "FAULT_MATRIX_REPORT"
"""A file each run appends its outcome to (one JSON line), for docs/bridges.md's table."""


def report(case: str, outcome: Outcome) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    line = {"case": case, "confirmed": len(outcome.receipted), "arrived": len(outcome.arrived),
            "left": len(outcome.left), "lost": len(outcome.lost), "duplicated": len(outcome.duplicated),
            "state": outcome.status.get("state"), "aborted_copies": outcome.aborted_copies,
            "recorded": outcome.recorded, "unsettled": outcome.unsettled,
            "transactions": outcome.status.get("transactions")}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def known_gap(source: str, target: str, qos: str, fault: str) -> str | None:
    """Why docs/bridges.md does not promise ONCE_AND_ONLY_ONCE's "no duplicate" for this
    case (it still promises "nothing lost"), or None.  None now: the last gap (ONCE_AND_ONLY_ONCE
    into a JMS broker over STOMP) closed when the connector learnt to browse its target queue."""
    return None


def check(outcome: Outcome, qos: str, fault: str, gap: str | None = None) -> None:
    """The QoS promise, exactly (AssertionError naming what broke it); under a known
    gap, ONCE_AND_ONLY_ONCE's "nothing lost" only."""
    print(outcome.summary())
    if gap is not None:
        assert not outcome.lost, f"lost (acknowledged, never sent) {sorted(outcome.lost)[:10]}: {outcome.summary()}"
        return
    if fault in STOPPING_FAULTS:
        assert outcome.status.get("state") == "failed", f"the bridge must stop at the poison: {outcome.summary()}"
    if qos != "AT_MOST_ONCE":
        assert not outcome.lost, f"lost (acknowledged, never sent) {sorted(outcome.lost)[:10]}: {outcome.summary()}"
    if qos != "DUPLICATES_OK":
        assert not outcome.duplicated, f"duplicated {sorted(outcome.duplicated.items())[:10]}: {outcome.summary()}"
    if "?" in outcome.arrived:
        raise AssertionError(f"a message without seq reached the target: {outcome.summary()}")
    assert not outcome.problems, f"transactions the log does not explain: {outcome.summary()}"
    if fault == "recreate":  # a liveness promise (docs/kafka.md "A deleted topic"): the bridge goes on
        assert not outcome.left, (f"the bridge stopped copying after its source topic was recreated: "
                                  f"{len(outcome.left)} records left at the source: {outcome.summary()}")
    assert not outcome.unsettled, f"the target was read while a transaction was not settled: {outcome.summary()}"



def table(path: str) -> str:
    """docs/bridges.md's result table from a FAULT_MATRIX_REPORT file (the last run of each case)."""
    runs: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            runs[entry["case"]] = entry
    rows = ["| source → target | fault | AT_MOST_ONCE | DUPLICATES_OK | ONCE_AND_ONLY_ONCE |", "|---|---|---|---|---|"]
    for source in SIDES:
        for target in SIDES:
            for fault in FAULTS:
                if applies(source, target, fault) is not None:
                    continue
                cells = []
                for qos in QOS_MODES:
                    entry = runs.get(f"{source}-{target}-{qos}-{fault}")
                    if entry is None:
                        cells.append("not run")
                        continue
                    verdict = f"{entry['confirmed']}: {entry['lost']} lost, {entry['duplicated']} dup"
                    if entry["state"] == "failed":
                        verdict += ", failed"
                    if entry.get("aborted_copies"):
                        verdict += f" ({entry['aborted_copies']} aborted copies)"
                    if known_gap(source, target, qos, fault) is not None:
                        verdict += " (gap)"
                    cells.append(verdict)
                rows.append(f"| {source} → {target} | {fault} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    print(table(sys.argv[1]))
