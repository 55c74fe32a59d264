"""Routing to a real Kafka-protocol broker: routes, keys, dead letters, hard stops,
and the connection cut mid-stream by a fault-injecting proxy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from prometheus_client import CollectorRegistry
from twisted.python.failure import Failure

from gateway.connectors.kafka import KafkaConnector
from gateway.connectors.kafka_settings import KafkaSettings
from gateway.message.model import MapMessage, TextMessage, new_message_id
from gateway.routing.config import parse_routing_config
from gateway.routing.service import KafkaRouter, NotRouted, RouteStopped, RoutingResult
from tests.support.kafka import (
    TansuBroker,
    create_topics,
    kafka_bootstrap,
    proxied_kafka,
    read_records,
    unique_topic,
)
from tests.support.reactor_waits import reactor, sleep, wait_for
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap", "proxied_kafka"]


def kafka_connector(bootstrap: str, **producer: Any) -> KafkaConnector:
    """A Kafka connector on the test reactor, not started yet."""
    settings = KafkaSettings.from_options({"uri": f"kafka://{bootstrap}", "producer": producer})
    return KafkaConnector(reactor, settings, name="kafka", gateway_id="gw-route")


@pytest.fixture
def topics(kafka_bootstrap: str) -> dict[str, str]:
    names = {"orders": unique_topic("orders"), "audit": unique_topic("audit"), "dlq": unique_topic("dlq")}
    create_topics(kafka_bootstrap, *names.values())
    return names


@pytest.fixture
def router(kafka_bootstrap: str, topics: dict[str, str]) -> Iterator[KafkaRouter]:
    properties = f"""
