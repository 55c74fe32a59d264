"""Bounded destinations and per-login limits: ``[broker] max_destinations`` and ``[auth.limits]``'s
``max_queues`` and ``max_connections`` (gateway/broker/quota.py, gateway/security/quotas.py,
gateway/stomp/login_connections.py), counted and judged on the embedded broker with a fake clock."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.limits import message_size
from gateway.broker.quota import DestinationQuota
from gateway.broker.scheduler import RETRY_MS
from gateway.broker.settings import BrokerSettings, DestinationLimits
from gateway.broker.store.memory_store import MemoryStore
from gateway.config import parse_config
from gateway.errors import ConfigError, DestinationError, DestinationFull, LimitReached
from gateway.interfaces import ISubscription, SubscriptionSpec
from gateway.message.model import Message, TextMessage
from gateway.security.quotas import LoginLimits, LoginQuotas
from gateway.stomp.errors import limit_refusal
from gateway.stomp.login_connections import LoginConnections
from gateway.stomp.receipts import ReceiptLine
from gateway.wire.frame import Frame
from tests.unit.test_broker import Sink


def sent(destination: str, body: str = "x", login: str | None = None, **fields: Any) -> TextMessage:
    properties: dict[str, Any] = {"JMSXUserID": login} if login is not None else {}
    return TextMessage(destination=destination, message_id=f"ID:{destination}:{body}", text=body,
                       properties=properties, **fields)


def outcome(d: Deferred[Any]) -> Any:
    """What ``d`` fired with (the exception of a failure), or the string "waiting"."""
    result: list[Any] = []
    d.addCallbacks(result.append, lambda failure: result.append(failure.value))
    return result[0] if result else "waiting"


def subscribe(broker: EmbeddedBroker, **spec: Any) -> Any:
    return outcome(broker.subscribe(SubscriptionSpec(**spec), Sink()))


def make_broker(clock: Clock, store: MemoryStore | None = None, max_destinations: int = 3,
                **logins: LoginLimits) -> EmbeddedBroker:
    broker = EmbeddedBroker(clock, BrokerSettings(max_destinations=max_destinations, persistence="memory"),
                            store=store, logins=LoginQuotas(logins))
    broker.start()
    return broker


# -- the counts ----------------------------------------------------------------------------------------


def test_the_quota_counts_creations_and_removals_per_login() -> None:
    quota = DestinationQuota(2, LoginQuotas({"eve": LoginLimits(max_queues=1)}))
    quota.admit("/queue/a", "eve")
    quota.created("/queue/a", "eve")
    with pytest.raises(LimitReached, match=r"/queue/b was not created: login 'eve' holds 1 queues and its limit is 1 "
                                           r"\(\[auth.limits\] max_queues\)"):
        quota.admit("/queue/b", "eve")
    quota.created("/queue/c", None)  # (the broker's own, or no login: held by nobody)
    with pytest.raises(LimitReached, match=r"/queue/d was not created: the embedded broker holds 2 destinations and "
                                           r"its limit is 2 \(\[broker\] max_destinations\)"):
        quota.admit("/queue/d", None)
    assert (quota.count, quota.held, quota.refused) == (2, {"eve": 1}, 2)
    quota.removed("/queue/a")
    assert (quota.count, quota.held, quota.creators) == (1, {}, {})
    quota.admit("/queue/b", "eve")  # (room again)


def test_zero_max_destinations_is_no_cap_and_a_login_without_limits_has_none() -> None:
    quota = DestinationQuota(0, LoginQuotas({"eve": LoginLimits(max_queues=0)}))
    for i in range(1000):
        quota.admit(f"/queue/{i}", "alice")
        quota.created(f"/queue/{i}", "alice")
    with pytest.raises(LimitReached):
        quota.admit("/queue/x", "eve")


def test_the_star_entry_is_every_other_logins_limit() -> None:
    quotas = LoginQuotas({"*": LoginLimits(max_queues=5, max_connections=2), "root": LoginLimits()})
    assert (quotas.max_queues("eve"), quotas.max_connections("eve")) == (5, 2)
    assert (quotas.max_queues("root"), quotas.max_connections("root")) == (None, None)
    assert quotas.max_queues(None) is None
    assert quotas.named() == ["root"]


def test_the_settings_parse_with_their_defaults_and_refuse_negative_limits() -> None:
    config = parse_config({"auth": {"limits": {"eve": {"max_queues": 10, "max_connections": 2}, "*": {}}}})
    assert config.broker.max_destinations == 50_000
    assert config.auth.limits["eve"] == LoginLimits(max_queues=10, max_connections=2)
    assert config.auth.limits["*"].max_queues is None
    with pytest.raises(ConfigError, match="max_destinations"):
        parse_config({"broker": {"max_destinations": -1}})
    with pytest.raises(ConfigError, match=r"auth\.limits\.eve\.max_queue"):
        parse_config({"auth": {"limits": {"eve": {"max_queue": 1}}}})


# -- the broker ----------------------------------------------------------------------------------------


def test_sends_past_the_cap_are_refused_naming_the_destination_and_existing_ones_go_on(clock: Clock) -> None:
    broker = make_broker(clock)
    for name in ("a", "b", "c"):
        assert outcome(broker.send(sent(f"/queue/{name}"))) is None
    refused = outcome(broker.send(sent("/queue/d")))
    assert isinstance(refused, LimitReached) and "/queue/d" in str(refused) and "max_destinations" in str(refused)
    assert "/queue/d" not in broker.queues and len(broker.queues["/queue/a"]) == 1
    assert outcome(broker.send(sent("/queue/a", "again"))) is None and len(broker.queues["/queue/a"]) == 2
    assert broker.status()["limits"] == {"destinations": 3, "max_destinations": 3, "refused": 1, "logins": {}}


def test_subscribes_browses_durables_and_temporaries_count_and_are_refused_past_the_cap(clock: Clock) -> None:
    broker = make_broker(clock, max_destinations=4)
    assert ISubscription.providedBy(subscribe(broker, destination="/queue/s"))
    assert ISubscription.providedBy(subscribe(broker, destination="/queue/b", browser=True))
    assert ISubscription.providedBy(subscribe(broker, destination="/topic/t", durable_name="d", client_id="c"))
    broker.create_temporary("/remote-temp-topic/s1.t")
    assert broker.quota.count == 4
    for spec in ({"destination": "/queue/s2"}, {"destination": "/queue/b2", "browser": True},
                 {"destination": "/topic/t", "durable_name": "d2", "client_id": "c"}):
        assert isinstance(subscribe(broker, **spec), LimitReached), spec
    with pytest.raises(LimitReached):
        broker.create_temporary("/remote-temp-queue/s1.q")
    assert ISubscription.providedBy(subscribe(broker, destination="/topic/plain"))  # (a topic is no destination held)
    assert ISubscription.providedBy(subscribe(broker, destination="/queue/s"))  # (an existing queue)
    broker.delete_destination("/remote-temp-topic/s1.t")
    assert broker.quota.count == 3
    broker.create_temporary("/remote-temp-queue/s1.q")
    assert broker.quota.count == 4


def test_a_durable_resubscribed_with_a_new_selector_at_the_cap_takes_its_own_place(clock: Clock) -> None:
    broker = make_broker(clock, max_destinations=1)
    live = subscribe(broker, destination="/topic/t", durable_name="d", client_id="c")
    live.close()
    assert ISubscription.providedBy(subscribe(broker, destination="/topic/t", durable_name="d", client_id="c",
                                              selector="a = 1"))
    assert broker.quota.count == 1


def test_a_topic_nobody_listens_to_leaves_no_name_behind(clock: Clock) -> None:
    """Before, each SUBSCRIBE to a new topic name left an empty entry in the broker's topics for good."""
    broker = make_broker(clock, max_destinations=0)
    for i in range(50):
        subscribe(broker, destination=f"/topic/t{i}").close()
    assert broker.topics == {}


