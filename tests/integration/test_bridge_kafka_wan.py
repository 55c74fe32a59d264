"""ONCE_AND_ONLY_ONCE to Kafka across a link that stalls or slows (no RST), black-box.

The real gateway process bridges to a Tansu broker that is reachable only through
tests/support/tcp_proxy.py (it advertises the proxy), so every request of the
gateway's producers and consumers crosses the faulty link:

* **stall**: the link passes nothing either way for several seconds mid-stream (the
  transaction in flight waits: its produce requests, its offsets, its commit), then
  everything it held arrives, in order;
* **slow**: the link adds 150 ms ± 100 ms each way for a while (every transactional
  round trip slower than the bridge's batch time).

Counted by the producer's ``seq`` in committed records (librdkafka reads ``read_committed``): nothing
confirmed at the source may be missing, nothing may be there twice.  The WAN defect of
issue 32 was the STOMP bridge resending committed batches after a stall; these are its
Kafka counterparts (embedded -> Kafka and Kafka -> Kafka, whose copy carries the
consumer group's offsets in the transaction, and Kafka -> embedded), and DUPLICATES_OK from Kafka across a stall,
which must lose nothing and go on.
"""

from __future__ import annotations

import contextlib
import queue
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.test_bridge_gateway import SQLITE, Producer, Tally
from tests.integration.test_bridge_kafka import bridge_toml, kafka_connector_toml, tally_topic, topic_end
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.kafka import TansuBroker, create_topics, produce, proxied_kafka
from tests.support.stomp_clients import Client
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

__all__ = ["proxied_kafka"]

pytestmark = pytest.mark.kafka

RECOVERY = 240.0
"""Seconds a bridge may take to finish after the fault.  A stall past the group's session expires the member
(its next commit: UNKNOWN_MEMBER_ID); the bridge then subscribes afresh, and on Tansu the new member waited
60 s for partitions once in CI (``got no partitions ... (60.0, 'Deferred')``, then a retry): slow, not lost."""

def fault(proxy: TcpProxy, kind: str) -> None:
    """The link misbehaves for a while, then heals."""
    if kind == "stall":
        proxy.stall("both")
        time.sleep(6.0)
        proxy.flow()
    else:
        proxy.delay(0.15, 0.1)
        time.sleep(6.0)
        proxy.delay(0)


@pytest.mark.parametrize("kind", ["stall", "slow"])
def test_embedded_to_kafka_once_and_only_once_across_a_faulty_link(
        tmp_path: Path, proxied_kafka: tuple[TansuBroker, TcpProxy], kind: str) -> None:
    """Receipted persistent SENDs into the embedded queue while the bridge copies them to Kafka in
    transactions; the link stalls (or slows) mid-stream: every receipted seq once in the topic."""
    broker, proxy = proxied_kafka
    topic = f"wan-{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap, topic)
    config = kafka_connector_toml(broker.bootstrap) + bridge_toml(
        "wan", ("embedded", "/queue/wan"), ("kafka", f"/topic/{topic}"), qos="ONCE_AND_ONLY_ONCE",
        max_batch_size=20, max_batch_time=20, failure_retry_interval=300)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    tally = Tally()
    with stopped_after(gateway):
        producer = Producer(gateway, "/queue/wan", tally, "w", limit=600)
        producer.start()
        wait_until(lambda: producer.count() >= 150, 30, "150 receipted sends")
        wait_until(lambda: topic_end(broker.bootstrap, topic) > 20, 30, "the bridge to start moving")
        before = topic_end(broker.bootstrap, topic)
        fault(proxy, kind)
        print(f"topic offsets when the {kind} began: {before} (of about 600 records)")
        assert before < 600, "the fault came while the bridge was still copying"
        producer.join(RECOVERY)
        assert not producer.is_alive(), "the producer finished"
        tally_topic(broker.bootstrap, topic, tally, expect=len(tally.receipted), settle=3.0)
        print(f"embedded -> kafka across a {kind} link: {tally.summary()}")
        assert len(tally.receipted) == 600
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"


@pytest.mark.parametrize(("qos", "kind"), [("ONCE_AND_ONLY_ONCE", "stall"), ("ONCE_AND_ONLY_ONCE", "slow"),
                                           ("DUPLICATES_OK", "stall")])
