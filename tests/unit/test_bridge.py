"""The bridge engine on the embedded broker with a Clock: QoS order of send and
acknowledgement, batching by size and time, selector, message-id header across two
hops, durable subscription across restarts, pause/resume, retries and the failed
state, duplicate skipping.  Faults come from a wrapper connector (this layer's fake)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from zope.interface import implementer
from zope.interface.verify import verifyObject

from gateway.bridges.bridge import MESSAGE_ID_LIST, Bridge
from gateway.bridges.config import WINDOW, BridgeConfig, parse_bridge
from gateway.bridges.dedup import DuplicateStore, inline_executor
from gateway.bridges.metrics import BridgeMetrics
from gateway.bridges.service import build_bridge_service
from gateway.broker.broker import EmbeddedBroker
from gateway.errors import ConnectorError, ConnectorUnavailable
from gateway.interfaces import IConsumer, IHeldMessages, ISubscription, SubscriptionSpec
from gateway.message.model import Message, TextMessage
from tests.support.messages import texts_of


@implementer(ISubscription)
class FlakySubscription:
    """Wraps a real subscription; acks fail while ``connector.fail_acks`` > 0."""

    def __init__(self, inner: Any, connector: FlakyConnector) -> None:
        self.inner = inner
        self.connector = connector
        self.spec = inner.spec

    def ack(self, tags: list[Any]) -> Any:
        self.connector.acks.append(list(tags))
        if self.connector.fail_acks > 0:
            self.connector.fail_acks -= 1
            return fail(ConnectorUnavailable("ack lost"))
        return self.inner.ack(tags)

    def nack(self, tags: list[Any]) -> Any:
        return self.inner.nack(tags)

    def pause(self) -> None:
        self.inner.pause()

    def resume(self) -> None:
        self.inner.resume()

    def close(self) -> Any:
        return self.inner.close()

    def unsubscribe(self) -> Any:
        return self.inner.unsubscribe()


@implementer(IHeldMessages)
class FlakyConnector:
    """An embedded broker whose sends, subscribes and acks can be made to fail."""

    def __init__(self, broker: EmbeddedBroker, name: str = "flaky") -> None:
        self.broker = broker
        self.name = name
        self.capabilities = broker.capabilities
        self.fail_sends = 0
        self.fail_subscribes = 0
        self.fail_acks = 0
        self.hold_sends = False
        self.held: list[tuple[Deferred[None], list[Message]]] = []
        self.batches: list[int] = []
        self.acks: list[list[Any]] = []
        self.consumers: list[IConsumer] = []
        self.events: list[str] = []

    def start(self) -> Any:
        return succeed(None)

    def stop(self) -> Any:
        return succeed(None)

    def send(self, message: Message) -> Any:
        return self.send_batch([message])

    def send_batch(self, messages: list[Message]) -> Any:
        self.events.append("send")
        if self.fail_sends > 0:
            self.fail_sends -= 1
            return fail(ConnectorUnavailable("target away"))
        if self.hold_sends:
            held: Deferred[None] = Deferred()
            self.held.append((held, list(messages)))
            return held
        self.batches.append(len(messages))
        return self.broker.send_batch(messages)

    def release(self) -> None:
        held, self.held = self.held, []
        for d, messages in held:
            self.batches.append(len(messages))
            self.broker.send_batch(messages).chainDeferred(d)

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer) -> Any:
        if self.fail_subscribes > 0:
            self.fail_subscribes -= 1
            return fail(ConnectorUnavailable("source away"))
        self.consumers.append(consumer)
        return self.broker.subscribe(spec, consumer).addCallback(lambda inner: FlakySubscription(inner, self))

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Any:
        return self.broker.unsubscribe_durable(client_id, durable_name)

    def why_cannot_tell(self, destination: str) -> str | None:
        return None

    def held_message_ids(self, destination: str, tail: int = 0) -> Any:
        from gateway.bridges.probe import held_message_ids

        return held_message_ids(self.broker, destination)


class Sink:
    """A plain client-individual consumer of the embedded broker (what reaches the target)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def deliver(self, message: Message, tag: Any) -> None:
        self.messages.append(message)

    def subscription_failed(self, reason: Exception) -> None:
        raise AssertionError(reason)