def test_a_logins_max_queues_counts_what_it_created_and_other_logins_go_on(clock: Clock) -> None:
    broker = make_broker(clock, max_destinations=0, eve=LoginLimits(max_queues=2))
    assert outcome(broker.send(sent("/queue/eve.1", login="eve"))) is None
    assert ISubscription.providedBy(subscribe(broker, destination="/queue/eve.2", login="eve"))
    refused = outcome(broker.send(sent("/queue/eve.3", login="eve")))
    assert isinstance(refused, LimitReached) and "login 'eve' holds 2 queues" in str(refused)
    assert isinstance(subscribe(broker, destination="/topic/x", durable_name="d", client_id="c", login="eve"),
                      LimitReached)
    with pytest.raises(LimitReached):
        broker.create_temporary("/remote-temp-queue/s.q", "eve")
    assert outcome(broker.send(sent("/queue/alice.1", login="alice"))) is None
    assert outcome(broker.send(sent("/queue/eve.1", "more", login="eve"))) is None  # (existing: goes on)
    assert outcome(broker.send(sent("/queue/alice.1", login="eve"))) is None  # (created by alice: exists)
    assert broker.status()["limits"]["logins"] == {"alice": {"queues": 1, "max_queues": None},
                                                   "eve": {"queues": 2, "max_queues": 2}}
    broker.delete_destination("/queue/eve.1")
    assert outcome(broker.send(sent("/queue/eve.3", login="eve"))) is None