def test_kafka_to_kafka_across_a_faulty_link(
        tmp_path: Path, proxied_kafka: tuple[TansuBroker, TcpProxy], qos: str, kind: str) -> None:
    """A topic of 3,000 records copied to another (ONCE_AND_ONLY_ONCE: in transactions that carry the group's
    offsets); the link stalls (or slows) mid-stream: every record in the target (once, but for DUPLICATES_OK),
    and the bridge goes on.  DUPLICATES_OK across a stall found a defect: the stall outlasted the group's
    session (a rebalance) while the source's partitions were paused for the stalled target, and librdkafka
    keeps a reassigned partition paused: the bridge never fetched again (2,200 of 3,000 missing after 90 s)."""
    broker, proxy = proxied_kafka
    source, target = f"wsrc-{uuid.uuid4().hex[:8]}", f"wdst-{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap, source, partitions=2)
    create_topics(broker.bootstrap, target)
    count = 3000
    produce(broker.bootstrap, source, [{"value": f"body {i}".encode(), "key": str(i).encode(),
                                       "headers": [("jms.seq", f"k-{i}".encode())]} for i in range(count)])
    tally = Tally(receipted={f"k-{i}" for i in range(count)})
    config = kafka_connector_toml(broker.bootstrap) + bridge_toml(
        "k2k", ("kafka", f"/queue/{source}"), ("kafka", f"/topic/{target}"), qos=qos,
        max_batch_size=50, max_batch_time=20, failure_retry_interval=300)
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    with stopped_after(gateway):
        wait_until(lambda: topic_end(broker.bootstrap, target) > 100, 30, "the bridge to start moving")
        before = topic_end(broker.bootstrap, target)
        fault(proxy, kind)
        after = topic_end(broker.bootstrap, target)
        print(f"target offsets before and after the {kind}: {before}, {after} (of about {count} records)")
        assert after < count, "the fault came while the bridge was still copying"
        deadline = time.monotonic() + RECOVERY
        while True:
            tally.arrivals.clear()
            tally_topic(broker.bootstrap, target, tally, expect=count, settle=0.5)
            if not tally.lost or time.monotonic() > deadline:
                break
        print(f"kafka -> kafka {qos} across a {kind} link: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        if qos == "ONCE_AND_ONLY_ONCE":
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"


@pytest.mark.parametrize("qos", ["ONCE_AND_ONLY_ONCE", "DUPLICATES_OK"])
def test_kafka_to_embedded_across_a_stalled_link(
        tmp_path: Path, proxied_kafka: tuple[TansuBroker, TcpProxy], qos: str) -> None:
    """3,000 records copied from a topic into an embedded queue; the link to Kafka stalls mid-stream (the
    consumer's fetches and offset commits wait, the group's session runs out): every record arrives (once for
    ONCE_AND_ONLY_ONCE, whose acknowledgements wait for the stored copies)."""
    broker, proxy = proxied_kafka
    source = f"wsrc-{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap, source, partitions=2)
    count = 3000
    produce(broker.bootstrap, source, [{"value": f"body {i}".encode(), "key": str(i).encode(),
                                       "headers": [("jms.seq", f"k-{i}".encode())]} for i in range(count)])
    tally = Tally(receipted={f"k-{i}" for i in range(count)})
    config = kafka_connector_toml(broker.bootstrap) + bridge_toml(
        "k2e", ("kafka", f"/queue/{source}"), ("embedded", "/queue/k2e"), qos=qos, max_batch_size=50,
        max_batch_time=20, failure_retry_interval=300)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    with stopped_after(gateway):
        consumer = Client(gateway.address)
        try:
            consumer.subscribe("/queue/k2e", "drain", ack="auto")

            def take(until: float, stop_when_all: bool = False) -> None:
                while time.monotonic() < until and not (stop_when_all and not tally.lost):
                    with contextlib.suppress(queue.Empty):
                        frame = consumer.listener.messages.get(timeout=0.2)
                        tally.arrived(frame.headers["seq"], frame.headers["message-id"])

            frame = consumer.listener.messages.get(timeout=30)
            tally.arrived(frame.headers["seq"], frame.headers["message-id"])
            proxy.stall("both")
            take(time.monotonic() + 6.0)  # what was copied before the stall
            during = len(tally.arrivals)
            proxy.flow()
            print(f"copied when the stall ended: {during} of {count}")
            assert during < count, "the stall came while the bridge was still copying"
            take(time.monotonic() + RECOVERY, stop_when_all=True)
            take(time.monotonic() + 2.0)  # anything more (a copy twice) comes now
        finally:
            consumer.disconnect()
        print(f"kafka -> embedded {qos} across a stall: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        if qos == "ONCE_AND_ONLY_ONCE":
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"
