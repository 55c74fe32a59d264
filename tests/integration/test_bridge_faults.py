"""The bridge fault matrix (issue 25): source x target (embedded, ActiveMQ over STOMP,
Kafka, ActiveMQ over OpenWire through the JMS-API connector) x QoS x fault, each run
bridging hundreds of messages through the real gateway process and counting exactly
(tests/integration/bridge_fault_run.py says how).

The whole matrix is a long run: ``pytest -m fault_matrix tests/integration/test_bridge_faults.py``
(deselected by default).  A sample, one case per fault, runs with the normal suite.
Cases a fault does not apply to are not generated (``applies`` says why).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bridge_fault_run import (
    FAULTS,
    QOS_MODES,
    SIDES,
    Brokers,
    FaultRun,
    applies,
    check,
    known_gap,
    report,
    struck_side,
)
from tests.support.activemq import ActiveMQBroker, activemq, fresh_activemq
from tests.support.kafka import kafka_bootstrap, proxied_kafka

__all__ = ["activemq", "fresh_activemq", "kafka_bootstrap", "proxied_kafka"]

SAMPLE = {
    ("embedded", "kafka", "ONCE_AND_ONLY_ONCE", "kill"),
    ("amq", "embedded", "AT_MOST_ONCE", "cut-source"),
    ("amq", "embedded", "ONCE_AND_ONLY_ONCE", "cut-source"),
    ("embedded", "kafka", "ONCE_AND_ONLY_ONCE", "refused"),
    ("kafka", "embedded", "DUPLICATES_OK", "transformer-reject"),
    ("kafka", "kafka", "DUPLICATES_OK", "routed"),
    ("kafka", "embedded", "ONCE_AND_ONLY_ONCE", "recreate"),
    ("kafka", "embedded", "ONCE_AND_ONLY_ONCE", "rebalance"),
    ("kafka", "amq", "ONCE_AND_ONLY_ONCE", "cut-target"),
    ("jms", "embedded", "ONCE_AND_ONLY_ONCE", "cut-source"),
    ("embedded", "jms", "ONCE_AND_ONLY_ONCE", "kill"),
    ("amq", "amq", "ONCE_AND_ONLY_ONCE", "stall"),
    ("embedded", "amq", "ONCE_AND_ONLY_ONCE", "slow"),
    ("kafka", "kafka", "ONCE_AND_ONLY_ONCE", "stall"),
}
"""The cases of the normal suite: one per fault that issue 25 found broken, the crash, a lost
confirmation of a JMS broker over STOMP (resolved by browsing the target queue), and issue 32's
WAN cells: ActiveMQ -> ActiveMQ through a stalled link and embedded -> ActiveMQ through a slow one
(ONCE_AND_ONLY_ONCE resent committed batches), Kafka -> Kafka's transactions through a stalled
Tansu (counted by read_uncommitted and the commit log)."""


def cases() -> Iterator[object]:
    for source in SIDES:
        for target in SIDES:
            for qos in QOS_MODES:
                for fault in FAULTS:
                    if applies(source, target, fault) is not None:
                        continue
                    marks = [] if (source, target, qos, fault) in SAMPLE else [pytest.mark.fault_matrix]
                    if {source, target} & {"amq", "jms"}:
                        marks.append(pytest.mark.activemq)
                    if "kafka" in (source, target):
                        marks.append(pytest.mark.kafka)
                    yield pytest.param(source, target, qos, fault, marks=marks,
                                       id=f"{source}-{target}-{qos}-{fault}")


@pytest.fixture
def brokers(request: pytest.FixtureRequest) -> Brokers:
    """The brokers a case needs, from the existing fixtures (ActiveMQ of its own to restart,
    a proxied Tansu of its own to cut)."""
    source, target, fault = (request.node.callspec.params[key] for key in ("source", "target", "fault"))
    found = Brokers()
    if {source, target} & {"amq", "jms"}:
        fixture = "fresh_activemq" if fault == "broker-restart" else "activemq"
        broker: ActiveMQBroker = request.getfixturevalue(fixture)
        found.activemq = broker
    if "kafka" in (source, target):
        role = struck_side(source, target, fault)
        if role is not None and {"src": source, "dst": target}[role] == "kafka":
            found.proxied_kafka = request.getfixturevalue("proxied_kafka")
        else:
            found.kafka = request.getfixturevalue("kafka_bootstrap")
    return found


@pytest.mark.parametrize(("source", "target", "qos", "fault"), list(cases()))
def test_bridge_keeps_its_promise(tmp_path: Path, brokers: Brokers, source: str, target: str, qos: str,
                                  fault: str) -> None:
    run = FaultRun(tmp_path, source, target, qos, fault, brokers, batch=100 if qos == "ONCE_AND_ONLY_ONCE" else 10)
    outcome = run.run()
    report(f"{source}-{target}-{qos}-{fault}", outcome)
    check(outcome, qos, fault, known_gap(source, target, qos, fault))


# -- single defects of issue 25 that the matrix does not pin down ---------------------------------


@pytest.mark.kafka
def test_kafka_transactions_rewind_a_partitions_first_batch(tmp_path: Path, kafka_bootstrap: str) -> None:
    """Kafka -> Kafka ONCE_AND_ONLY_ONCE: the first transaction of a partition fails (a
    record over message.max.bytes) while the group has no committed offset yet.  The bridge
    fails at once, commits nothing, and a later record is not bridged alone past the batch."""
    from tests.integration.test_bridge_kafka import bridge_toml, kafka_connector_toml
    from tests.support.gateway import GatewayProcess
    from tests.support.kafka import committed_offsets, create_topics, read_records, unique_topic

    source, target = unique_topic("eos-src"), unique_topic("eos-dst")
    create_topics(kafka_bootstrap, source, target)

    def produce(*values: bytes) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 3_000_000})
        for value in values:
            producer.produce(source, value=value)
        assert producer.flush(15) == 0

    produce(b"small 0", b"x" * 1_020_000, b"small 2")
    config = kafka_connector_toml(kafka_bootstrap) + bridge_toml(
        "eos", ("kafka", f"/queue/{source}"), ("kafka", f"/topic/{target}"), qos="ONCE_AND_ONLY_ONCE",
        # A batch time long enough that the three records make one batch however slowly the 1 MB
        # record is fetched (with 200 ms, consume() could return "small 0" alone on a loaded
        # host: that batch committed).
        max_batch_size=10, max_batch_time=5000, failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    try:
        gateway.wait_for_log("kafka transaction failed", timeout=30)
        produce(b"small 3")
        time.sleep(3.0)
        assert "bridge eos FAILED" in gateway.log(), gateway.log()[-3000:]
        bridged = [record.value()[:20] for record in read_records(kafka_bootstrap, target, 1, timeout=3)]
        assert bridged == [], "nothing of the batch, nothing after it"
        assert committed_offsets(kafka_bootstrap, "jmsgateway.bridge.eos", source) == [-1001], "no commit"
    finally:
        gateway.stop()


@pytest.mark.kafka
def test_the_in_doubt_check_runs_before_the_listeners_open(tmp_path: Path, kafka_bootstrap: str) -> None:
    """A copy the target holds but the duplicate store does not know is found and recorded
    before any STOMP client can connect (docs/bridges.md)."""
    from tests.integration.test_bridge_kafka import bridge_toml, kafka_connector_toml
    from tests.support.gateway import GatewayProcess
    from tests.support.kafka import create_topics, produce, unique_topic

    topic = unique_topic("doubt")
    create_topics(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [{"value": b"copy", "headers": [("jms.MessageId", b"ID:bridge-doubt:ID:src-1")]}])
    config = kafka_connector_toml(kafka_bootstrap) + bridge_toml(
        "doubt", ("embedded", "/queue/doubt"), ("kafka", f"/topic/{topic}"), qos="ONCE_AND_ONLY_ONCE")
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    try:
        log = gateway.wait_for_log("jmsgateway listening for STOMP")
        recorded = log.find("not yet recorded as delivered; recording them")
        assert recorded != -1, log[-3000:]
        assert recorded < log.find("jmsgateway listening for STOMP"), log[-3000:]
    finally:
        gateway.stop()