def test_a_batch_past_a_limit_creates_none_of_its_queues(clock: Clock) -> None:
    """A COMMIT's SENDs (send_batch) and a composite SEND's parts are judged whole: refused, they left the
    queues made before the one past the limit behind, empty and held by the login (the limits attack,
    tests/integration/test_limits_attacks.py)."""
    broker = make_broker(clock, max_destinations=0, eve=LoginLimits(max_queues=3))
    batch: list[Message] = [sent(f"/queue/tx{i}", login="eve") for i in range(5)]
    refused = outcome(broker.send_batch(batch))
    assert isinstance(refused, LimitReached) and "/queue/tx3" in str(refused) and "holds 3 queues" in str(refused)
    refused = outcome(broker.send(sent(",".join(f"/queue/c{i}" for i in range(5)), login="eve")))
    assert isinstance(refused, LimitReached) and "/queue/c3" in str(refused)
    assert broker.queues == {} and broker.quota.count == 0 and broker.quota.held == {}
    batch = [sent("/queue/tx0", "1", login="eve"), sent("/queue/tx0", "2", login="eve"),
             sent("/queue/tx1,/queue/tx2", login="eve")]  # (a name twice is one queue)
    assert outcome(broker.send_batch(batch)) is None
    assert broker.quota.held == {"eve": 3} and len(broker.queues["/queue/tx0"]) == 2


def test_a_batch_replying_to_a_temporary_queue_gone_creates_none_of_its_queues(clock: Clock) -> None:
    """A COMMIT failed by a reply to a requester that left made the batch's new queues first (held by the
    login that committed)."""
    broker = make_broker(clock, max_destinations=0, eve=LoginLimits(max_queues=3))
    batch: list[Message] = [sent("/queue/new", login="eve"), sent("/remote-temp-queue/s1.gone", login="eve")]
    refused = outcome(broker.send_batch(batch))
    assert isinstance(refused, DestinationError) and "/remote-temp-queue/s1.gone" in str(refused)
    assert broker.queues == {} and broker.quota.held == {}


def test_a_send_refused_by_a_full_fail_destination_leaves_none_of_its_new_queues(clock: Clock) -> None:
    """A COMMIT refused as a whole by a FAIL destination that is full kept the queues it had made (empty,
    held by the login), and so did a SEND too large for a new FAIL queue; one that was used meanwhile (a
    message, a consumer) would stay."""
    first = sent("/queue/full.a", "first", login="eve")
    broker = EmbeddedBroker(clock, BrokerSettings(persistence="memory", destinations={
        "/queue/full.>": DestinationLimits(max_size=message_size(first), full_policy="FAIL")}))
    broker.start()
    assert outcome(broker.send(first)) is None  # (now at max_size)
    batch: list[Message] = [sent("/queue/new", login="eve"), sent("/queue/Consumer.g.VirtualTopic.t", login="eve"),
                            sent("/queue/full.a", "more", login="eve")]
    refused = outcome(broker.send_batch(batch))
    assert isinstance(refused, DestinationFull), refused
    assert sorted(broker.queues) == ["/queue/full.a"] and broker.quota.held == {"eve": 1}
    assert not broker.virtual.queues_of("/topic/VirtualTopic.t")
    too_big = sent("/queue/full.b", "x" * 1000, login="eve")  # (one SEND refused by FAIL: its new queue goes too)
    assert isinstance(outcome(broker.send(too_big)), DestinationFull)
    assert sorted(broker.queues) == ["/queue/full.a"] and broker.quota.held == {"eve": 1}


