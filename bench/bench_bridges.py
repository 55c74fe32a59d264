"""Issue 8 benchmark: bridge throughput embedded -> Kafka and ActiveMQ -> Kafka,
per QoS mode and batch size (1, 100), against Kafka's direct-produce rate.

Everything runs in this process on one reactor (in a thread): the embedded
broker (memory), the Kafka connector (Tansu, transactional for batches),
the STOMP broker connector (ActiveMQ, non-persistent store so the broker
is not the bottleneck), and one :class:`~gateway.bridges.bridge.Bridge` at a
time over a backlog of ``COUNT`` messages of 100 bytes.  The reference is
the Kafka connector's own rate: ``send`` one message at a time, each
waiting for its delivery report (``acks=all``), as a bridge with batch 1
sends (the pipelined rate, every send outstanding at once, is printed too);
and ``send_batch`` of 100 (one transaction) as a bridge with batch 100.

Run: ``.venv/bin/python -m bench.bench_bridges [COUNT]``
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, DeferredList

from bench.common import activemq_server, report
from bench.reactor_thread import reactor, run_in_reactor
from gateway.bridges.bridge import Bridge
from gateway.bridges.config import parse_bridge
from gateway.bridges.dedup import DuplicateStore
from gateway.broker.broker import EmbeddedBroker
from gateway.connectors.kafka import KafkaConnector, KafkaSettings
from gateway.connectors.stomp_broker import StompBrokerConnector
from gateway.message.model import TextMessage
from tests.support.kafka import TansuBroker, create_topics, group_settings
from tests.support.stomp_clients import Client

BODY = "x" * 100


def wait(condition: Any, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step did not finish")
        time.sleep(0.005)


def direct_rate(kafka: KafkaConnector, bootstrap: str, count: int, batch: int, *, serial: bool = False) -> float:
    topic = f"bench-direct-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, topic)
    messages = [TextMessage(destination=f"/topic/{topic}", message_id=f"ID:d-{i}", text=BODY, persistent=True)
                for i in range(count)]

    def produce() -> Deferred[Any]:
        if batch == 1 and not serial:
            return DeferredList([kafka.send(m) for m in messages], fireOnOneErrback=True)
        chunks = [messages[i:i + batch] for i in range(0, count, batch)]
        d: Deferred[Any] = Deferred()
        d.callback(None)
        for chunk in chunks:
            if batch == 1:
                d.addCallback(lambda _, m=chunk[0]: kafka.send(m))
            else:
                d.addCallback(lambda _, c=chunk: kafka.send_batch(c))
        return d

    started = time.perf_counter()
    run_in_reactor(produce)
    return count / (time.perf_counter() - started)


def fill_embedded(broker: EmbeddedBroker, destination: str, count: int) -> None:
    def fill() -> None:
        for _ in range(count):
            broker.send(TextMessage(destination=destination, message_id=f"ID:e-{uuid.uuid4().hex}", text=BODY,
                                    persistent=True))

    run_in_reactor(fill)


def fill_activemq(port: int, destination: str, count: int) -> None:
    client = Client(("127.0.0.1", port), text=True)
    try:
        for i in range(count):
            headers = {"persistent": "true"}
            if i == count - 1:
                client.send(destination, BODY, receipt=True, timeout=60, **headers)
            else:
                client.connection.send(destination, BODY, headers=headers)
    finally:
        client.disconnect()


def bridge_rate(source: Any, source_name: str, destination: str, kafka: KafkaConnector, bootstrap: str,
                count: int, qos: str, batch: int, workdir: Path) -> float:
    topic = f"bench-bridge-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, topic)
    config = parse_bridge({
        "name": f"bench-{uuid.uuid4().hex[:6]}",
        "source": {"connector": source_name, "destination": destination},
        "target": {"connector": "kafka", "destination": f"/topic/{topic}"},
        "qos": qos, "max_batch_size": batch, "max_batch_time": 20,
    }, 0, "", {source_name, "kafka"})
    dedup = None
    if qos == "ONCE_AND_ONLY_ONCE":
        dedup = DuplicateStore(str(workdir / f"{config.name}.sqlite"), reactor)
        dedup.register(config.name, config.duplicate_window)
        run_in_reactor(dedup.open)
    bridge = Bridge(config, source, kafka, clock=reactor, dedup=dedup, metrics=None)
    started = time.perf_counter()
    run_in_reactor(bridge.start)
    wait(lambda: bridge.forwarded >= count)
    elapsed = time.perf_counter() - started
    run_in_reactor(bridge.stop)
    if dedup is not None:
        run_in_reactor(dedup.close)
    return count / elapsed


def main(count: int = 2000) -> None:
    rows: list[tuple[str, float]] = []
    with TansuBroker() as tansu, activemq_server() as amq, tempfile.TemporaryDirectory() as tmp:
        bootstrap = tansu.bootstrap
        settings = KafkaSettings(bootstrap=bootstrap, transactional_id=f"bench-{uuid.uuid4().hex[:6]}",
                                 consumer=group_settings())
        kafka = KafkaConnector(reactor, settings, name="kafka")
        embedded = EmbeddedBroker(reactor, registry=CollectorRegistry())
        amq_connector = StompBrokerConnector.from_config("amq", {"uri": amq.stomp_uri}, reactor=reactor,
                                                         registry=CollectorRegistry())
        run_in_reactor(kafka.start)
        run_in_reactor(embedded.start)
        run_in_reactor(amq_connector.start)
        direct_rate(kafka, bootstrap, min(count, 500), 1)  # warm-up, idempotent producer
        direct_rate(kafka, bootstrap, 200, 100)  # warm-up, transactional producer (init_transactions)
        rows.append(("kafka direct produce, pipelined, batch 1", direct_rate(kafka, bootstrap, count, 1)))
        rows.append(("kafka direct produce, one at a time, batch 1",
                     direct_rate(kafka, bootstrap, count, 1, serial=True)))
        rows.append(("kafka direct produce, send_batch, batch 100", direct_rate(kafka, bootstrap, count, 100)))
        for qos in ("AT_MOST_ONCE", "DUPLICATES_OK", "ONCE_AND_ONLY_ONCE"):
            for batch in (1, 100):
                queue = f"/queue/bench.{uuid.uuid4().hex[:8]}"
                fill_embedded(embedded, queue, count)
                rate = bridge_rate(embedded, "embedded", queue, kafka, bootstrap, count, qos, batch, Path(tmp))
                rows.append((f"embedded -> kafka {qos} batch {batch}", rate))
                queue = f"/queue/bench.{uuid.uuid4().hex[:8]}"
                fill_activemq(amq.stomp_port, queue, count)
                rate = bridge_rate(amq_connector, "amq", queue, kafka, bootstrap, count, qos, batch, Path(tmp))
                rows.append((f"activemq -> kafka {qos} batch {batch}", rate))
        run_in_reactor(amq_connector.stop)
        run_in_reactor(kafka.stop)
    references = {1: "kafka direct produce, one at a time, batch 1", 100: "kafka direct produce, send_batch, batch 100"}
    for batch in (1, 100):
        report(f"Bridge throughput, {count} x 100 B persistent, batch {batch} (ratio: vs direct produce)",
               [(name, rate) for name, rate in rows if name.endswith(f"batch {batch}")],
               references[batch])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
