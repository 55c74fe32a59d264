"""A bridge whose source can send and acknowledge in one local transaction
(:class:`ILocalTransactionSource`, the ``jms`` connector) uses it under ONCE_AND_ONLY_ONCE,
with in-memory fakes and a Clock."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from zope.interface import implementer

from gateway.bridges.bridge import Bridge
from gateway.bridges.config import parse_bridge
from gateway.bridges.service import build_bridge_service
from gateway.errors import ConnectorUnavailable, MessageRefused
from gateway.interfaces import Capability, ILocalTransactionSource, ITransactedSubscription, SubscriptionSpec
from gateway.message.model import Message, TextMessage


@implementer(ITransactedSubscription)
class FakeTransacted:
    def __init__(self, spec: SubscriptionSpec, consumer: Any, source: FakeProvider) -> None:
        self.spec, self.consumer, self.source = spec, consumer, source
        self.closed = False

    def forward(self, messages: list[Message], tags: list[Any]) -> Any:
        if self.source.refuse:
            self.source.refuse -= 1
            return fail(ConnectorUnavailable("connection lost during commit"))
        if self.source.refuse_for_good:
            return fail(MessageRefused("refused by the provider: a property that cannot be typed"))
        self.source.committed.append(([m.destination for m in messages], list(tags)))
        return succeed(None)

    def ack(self, tags: list[Any]) -> Any:
        self.source.acked.extend(tags)
        return succeed(None)

    def nack(self, tags: list[Any]) -> Any:
        return succeed(None)

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> Any:
        self.closed = True
        return succeed(None)

    def unsubscribe(self) -> Any:
        return self.close()


@implementer(ILocalTransactionSource)
class FakeProvider:
    name = "jms"
    capabilities: frozenset[Capability] = frozenset()

    def __init__(self) -> None:
        self.subscriptions: list[FakeTransacted] = []
        self.batch_times: list[int] = []
        self.committed: list[tuple[list[str], list[Any]]] = []
        self.acked: list[Any] = []
        self.sent: list[Message] = []
        self.refuse = 0
        self.refuse_for_good = False

    def start(self) -> Any:
        return succeed(None)

    def stop(self) -> Any:
        return succeed(None)

    def send(self, message: Message) -> Any:
        self.sent.append(message)
        return succeed(None)

    def send_batch(self, messages: list[Message]) -> Any:
        self.sent.extend(messages)
        return succeed(None)

    def subscribe(self, spec: SubscriptionSpec, consumer: Any) -> Any:
        raise AssertionError("a transacted source is subscribed with subscribe_transacted")

    def subscribe_transacted(self, spec: SubscriptionSpec, consumer: Any, max_batch_time: int) -> Deferred[Any]:
        subscription = FakeTransacted(spec, consumer, self)
        self.subscriptions.append(subscription)
        self.batch_times.append(max_batch_time)
        return succeed(subscription)

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Any:
        return succeed(None)

    def shares_transactions_with(self, target: Any) -> bool:
        return target is self

    def deliver(self, count: int, persistent: bool = True) -> None:
        subscription = self.subscriptions[-1]
        for index in range(count):
            message = TextMessage(destination="/queue/in", message_id=f"ID:{len(self.committed)}-{index}",
                                  persistent=persistent, text=f"m{index}")
            subscription.consumer.deliver(message, ("tag", len(self.subscriptions), index))


def config(qos: str, **extra: Any) -> Any:
    raw = {"name": "local", "source": {"connector": "jms", "destination": "/queue/in"},
           "target": {"connector": "jms", "destination": "/queue/out"}, "qos": qos, "max_batch_size": 5,
           "max_batch_time": 50, "failure_retry_interval": 100, **extra}
    return parse_bridge(raw, 0, "gw.toml", {"jms", "embedded"})


def test_once_and_only_once_within_one_provider_sends_and_acks_in_one_transaction() -> None:
    clock, provider = Clock(), FakeProvider()
    service = build_bridge_service([config("ONCE_AND_ONLY_ONCE")], {"jms": provider}, clock, data_dir="/nonexistent")
    bridge = service.bridge("local")
    assert isinstance(bridge, Bridge)
    assert service.dedup is None and bridge.dedup is None  # no duplicate store
    bridge.start()
    assert provider.subscriptions[0].spec.prefetch == 5 and provider.batch_times == [50]
    provider.deliver(5)
    assert provider.committed == [(["/queue/out"] * 5, [("tag", 1, i) for i in range(5)])]
    assert provider.sent == [] and provider.acked == []  # neither a plain send nor a separate ack
    assert bridge.forwarded == 5


def test_a_failed_local_transaction_resubscribes_and_the_batch_comes_again() -> None:
    clock, provider = Clock(), FakeProvider()
    bridge = Bridge(config("ONCE_AND_ONLY_ONCE"), provider, provider, clock=clock)
    provider.refuse = 1
    bridge.start()
    provider.deliver(5)
    assert provider.subscriptions[0].closed and provider.committed == []
    clock.advance(0.1)
    assert len(provider.subscriptions) == 2
    provider.deliver(5)  # the provider rolled back: the same batch again
    assert len(provider.committed) == 1 and bridge.forwarded == 5 and bridge.state == "running"


def test_a_message_the_target_refuses_for_good_fails_the_bridge_at_once() -> None:
    """The transaction was rolled back (the batch stays at the source): resubscribing would
    only bring it back to be refused again, until the provider's redelivery limit moved the
    message away (the fault matrix saw ActiveMQ put it in its DLQ: lost to the bridge)."""
    clock, provider = Clock(), FakeProvider()
    bridge = Bridge(config("ONCE_AND_ONLY_ONCE"), provider, provider, clock=clock)
    provider.refuse_for_good = True
    bridge.start()
    provider.deliver(5)
    assert bridge.state == "failed" and bridge.last_error is not None and "for good" in bridge.last_error
    assert provider.subscriptions[0].closed and provider.committed == []
    clock.advance(1.0)
    assert len(provider.subscriptions) == 1, "no resubscription"


def test_non_persistent_messages_are_acknowledged_in_the_transaction_but_not_sent() -> None:
    clock, provider = Clock(), FakeProvider()
    bridge = Bridge(config("ONCE_AND_ONLY_ONCE"), provider, provider, clock=clock)
    bridge.start()
    provider.deliver(5, persistent=False)
    assert provider.committed == [([], [("tag", 1, i) for i in range(5)])]


def test_other_modes_use_the_batches_and_acknowledge_them() -> None:
    clock, provider = Clock(), FakeProvider()
    bridge = Bridge(config("DUPLICATES_OK"), provider, provider, clock=clock)
    bridge.start()
    assert provider.subscriptions[0].spec.prefetch == 5
    provider.deliver(5)
    assert [m.destination for m in provider.sent] == ["/queue/out"] * 5
    assert provider.acked == [("tag", 1, i) for i in range(5)] and provider.committed == []