def test_a_batch_past_max_destinations_creates_none_of_its_queues(clock: Clock) -> None:
    broker = make_broker(clock, max_destinations=2)
    assert outcome(broker.send(sent("/queue/a"))) is None
    batch: list[Message] = [sent("/queue/a", "again"), sent("/queue/b"), sent("/queue/c")]
    refused = outcome(broker.send_batch(batch))
    assert isinstance(refused, LimitReached) and "/queue/c" in str(refused) and "holds 2 destinations" in str(refused)
    assert sorted(broker.queues) == ["/queue/a"] and len(broker.queues["/queue/a"]) == 1


def test_lowering_a_limit_refuses_the_next_creation_and_deletes_nothing(clock: Clock) -> None:
    broker = make_broker(clock, max_destinations=10, eve=LoginLimits(max_queues=5))
    for i in range(4):
        broker.send(sent(f"/queue/eve.{i}", login="eve"))
    broker.quota.max_destinations = 2
    broker.quota.logins.replace({"eve": LoginLimits(max_queues=1)})
    assert isinstance(outcome(broker.send(sent("/queue/eve.9", login="eve"))), LimitReached)
    assert len(broker.queues) == 4 and all(len(q) == 1 for q in broker.queues.values())
    broker.quota.max_destinations = 0
    assert isinstance(outcome(broker.send(sent("/queue/eve.9", login="eve"))), LimitReached)  # (max_queues)
    broker.quota.logins.replace({})
    assert outcome(broker.send(sent("/queue/eve.9", login="eve"))) is None


def test_a_restart_recovers_the_count_and_who_holds_durables_and_consumer_queues(clock: Clock) -> None:
    store = MemoryStore(clock)
    broker = make_broker(clock, store, max_destinations=0, eve=LoginLimits(max_queues=4))
    subscribe(broker, destination="/topic/t", durable_name="d", client_id="c", login="eve")
    subscribe(broker, destination="/queue/Consumer.eve.VirtualTopic.x", login="eve")
    broker.send(sent("/queue/Consumer.eve2.VirtualTopic.x", login="eve"))
    broker.send(sent("/queue/plain", login="eve"))  # (an empty plain queue is not remembered across a restart)
    assert broker.quota.held == {"eve": 4}
    broker.stop()
    again = make_broker(clock, store, max_destinations=0, eve=LoginLimits(max_queues=3))
    assert again.quota.count == 3 and again.quota.held == {"eve": 3}
    assert isinstance(subscribe(again, destination="/queue/Consumer.eve3.VirtualTopic.x", login="eve"), LimitReached)


def test_the_gauges_have_a_series_only_for_logins_configured_by_name(clock: Clock) -> None:
    logins = {"eve": LoginLimits(max_queues=3), "*": LoginLimits(max_queues=1)}
    broker = EmbeddedBroker(clock, BrokerSettings(max_destinations=0, persistence="memory"), logins=LoginQuotas(logins))
    broker.start()
    broker.send(sent("/queue/a", login="eve"))
    broker.send(sent("/queue/b", login="mallory"))
    samples = {(s.name, tuple(s.labels.items())): s.value for m in broker.metrics.registry.collect()
               for s in m.samples if "destinations" in s.name or "login" in s.name}
    assert samples[("jmsgateway_broker_destinations", ())] == 2
    assert samples[("jmsgateway_login_queues", (("login", "eve"),))] == 1
    assert samples[("jmsgateway_login_max_queues", (("login", "eve"),))] == 3
    assert not any(labels == (("login", "mallory"),) for _, labels in samples)


