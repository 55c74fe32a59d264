"""Bridges between the embedded broker and Kafka (Tansu) inside the real gateway
process, with fault injection: the gateway SIGKILLed mid-stream (twice) and the
Kafka connection cut through a TCP proxy.  The checker counts by the producer's
``seq``: lost = confirmed at the source and missing at the target; duplicated =
present at the target under two message ids (Kafka: two records)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_bridge_gateway import SQLITE, Producer, Tally, drain
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.kafka import (
    TansuBroker,
    create_topics,
    group_settings,
    kafka_bootstrap,
    produce,
    proxied_kafka,
    read_records,
)
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

__all__ = ["kafka_bootstrap", "proxied_kafka"]

pytestmark = pytest.mark.kafka


def kafka_connector_toml(bootstrap: str, name: str = "kafka") -> str:
    consumer = ", ".join(f'"{key}" = {value}' for key, value in group_settings().items())
    return (f"[connectors.{name}]\nuri = \"kafka://{bootstrap}\"\n"
            f"consumer = {{ {consumer} }}\n")


def bridge_toml(name: str, source: tuple[str, str], target: tuple[str, str], **params: object) -> str:
    lines = ["[[bridges]]", f'name = "{name}"',
             f'source = {{ connector = "{source[0]}", destination = "{source[1]}" }}',
             f'target = {{ connector = "{target[0]}", destination = "{target[1]}" }}']
    for key, value in params.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        else:
            lines.append(f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}")
    return "\n".join(lines) + "\n"


def header(record: Any, name: str) -> str | None:
    for key, value in record.headers() or ():
        if key == name and value is not None:
            return str(value.decode("utf-8"))
    return None


def topic_end(bootstrap: str, topic: str) -> int:
    """The sum of the high watermarks of ``topic`` (records plus transaction markers)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w-{uuid.uuid4().hex[:6]}"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def tally_topic(bootstrap: str, topic: str, tally: Tally, *, expect: int, settle: float = 1.0) -> None:
    """Every record of ``topic``: seq -> message ids (a record without an id counts by its offset)."""
    for record in read_records(bootstrap, topic, expect, timeout=30, settle=settle):
        seq = header(record, "jms.seq")
        assert seq is not None, "a bridged record carries the seq property"
        tally.arrived(seq, header(record, "jms.MessageId") or f"{record.partition()}:{record.offset()}")


def embedded_to_kafka_run(tmp_path: Path, bootstrap: str, qos: str, batch: int) -> tuple[Tally, str]:
    topic = f"bridge-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, topic)
    config = kafka_connector_toml(bootstrap) + bridge_toml(
        "e2k", ("embedded", "/queue/e2k"), ("kafka", f"/topic/{topic}"), qos=qos, max_batch_size=batch,
        max_batch_time=20, failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    tally = Tally()
    with stopped_after(gateway):
        producer = Producer(gateway, "/queue/e2k", tally, "p1", limit=600)
        producer.start()
        wait_until(lambda: producer.count() >= 300, 60, "300 receipted sends")
        gateway.kill()
        producer.halt.set()
        producer.join(10)
        gateway.start()
        Producer(gateway, "/queue/e2k", tally, "p2", limit=300).run()
        time.sleep(0.1)
        gateway.kill()
        gateway.start()
        time.sleep(3)  # the bridge works off its backlog
        tally_topic(bootstrap, topic, tally, expect=len(tally.receipted), settle=2.0)
    return tally, topic


@pytest.mark.parametrize(("qos", "batch"), [("AT_MOST_ONCE", 100), ("DUPLICATES_OK", 1), ("DUPLICATES_OK", 100),
                                            ("ONCE_AND_ONLY_ONCE", 1), ("ONCE_AND_ONLY_ONCE", 100)])
def test_embedded_to_kafka_across_gateway_crashes(tmp_path: Path, kafka_bootstrap: str, qos: str,
                                                  batch: int) -> None:
    tally, _ = embedded_to_kafka_run(tmp_path, kafka_bootstrap, qos, batch)
    print(f"embedded -> kafka {qos} batch {batch}: {tally.summary()}")
    if qos == "AT_MOST_ONCE":  # may lose (counted above), never duplicates
        assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]}"
        return
    assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
    if qos == "ONCE_AND_ONLY_ONCE":
        assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"