def make_config(**overrides: Any) -> BridgeConfig:
    raw: dict[str, Any] = {
        "name": "b",
        "source": {"connector": "embedded", "destination": "/queue/src"},
        "target": {"connector": "embedded", "destination": "/queue/dst"},
        "failure_retry_interval": 1000,
        "max_batch_time": 50,
    }
    raw.update(overrides)
    return parse_bridge(raw, 0, "test.toml", {"embedded"})


def text(body: str, *, persistent: bool = True, **properties: Any) -> TextMessage:
    return TextMessage(destination="/queue/src", message_id=f"ID:src-{body}", text=body, persistent=persistent,
                       properties=dict(properties))


class Rig:
    """A broker, a flaky view of it for each side, a bridge between them, a clock."""

    def __init__(self, *, dedup: bool = False, **overrides: Any) -> None:
        self.clock = Clock()
        self.broker = EmbeddedBroker(self.clock)
        self.broker.start()
        self.source = FlakyConnector(self.broker, "source")
        self.target = FlakyConnector(self.broker, "target")
        self.registry = CollectorRegistry()
        self.metrics = BridgeMetrics(self.registry)
        self.store = DuplicateStore(":memory:", self.clock, executor=inline_executor) if dedup else None
        self.config = make_config(**overrides)
        if self.store is not None:
            self.store.register(self.config.name, self.config.duplicate_window)
            self.store.open()
        self.bridge = Bridge(self.config, self.source, self.target, clock=self.clock, metrics=self.metrics,
                             dedup=self.store)

    def publish(self, *messages: Message, destination: str = "/queue/src") -> None:
        for message in messages:
            message.destination = destination
            self.broker.send(message)

    def drain(self, destination: str = "/queue/dst") -> list[Message]:
        queue = self.broker.queues.get(destination)
        return [] if queue is None else queue.messages()

    def bodies(self, destination: str = "/queue/dst") -> list[str]:
        return texts_of(self.drain(destination))

    def pending_at_source(self, destination: str = "/queue/src") -> int:
        queue = self.broker.queues.get(destination)
        return 0 if queue is None else len(queue) + queue.inflight

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"bridge": "b", **labels})
        return value or 0.0


def test_a_bridge_is_an_iconsumer_through_its_source_consumer() -> None:
    rig = Rig()
    rig.bridge.start()
    verifyObject(IConsumer, rig.source.consumers[0])


def test_duplicates_ok_forwards_everything_in_order_and_empties_the_source() -> None:
    rig = Rig()
    rig.publish(*(text(str(i)) for i in range(5)))
    rig.bridge.start()
    assert rig.bridge.state == "running"
    rig.publish(*(text(str(i)) for i in range(5, 8)))
    rig.clock.advance(0.05)
    assert rig.bodies() == [str(i) for i in range(8)]
    assert rig.pending_at_source() == 0
    sent = rig.drain()
    assert all(m.destination == "/queue/dst" for m in sent)
    assert all(not m.message_id.startswith("ID:src-") for m in sent), "a bridged message gets a new id"
    assert all(MESSAGE_ID_LIST not in m.properties for m in sent)
    assert rig.metric("jmsgateway_bridge_forwarded_total") == 8
    assert rig.registry.get_sample_value("jmsgateway_bridge_state", {"bridge": "b", "jmsgateway_bridge_state":
                                                                      "running"}) == 1


def test_duplicates_ok_sends_before_it_acknowledges() -> None:
    rig = Rig()
    rig.target.hold_sends = True
    rig.publish(text("a"))
    rig.bridge.start()
    assert len(rig.target.held) == 1
    assert rig.source.acks == [], "no acknowledgement before the target confirmed"
    assert rig.pending_at_source() == 1
    rig.target.release()
    assert len(rig.source.acks) == 1
    assert rig.pending_at_source() == 0
    assert rig.bodies() == ["a"]


def test_at_most_once_acknowledges_before_it_sends() -> None:
    rig = Rig(qos="AT_MOST_ONCE")
    rig.target.hold_sends = True
    rig.publish(text("a"))
    rig.bridge.start()
    assert len(rig.source.acks) == 1 and len(rig.target.held) == 1
    assert rig.pending_at_source() == 0