def test_the_send_that_makes_a_consumer_queue_is_answered_once_its_record_is_stored(clock: Clock) -> None:
    """A non-persistent SEND that made a virtual topic's consumer queue was answered at once, before the queue's
    record was stored: kill -9 after its RECEIPT could forget the queue (the SUBSCRIBE and the console wait)."""
    broker = make_broker(clock, max_destinations=0)
    held: list[Deferred[None]] = []

    def add_durable(key: str, topic: str, selector: str | None, owner: str | None = None) -> Deferred[None]:
        held.append(Deferred())
        return held[-1]

    broker.store.add_durable = add_durable  # type: ignore[method-assign, assignment]
    answer = broker.send(sent("/queue/Consumer.A.VirtualTopic.news"))
    assert len(held) == 1 and len(broker.queues["/queue/Consumer.A.VirtualTopic.news"]) == 1
    assert outcome(answer) == "waiting", "answered before the consumer queue's record was stored"
    held[0].callback(None)
    assert outcome(answer) is None
    assert outcome(broker.send(sent("/queue/Consumer.A.VirtualTopic.news", "2"))) is None  # (at once)
    posted: list[Any] = []
    broker.post(sent("/queue/Consumer.B.VirtualTopic.news"), lambda error, _: posted.append(error))
    assert posted == [] and len(held) == 2
    held[1].callback(None)
    assert posted == [None]


# -- STOMP: the refusal keeps the connection, per-login connections -----------------------------------------


def test_a_limit_refusal_answers_the_frame_and_keeps_the_connection() -> None:
    written: list[Frame] = []
    closed: list[bool] = []
    line = ReceiptLine(written.append, lambda: closed.append(True), lambda reason, frame: Frame("ERROR", {}))
    send = Frame("SEND", {"destination": "/queue/d", "receipt": "r1"})
    answer = line.later(send)
    answer.failed(Failure(LimitReached("/queue/d was not created: ... max_destinations")))
    assert [f.command for f in written] == ["ERROR"] and closed == []
    assert written[0].headers["message"] == "destination limit reached"
    assert written[0].headers["receipt-id"] == "r1" and b"/queue/d" in written[0].body
    commit = line.later(Frame("COMMIT", {"transaction": "t"}))
    commit.failed(Failure(LimitReached("no")))  # (a COMMIT applies nothing and closes, as any failed COMMIT)
    assert closed == [True]
    assert b"stays open" in limit_refusal(LimitReached("x"), send).body


def test_login_connections_count_per_login_against_max_connections() -> None:
    quotas = LoginQuotas({"eve": LoginLimits(max_connections=2)})
    connections = LoginConnections(quotas)
    assert connections.admit("eve") is None and connections.admit("eve") is None
    refusal = connections.admit("eve")
    assert refusal is not None and "holds 2 connections" in refusal and "max_connections" in refusal
    assert all(connections.admit("alice") is None for _ in range(10))
    connections.closed("eve")
    assert connections.admit("eve") is None
    quotas.replace({"eve": LoginLimits(max_connections=0)})
    assert connections.admit("eve") is not None and connections.open["eve"] == 2


def test_a_scheduled_message_whose_queue_cannot_be_made_yet_waits_instead_of_being_dropped(clock: Clock) -> None:
    """A job's occurrence to a new queue past the cap was dropped as for a destination that does not exist;
    it is tried again (as a FAIL-full destination's) and delivered once there is room."""
    broker = make_broker(clock, max_destinations=1)
    broker.send(sent("/queue/full"))
    job = sent("/queue/later")
    job.properties["AMQ_SCHEDULED_DELAY"] = "1000"
    assert outcome(broker.send(job)) is None
    clock.advance(1.5)
    assert "/queue/later" not in broker.queues and broker.scheduler.waiting == 1
    broker.delete_destination("/queue/full")
    clock.advance(RETRY_MS / 1000 + 0.1)
    assert len(broker.queues["/queue/later"]) == 1 and broker.scheduler.waiting == 0