routing.dead-letter.topic={topics['dlq']}
routes.orders.in.include=msg.address==orders
routes.orders.out.topic={topics['orders']}
routes.orders.conv.key=msg.header.CorrelationId
routes.orders.on-soft-failure=dead-letter
routes.audit.in.include=kind = 'audit'
routes.audit.out.topic={topics['audit']}
routes.missing.in.include=msg.address==missing
routes.missing.out.topic=no-such-topic-{topics['dlq']}
"""
    config = parse_routing_config({"properties": properties})
    connector = kafka_connector(kafka_bootstrap)
    wait_for(connector.start)
    routing = KafkaRouter(config, connector, origin="gw-route", clock=reactor, registry=CollectorRegistry())
    yield routing
    wait_for(connector.stop)


def message(destination: str, body: str, correlation: str | None = None, **properties: Any) -> TextMessage:
    return TextMessage(destination=destination, message_id=new_message_id(), correlation_id=correlation, text=body,
                       properties=properties)


@pytest_twisted.ensureDeferred
async def test_routes_keys_and_dead_letters(router: KafkaRouter, kafka_bootstrap: str, topics: dict[str, str]) -> None:
    routed = await router.send(message("/queue/orders", "o1", correlation="cust42"))
    assert routed.outcome == "routed" and routed.topic == topics["orders"]
    audit = await router.send(message("/topic/anything", "a1", kind="audit"))
    assert audit.topic == topics["audit"]
    bad = MapMessage(destination="/queue/orders", message_id="ID:map-1", correlation_id="c", map={"n": 1})
    assert (await router.send(bad)).outcome == "dead-lettered"
    nokey = message("/queue/orders", "no key")
    assert (await router.send(nokey)).outcome == "dead-lettered"

    (order,) = read_records(kafka_bootstrap, topics["orders"], 1, settle=0.5)
    assert order.key() == b"cust42" and order.value() == b"o1"
    headers = dict(order.headers())
    assert headers["jms.CorrelationId"] == b"cust42" and headers["jmsbridge.origin"] == b"gw-route"
    (audited,) = read_records(kafka_bootstrap, topics["audit"], 1, settle=0.5)
    assert dict(audited.headers())["jms.kind"] == b"audit"
    dead = read_records(kafka_bootstrap, topics["dlq"], 2, settle=0.5)
    assert [r.key() for r in dead] == [b"ID:map-1", nokey.message_id.encode()]
    assert dead[0].value() == b'{"n": 1}'
    reasons = [dict(r.headers())["jmsbridge.error"] for r in dead]
    assert reasons[0].startswith(b"unsupported-type") and reasons[1].startswith(b"no-key")
    assert router.metrics.registry.get_sample_value(
        "jmsgateway_routing_success_total", {"route": "orders"}) == 1
    assert router.metrics.average_latency("orders") > 0


@pytest_twisted.ensureDeferred
async def test_own_messages_are_not_routed_back(router: KafkaRouter) -> None:
    """route() answers "cycle"; send() and send_batch() (bridges, transactions) fail with
    NotRouted, so whoever asked does not take the message for delivered (issue 25)."""
    looped = message("/queue/orders", "loop", correlation="c1", **{"jmsbridge.origin": "gw-route"})
    routed = router.route(looped).result
    assert isinstance(routed, RoutingResult) and routed.outcome == "cycle"
    with pytest.raises(NotRouted):
        await router.send(looped)
    with pytest.raises(NotRouted):
        await router.send_batch([message("/queue/orders", "ok", correlation="c2"), looped])


@pytest_twisted.ensureDeferred
async def test_unknown_topic_stops_routing(router: KafkaRouter) -> None:
    with pytest.raises(Exception) as info:
        await router.send(message("/queue/missing", "x"))
    assert "UNKNOWN_TOPIC" in str(info.value) or "does not exist" in str(info.value)
    assert router.stopped is not None
    with pytest.raises(RouteStopped):
        await router.send(message("/queue/orders", "x", correlation="k"))


@pytest.mark.parametrize(
    ("message_timeout_ms", "outage", "expect"),
    [(6000, 0.0, "delayed"), (1500, 2.5, "errors")],
    ids=["short-cut-delays-receipts", "long-cut-gives-errors"],
)
@pytest_twisted.ensureDeferred
async def test_connection_cut_mid_stream_loses_no_receipted_message(
    proxied_kafka: tuple[TansuBroker, TcpProxy], message_timeout_ms: int, outage: float, expect: str
) -> None:
    broker, proxy = proxied_kafka
    topic = unique_topic("cut")
    create_topics(broker.bootstrap, topic)
    connector = kafka_connector(
        broker.bootstrap,
        **{"message.timeout.ms": message_timeout_ms, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300,
           "retry.backoff.ms": 50, "socket.connection.setup.timeout.ms": 1000},
    )
    await connector.start()
    outcomes: dict[str, tuple[str, float]] = {}
    sent_at: dict[str, float] = {}
    order: list[str] = []

    def send(msg: TextMessage) -> None:
        def done(result: Any) -> None:
            outcomes[msg.message_id] = ("error" if isinstance(result, Failure) else "ok", time.monotonic())

        sent_at[msg.message_id] = time.monotonic()
        order.append(msg.message_id)
        connector.send(msg).addBoth(done)

    total, cut_at, restore_at = 120, 40, 80
    try:
        for index in range(total):
            if index == cut_at:
                proxy.cut()
            if index == restore_at:
                await sleep(outage)
                proxy.restore()
            send(message(f"/topic/{topic}", f"m{index}"))
            await sleep(0.02)
        deadline = time.monotonic() + 30
        while len(outcomes) < total and time.monotonic() < deadline:
            await sleep(0.1)
        final = dict(outcomes)
        assert len(final) == total, f"{total - len(final)} sends never answered (silence)"
        receipted = {mid for mid, (kind, _) in final.items() if kind == "ok"}
        records = read_records(broker.bootstrap, topic, len(receipted), timeout=30, settle=1.0)
        stored = [dict(r.headers())["jms.MessageId"].decode() for r in records]
        assert receipted <= set(stored), f"receipted but lost: {sorted(receipted - set(stored))[:5]}"
        assert len(stored) == len(set(stored)), "the idempotent producer wrote duplicates"
        during_cut = order[cut_at:restore_at]
        failed = [mid for mid in during_cut if final[mid][0] == "error"]
        delayed = [mid for mid in during_cut if final[mid][0] == "ok" and final[mid][1] - sent_at[mid] > 0.3]
        assert failed or delayed, "sends during the cut were neither delayed nor failed: the proxy did not cut"
        if expect == "errors":
            assert failed, "a cut longer than message.timeout.ms must fail sends (ERROR frames)"
        else:
            assert not failed and delayed
        assert all(final[mid][0] == "ok" for mid in order[-10:]), "sends after the restore must succeed"
    finally:
        await connector.stop()


@pytest_twisted.ensureDeferred
async def test_stop_delivers_what_it_can_and_fails_the_rest(
    proxied_kafka: tuple[TansuBroker, TcpProxy], monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() polls the producer from the reactor until its records are reported; what Kafka cannot take
    within the stop timeout is purged and its senders get an error - nobody waits forever."""
    import gateway.connectors.kafka as kafka_module

    monkeypatch.setattr(kafka_module, "STOP_TIMEOUT", 1.5)
    broker, proxy = proxied_kafka
    topic = unique_topic("stop")
    create_topics(broker.bootstrap, topic)
    connector = kafka_connector(broker.bootstrap, **{"message.timeout.ms": 60000})
    await connector.start()
    outcomes: list[str] = []

    def send_all(count: int) -> None:
        for index in range(count):
            d = connector.send(message(f"/topic/{topic}", f"m{index}"))
            d.addCallbacks(lambda _: outcomes.append("ok"), lambda f: outcomes.append(type(f.value).__name__))

    send_all(5)
    deadline = time.monotonic() + 20
    while len(outcomes) < 5 and time.monotonic() < deadline:
        await sleep(0.05)
    assert outcomes == ["ok"] * 5  # delivered while the path is up
    proxy.cut()
    send_all(5)
    started = time.monotonic()
    await connector.stop()
    took = time.monotonic() - started
    assert 1.0 < took < 10, f"stop took {took:.1f}s"
    assert len(outcomes) == 10, f"{10 - len(outcomes)} sends never answered"
    # purged before sending: "connector is stopping"; purged in flight: Kafka's own error
    assert set(outcomes[5:]) <= {"ConnectorUnavailable", "KafkaDeliveryError"}, outcomes
    proxy.restore()