def test_at_most_once_loses_the_batch_when_stopped_while_the_target_is_away() -> None:
    rig = Rig(qos="AT_MOST_ONCE")
    rig.target.fail_sends = 100
    rig.publish(text("a"), text("b"))
    rig.bridge.start()
    assert rig.bridge.state == "retrying"
    rig.bridge.stop()
    assert rig.bridge.state == "stopped"
    assert rig.bodies() == []
    assert rig.pending_at_source() == 1, "b was never taken: it stays at the source; a is lost"
    assert rig.metric("jmsgateway_bridge_dropped_total", reason="abandoned") == 1


def test_batches_by_size_then_by_time() -> None:
    rig = Rig(max_batch_size=10, max_batch_time=100)
    rig.bridge.start()
    rig.publish(*(text(str(i)) for i in range(25)))
    assert rig.target.batches == [10, 10]
    rig.clock.advance(0.099)
    assert rig.target.batches == [10, 10]
    rig.clock.advance(0.002)
    assert rig.target.batches == [10, 10, 5]
    assert rig.bodies() == [str(i) for i in range(25)]
    assert rig.registry.get_sample_value("jmsgateway_bridge_batch_size_count", {"bridge": "b"}) == 3


def test_max_batch_time_minus_one_waits_for_a_full_batch() -> None:
    rig = Rig(max_batch_size=4, max_batch_time=-1)
    rig.bridge.start()
    rig.publish(*(text(str(i)) for i in range(3)))
    rig.clock.advance(3600)
    assert rig.target.batches == []
    rig.publish(text("3"))
    assert rig.target.batches == [4]


def test_batches_go_while_earlier_ones_are_in_flight_up_to_the_window() -> None:
    """Issue 32: a window of batches in flight (the target confirms one while the next goes)."""
    rig = Rig(max_batch_size=2)
    rig.target.hold_sends = True
    rig.bridge.start()
    rig.publish(*(text(str(i)) for i in range(12)))
    assert len(rig.target.held) == WINDOW, "no more than the window in flight"
    rig.target.release()
    assert len(rig.target.held) == 2 and rig.target.batches == [2] * WINDOW, "the rest went as room was made"
    rig.target.release()
    assert rig.bodies() == [str(i) for i in range(12)]


def test_at_most_once_keeps_one_batch_in_flight() -> None:
    rig = Rig(qos="AT_MOST_ONCE", max_batch_size=2)
    rig.target.hold_sends = True
    rig.bridge.start()
    rig.publish(*(text(str(i)) for i in range(4)))
    assert len(rig.target.held) == 1
    rig.target.release()
    assert len(rig.target.held) == 1 and rig.target.batches == [2]
    rig.target.release()
    assert rig.bodies() == ["0", "1", "2", "3"]


def test_a_message_again_while_its_first_delivery_is_in_flight_waits_for_it() -> None:
    """A source that redelivers after a reconnection while the first delivery is in flight:
    the batch with the repeat waits, so the duplicate store knows the id when it is selected."""
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE", max_batch_size=1)
    rig.target.hold_sends = True
    rig.bridge.start()
    rig.publish(text("a"))
    assert len(rig.target.held) == 1
    rig.publish(text("a"), text("b"))
    assert len(rig.target.held) == 1, "the repeat waits for the batch in flight"
    rig.target.release()
    rig.target.release()
    assert rig.bodies() == ["a", "b"]


def test_selector_forwards_only_matching_messages() -> None:
    rig = Rig(selector="color = 'red'")
    rig.bridge.start()
    rig.publish(text("r1", color="red"), text("b1", color="blue"), text("r2", color="red"))
    assert rig.bodies() == ["r1", "r2"]
    assert [m.text for m in rig.broker.queues["/queue/src"].messages()] == ["b1"]  # type: ignore[attr-defined]


def test_message_id_header_across_two_hops() -> None:
    clock = Clock()
    broker = EmbeddedBroker(clock)
    first = Bridge(make_config(name="hop1", target={"connector": "embedded", "destination": "/queue/mid"},
                               add_message_id_in_header=True), broker, broker, clock=clock)
    second = Bridge(make_config(name="hop2", source={"connector": "embedded", "destination": "/queue/mid"},
                                add_message_id_in_header=True), broker, broker, clock=clock,
                    metrics=first.metrics)
    first.start()
    second.start()
    broker.send(text("x"))
    (arrived,) = broker.queues["/queue/dst"].messages()
    ids = str(arrived.properties[MESSAGE_ID_LIST]).split(",")
    assert len(ids) == 2
    assert ids[0] == "ID:src-x"
    assert ids[1] != ids[0] and ids[1].startswith("ID:"), "the second hop appends the id the first hop gave"