def kafka_to_embedded_run(tmp_path: Path, bootstrap: str, qos: str, batch: int, count: int = 1500,
                          ) -> tuple[Tally, GatewayProcess]:
    topic = f"bridge-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, topic, partitions=2)
    tally = Tally()
    records = [{"value": f"body {i}".encode(), "key": str(i).encode(), "headers": [("jms.seq", f"k-{i}".encode())]}
               for i in range(count)]
    produce(bootstrap, topic, records)
    tally.receipted.update(f"k-{i}" for i in range(count))
    config = kafka_connector_toml(bootstrap) + bridge_toml(
        "k2e", ("kafka", f"/queue/{topic}"), ("embedded", "/queue/k2e"), qos=qos, max_batch_size=batch,
        max_batch_time=20, failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    try:
        time.sleep(1.5)  # group join and the first batches
        gateway.kill()
        gateway.start()
        time.sleep(1.5)
        gateway.kill()
        gateway.start()
        drain(gateway, "/queue/k2e", tally, tally.receipted)
    except BaseException:
        print(gateway.log()[-4000:])
        gateway.stop()
        raise
    return tally, gateway


@pytest.mark.parametrize(("qos", "batch"), [("DUPLICATES_OK", 1), ("DUPLICATES_OK", 100), ("ONCE_AND_ONLY_ONCE", 1),
                                            ("ONCE_AND_ONLY_ONCE", 100)])
def test_kafka_to_embedded_across_gateway_crashes(tmp_path: Path, kafka_bootstrap: str, qos: str,
                                                  batch: int) -> None:
    tally, gateway = kafka_to_embedded_run(tmp_path, kafka_bootstrap, qos, batch)
    try:
        print(f"kafka -> embedded {qos} batch {batch}: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        if qos == "ONCE_AND_ONLY_ONCE":
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"
    finally:
        gateway.stop()


@pytest.mark.parametrize("qos", ["DUPLICATES_OK", "ONCE_AND_ONLY_ONCE"])
def test_embedded_to_kafka_survives_a_cut_connection(tmp_path: Path, proxied_kafka: tuple[TansuBroker, TcpProxy],
                                                     qos: str) -> None:
    broker, proxy = proxied_kafka
    topic = f"bridge-{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap, topic)
    config = kafka_connector_toml(broker.bootstrap) + bridge_toml(
        "cut", ("embedded", "/queue/cut"), ("kafka", f"/topic/{topic}"), qos=qos, max_batch_size=10,
        max_batch_time=20, failure_retry_interval=300)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    tally = Tally()
    with stopped_after(gateway):
        producer = Producer(gateway, "/queue/cut", tally, "c", limit=400)
        producer.start()
        wait_until(lambda: producer.count() >= 100, 30, "100 receipted sends")
        proxy.cut()
        time.sleep(2.0)  # sends fail or time out; the bridge retries
        restored = threading.Timer(0.0, proxy.restore)
        restored.start()
        producer.join(60)
        tally_topic(broker.bootstrap, topic, tally, expect=len(tally.receipted), settle=3.0)
        print(f"embedded -> kafka {qos} with a cut: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        if qos == "ONCE_AND_ONLY_ONCE":
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]}"
        assert proxy.connections > 1, "the gateway reconnected through the proxy"


@pytest.mark.parametrize(("qos", "batch"), [("ONCE_AND_ONLY_ONCE", 1), ("ONCE_AND_ONLY_ONCE", 100),
                                            ("DUPLICATES_OK", 100)])
def test_kafka_to_kafka_across_gateway_crashes(tmp_path: Path, kafka_bootstrap: str, qos: str, batch: int) -> None:
    """ONCE_AND_ONLY_ONCE goes through Kafka transactions carrying the consumer offsets."""
    source, target = f"k2k-src-{uuid.uuid4().hex[:8]}", f"k2k-dst-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, source, partitions=2)
    create_topics(kafka_bootstrap, target)
    count = 1500 if batch == 1 else 20000  # enough that the kills land mid-stream
    produce(kafka_bootstrap, source, [{"value": f"body {i}".encode(), "key": str(i).encode(),
                                      "headers": [("jms.seq", f"k-{i}".encode())]} for i in range(count)])
    tally = Tally(receipted={f"k-{i}" for i in range(count)})
    config = kafka_connector_toml(kafka_bootstrap) + bridge_toml(
        "k2k", ("kafka", f"/queue/{source}"), ("kafka", f"/topic/{target}"), qos=qos, max_batch_size=batch,
        max_batch_time=20, failure_retry_interval=200, add_message_id_in_header=True)
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    try:
        wait_until(lambda: topic_end(kafka_bootstrap, target) > 50, 30, "the bridge to start moving")
        gateway.kill()
        first = topic_end(kafka_bootstrap, target)
        gateway.start()
        time.sleep(0.5)
        gateway.kill()
        second = topic_end(kafka_bootstrap, target)
        print(f"target offsets at the kills: {first}, {second} (of about {count} records)")
        gateway.start()
        deadline = time.monotonic() + 60
        while True:
            tally.arrivals.clear()
            tally_topic(kafka_bootstrap, target, tally, expect=count, settle=0.5)
            if not tally.lost or time.monotonic() > deadline:
                break
        print(f"kafka -> kafka {qos} batch {batch}: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        if qos == "ONCE_AND_ONLY_ONCE":
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"
            records = read_records(kafka_bootstrap, target, 1, timeout=10)
            assert header(records[0], "jms.AMQ_BRIDGE_MSG_ID_LIST", ).startswith("ID:kafka:")  # type: ignore[union-attr]
    except BaseException:
        print(gateway.log()[-6000:])
        raise
    finally:
        gateway.stop()