def test_durable_subscription_keeps_messages_across_bridge_restarts() -> None:
    rig = Rig(source={"connector": "embedded", "destination": "/topic/news"}, subscription_name="news",
              client_id="bridge-client")
    rig.bridge.start()
    rig.publish(text("1"), destination="/topic/news")
    assert rig.bodies() == ["1"]
    rig.bridge.stop()
    assert rig.broker.status()["durables"]["durable:bridge-client:news"]["active"] is False
    rig.publish(text("2"), text("3"), destination="/topic/news")
    rig.bridge.start()
    rig.clock.advance(0.05)
    assert rig.bodies() == ["1", "2", "3"]


def test_non_durable_topic_bridge_misses_what_was_published_while_stopped() -> None:
    rig = Rig(source={"connector": "embedded", "destination": "/topic/news"})
    rig.bridge.start()
    rig.bridge.stop()
    rig.publish(text("lost"), destination="/topic/news")
    rig.bridge.start()
    rig.publish(text("seen"), destination="/topic/news")
    assert rig.bodies() == ["seen"]


def test_pause_holds_messages_and_resume_forwards_them() -> None:
    rig = Rig()
    rig.bridge.start()
    paused = rig.bridge.pause()
    assert paused.called and rig.bridge.state == "paused"
    rig.publish(text("a"), text("b"))
    rig.clock.advance(1)
    assert rig.bodies() == []
    rig.bridge.resume()
    rig.clock.advance(0.05)
    assert rig.bridge.state == "running"
    assert rig.bodies() == ["a", "b"]


def test_pause_fires_after_the_batch_in_flight() -> None:
    rig = Rig()
    rig.target.hold_sends = True
    rig.bridge.start()
    rig.publish(text("a"))
    paused = rig.bridge.pause()
    assert not paused.called
    rig.target.release()
    assert paused.called


def test_target_failure_is_retried_every_interval_then_resumes() -> None:
    rig = Rig()
    rig.target.fail_sends = 2
    rig.bridge.start()
    rig.publish(text("a"))
    assert rig.bridge.state == "retrying" and rig.bridge.retries == 1
    rig.clock.advance(0.999)
    assert rig.target.events.count("send") == 1
    rig.clock.advance(0.001)
    assert rig.target.events.count("send") == 2 and rig.bridge.retries == 2
    rig.clock.advance(1.0)
    assert rig.bodies() == ["a"] and rig.pending_at_source() == 0
    assert rig.bridge.state == "running" and rig.bridge.retries == 0
    assert rig.metric("jmsgateway_bridge_retries_total") == 2
    assert rig.metric("jmsgateway_bridge_send_failures_total") == 2


def test_max_retries_exhausted_marks_the_bridge_failed_and_gives_messages_back() -> None:
    rig = Rig(max_retries=2)
    rig.target.fail_sends = 100
    rig.bridge.start()
    rig.publish(text("a"))
    rig.clock.advance(1.0)
    rig.clock.advance(1.0)
    assert rig.bridge.state == "failed"
    assert "gave up after 2 retries" in (rig.bridge.last_error or "")
    assert rig.target.events.count("send") == 3
    assert rig.pending_at_source() == 1, "unacknowledged messages go back to the source"
    rig.clock.advance(10)
    assert rig.target.events.count("send") == 3, "a failed bridge does nothing more"
    rig.target.fail_sends = 0
    rig.bridge.start()
    assert rig.bridge.state == "running" and rig.bodies() == ["a"]


def test_max_retries_zero_fails_at_the_first_failure() -> None:
    rig = Rig(max_retries=0)
    rig.source.fail_subscribes = 1
    rig.bridge.start()
    assert rig.bridge.state == "failed"


def test_source_unavailable_at_start_is_retried() -> None:
    rig = Rig()
    rig.source.fail_subscribes = 2
    started = rig.bridge.start()
    assert rig.bridge.state == "retrying" and not started.called
    rig.clock.advance(1.0)
    assert rig.bridge.state == "retrying"
    rig.publish(text("a"))
    rig.clock.advance(1.0)
    assert started.called and rig.bridge.state == "running"
    assert rig.bodies() == ["a"]


def test_lost_subscription_resubscribes_after_the_interval() -> None:
    rig = Rig()
    rig.bridge.start()
    consumer = rig.source.consumers[0]
    consumer.subscription_failed(ConnectorError("connection lost"))
    assert rig.bridge.state == "retrying"
    rig.clock.advance(1.0)
    assert rig.bridge.state == "running" and len(rig.source.consumers) == 2
    rig.publish(text("after"))
    assert rig.bodies() == ["after"]


def lost_ack_run(qos: str) -> Rig:
    """Send confirmed, the acknowledgement lost: the source redelivers."""
    rig = Rig(dedup=qos == "ONCE_AND_ONLY_ONCE", qos=qos, max_batch_size=3)
    rig.source.fail_acks = 1
    rig.bridge.start()
    rig.publish(text("a"), text("b"), text("c"))
    assert rig.bridge.state == "retrying"
    rig.clock.advance(1.0)
    rig.clock.advance(0.05)
    assert rig.bridge.state == "running"
    assert rig.pending_at_source() == 0
    return rig


def test_duplicates_ok_resends_after_a_lost_acknowledgement() -> None:
    rig = lost_ack_run("DUPLICATES_OK")
    assert sorted(rig.bodies()) == ["a", "a", "b", "b", "c", "c"]


def test_once_and_only_once_skips_what_the_target_already_has() -> None:
    rig = lost_ack_run("ONCE_AND_ONLY_ONCE")
    assert rig.bodies() == ["a", "b", "c"]
    assert rig.metric("jmsgateway_bridge_duplicates_skipped_total") == 3
    assert rig.store is not None and rig.store.count("b") == 3


def test_once_and_only_once_refuses_non_persistent_messages() -> None:
    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE")
    rig.bridge.start()
    rig.publish(text("p"), text("np", persistent=False))
    assert rig.bodies() == ["p"]
    assert rig.pending_at_source() == 0
    assert rig.metric("jmsgateway_bridge_dropped_total", reason="non-persistent") == 1


def test_once_and_only_once_needs_a_store() -> None:
    with pytest.raises(ValueError, match="duplicate store"):
        Bridge(make_config(qos="ONCE_AND_ONLY_ONCE"), EmbeddedBroker(Clock()), EmbeddedBroker(Clock()),
               clock=Clock())


def test_a_bad_target_destination_fails_the_bridge_at_once() -> None:
    rig = Rig(target={"connector": "embedded", "destination": "/nowhere/x"})
    rig.bridge.start()
    rig.publish(text("a"))
    assert rig.bridge.state == "failed"
    assert "/nowhere/x" in (rig.bridge.last_error or "")
    assert rig.pending_at_source() == 1


def test_stop_waits_for_the_batches_in_flight_and_gives_back_the_rest() -> None:
    rig = Rig(max_batch_size=1)
    rig.target.hold_sends = True
    rig.bridge.start()
    rig.publish(*(text(str(i)) for i in range(WINDOW + 2)))
    stopped = rig.bridge.stop()
    assert not stopped.called
    rig.target.release()
    assert stopped.called and rig.bridge.state == "stopped"
    assert rig.bodies() == [str(i) for i in range(WINDOW)] and rig.pending_at_source() == 2


def test_transformers_run_before_the_send() -> None:
    from gateway.transform import build_plugin_manager

    clock = Clock()
    broker = EmbeddedBroker(clock)
    config = make_config(transformers=["jms-byte"])
    service = build_bridge_service([config], {"embedded": broker}, clock, registry=CollectorRegistry(),
                                   plugin_manager=build_plugin_manager((), load_entry_points=False))
    service.startService()
    broker.send(text("hello"))
    (arrived,) = broker.queues["/queue/dst"].messages()
    assert arrived.kind == "bytes" and arrived.body == b"hello"  # type: ignore[attr-defined]
    service.stopService()


def test_service_control_api() -> None:
    clock = Clock()
    broker = EmbeddedBroker(clock)
    configs = [make_config(name="one"), make_config(name="two", target={"connector": "embedded",
                                                                        "destination": "/queue/other"}, enabled=False)]
    service = build_bridge_service(configs, {"embedded": broker}, clock, registry=CollectorRegistry())
    service.startService()
    assert [s["state"] for s in service.status()] == ["running", "stopped"]
    service.bridge("two").start()
    service.bridge("one").pause()
    assert [s["state"] for s in service.status()] == ["paused", "running"]
    with pytest.raises(KeyError, match="did you mean 'one'"):
        service.bridge("onе")  # noqa: RUF001 - a Cyrillic e: a typo
    d = service.stopService()
    assert d.called
    assert [s["state"] for s in service.status()] == ["stopped", "stopped"]


def test_per_side_credentials_need_a_connector_that_takes_them() -> None:
    from gateway.errors import ConfigError

    clock = Clock()
    config = make_config(source={"connector": "embedded", "destination": "/queue/src", "user": "u"})
    with pytest.raises(ConfigError, match="does not take per-bridge credentials") as caught:
        build_bridge_service([config], {"embedded": EmbeddedBroker(clock)}, clock, registry=CollectorRegistry())
    assert caught.value.key == "bridges[0].source.user"


def test_once_and_only_once_counts_what_the_target_already_holds_as_delivered() -> None:
    """A crash after the target stored the copy and before the duplicate store recorded
    it: at start the bridge finds its copy at the target and does not send again."""
    from gateway.bridges.probe import target_message_id

    rig = Rig(dedup=True, qos="ONCE_AND_ONLY_ONCE")
    original = text("a")
    copy = text("a")
    copy.message_id = target_message_id("b", original.message_id)
    rig.publish(copy, destination="/queue/dst")
    rig.publish(original, text("b"))
    rig.bridge.start()
    rig.clock.advance(0.05)
    assert rig.bodies() == ["a", "b"]
    assert [m.message_id for m in rig.drain()] == [copy.message_id, target_message_id("b", "ID:src-b")]
    assert rig.pending_at_source() == 0
    assert rig.metric("jmsgateway_bridge_duplicates_skipped_total") == 1


def test_per_side_credentials_build_private_connectors() -> None:
    """A side with its own user gets a private copy of its connector (ICredentialed)."""
    from gateway.connectors.kafka import KafkaConnector
    from gateway.connectors.stomp_broker import StompBrokerConnector
    from gateway.errors import ConfigError
    from gateway.interfaces import ICredentialed

    shared = StompBrokerConnector.from_config("amq", {"uri": "stomp://127.0.0.1:61613", "login": "shared"},
                                              reactor=Clock(), registry=CollectorRegistry())
    kafka = KafkaConnector.from_config("kafka", {"uri": "kafka://127.0.0.1:9092",
                                                 "consumer": {"session.timeout.ms": 1000}},
                                       reactor=Clock(), gateway_id="gw")
    assert verifyObject(ICredentialed, shared) and verifyObject(ICredentialed, kafka)
    amq = shared.with_credentials("alice", "secret")
    assert isinstance(amq, StompBrokerConnector) and amq is not shared
    assert (amq.settings.login, amq.settings.passcode) == ("alice", "secret")
    assert shared.settings.login == "shared"
    private = kafka.with_credentials("bob", "pw")
    assert isinstance(private, KafkaConnector) and private is not kafka
    assert private.settings.consumer == {"session.timeout.ms": 1000, "sasl.username": "bob", "sasl.password": "pw"}
    assert private.settings.producer == {"sasl.username": "bob", "sasl.password": "pw"}
    config = parse_bridge({"name": "b", "source": {"connector": "amq", "destination": "/queue/src", "user": "alice",
                                                  "password": "secret"},
                           "target": {"connector": "embedded", "destination": "/queue/dst"}}, 0, "test.toml",
                          {"amq", "embedded"})
    service = build_bridge_service([config], {"amq": shared, "embedded": EmbeddedBroker(Clock())}, Clock(),
                                   registry=CollectorRegistry())
    [owned] = service.owned_connectors
    assert isinstance(owned, StompBrokerConnector) and owned.settings.login == "alice"
    config = make_config(source={"connector": "embedded", "destination": "/queue/src", "user": "u"})
    with pytest.raises(ConfigError, match="in-process"):
        build_bridge_service([config], {"embedded": EmbeddedBroker(Clock())}, Clock(), registry=CollectorRegistry())
