"""Queues deeper than memory (issue 27): the embedded broker's memory limits, paging and full policies.

A broker with a memory limit of a few messages keeps only a window of each
queue in memory and pages the rest out; these tests check that everything
the broker does stays right on a paged queue (order, priority, selectors,
expiry, redelivery, transactions, durable subscriptions, restart) and that
BLOCK, FAIL and DROP do what Artemis users expect.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import LogLevel, globalLogPublisher
from twisted.python.failure import Failure

from gateway.broker import queue as queue_module
from gateway.broker.broker import EmbeddedBroker
from gateway.broker.limits import (
    MESSAGE_OVERHEAD,
    default_memory_limit,
    destination_pattern_matches,
    message_size,
    parse_size,
)
from gateway.broker.settings import BrokerSettings, DestinationLimits
from gateway.broker.store.snapshot import Snapshot
from gateway.errors import DestinationFull
from gateway.interfaces import SubscriptionSpec
from gateway.message.model import TextMessage
from tests.support.log_events import observer
from tests.support.messages import text_of
from tests.unit.test_store_broker import Run, Sink, text

ONE = message_size(text("/queue/q", "m000"))
LIMITED = message_size(text("/queue/limited.a", "m000"))
"""One message to the limited destinations."""
LIMIT = 8 * ONE
"""About eight messages fit in memory."""


def settings(**fields: Any) -> BrokerSettings:
    fields.setdefault("memory_limit", LIMIT)
    return BrokerSettings(persistence="sqlite", max_redeliveries=2, **fields)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    run = Run(tmp_path, settings(), lazy_recovery=True)
    run.start()
    yield run
    run.close()


def bodies(count: int, prefix: str = "m") -> list[str]:
    return [f"{prefix}{n:03}" for n in range(count)]


def memory_bounded(broker: EmbeddedBroker, slack: int = 1) -> None:
    assert broker.memory.used <= broker.memory.limit + slack * ONE, (broker.memory.used, broker.memory.limit)


def drain(run: Run, sink: Sink, subscription: Any, expected: int) -> None:
    """Acknowledge what arrives until ``expected`` messages came (prefetch 1: one at a time)."""
    got = 0
    for _ in range(expected * 2):
        for _ in range(10_000):  # (a search of the page that ran out of time goes on in a later turn)
            if len(sink.got) > got:
                break
            run.clock.advance(0)
        if len(sink.got) >= expected:
            return
        assert sink.got, "nothing delivered"
        got = len(sink.got)
        run.wait(subscription.ack([sink.got[-1][1]]))
    assert len(sink.got) >= expected


# -- sizes, patterns, defaults -----------------------------------------------------


@pytest.mark.parametrize(("value", "size"), [
    (0, 0), (123, 123), ("64MB", 64 * 2**20), ("64 mb", 64 * 2**20), ("1GiB", 2**30), ("512KiB", 512 * 1024),
    ("512K", 512 * 1024), ("1.5KB", 1536), ("10", 10), ("2g", 2 * 2**30),
])
def test_sizes_are_read_as_activemq_and_artemis_read_them(value: Any, size: int) -> None:
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["64XB", "", "MB", "-1", -1, True, 1.5])
def test_a_bad_size_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(value)


def test_the_default_limit_is_an_eighth_of_memory_at_most_one_gib() -> None:
    limit = default_memory_limit()
    assert 0 < limit <= 2**30
    assert BrokerSettings().memory_limit is None
    assert EmbeddedBroker(Clock()).memory.limit == limit


@pytest.mark.parametrize(("destination", "pattern", "matches"), [
    ("/queue/orders.eu", "/queue/orders.>", True),
    ("/queue/orders.eu.late", "/queue/orders.>", True),
    ("/queue/ordersx", "/queue/orders.>", False),
    ("/topic/orders.eu", "/queue/orders.>", False),
    ("/queue/a.b.c", "/queue/*.b.>", True),
    ("/queue/a.c", "/queue/*.b.>", False),
    ("/queue/orders.eu", "/queue/orders.*", True),  # an fnmatch glob, as [[destinations]] reads it
    ("/queue/orders", "/queue/orders", True),
])
def test_destination_patterns(destination: str, pattern: str, matches: bool) -> None:
    assert destination_pattern_matches(destination, pattern) is matches


def test_the_first_matching_pattern_sets_the_policy() -> None:
    broker = EmbeddedBroker(Clock(), BrokerSettings(destinations={
        "/queue/orders.>": DestinationLimits(max_size=1000, full_policy="FAIL"),
        "/queue/>": DestinationLimits(full_policy="DROP"),
    }))
    assert (broker.policy("/queue/orders.eu").full_policy, broker.policy("/queue/orders.eu").max_size) == ("FAIL", 1000)
    assert broker.policy("/queue/other").full_policy == "DROP"
    assert broker.policy("/topic/x").full_policy == "PAGE"


def test_a_message_is_counted_for_its_body_properties_and_a_fixed_overhead() -> None:
    message = TextMessage(destination="/queue/q", message_id="ID:1", text="x" * 1000, properties={"k": "v" * 100})
    assert message_size(message) == MESSAGE_OVERHEAD + 1000 + len("/queue/q") + len("ID:1") + 64 + 1 + 100


# -- PAGE ----------------------------------------------------------------------------


def test_a_queue_without_consumers_keeps_a_window_in_memory_and_drains_in_order(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    sent = bodies(100)
    for index, body in enumerate(sent):
        run.send(text("/queue/q", body, persistent=index % 2 == 0))
    queue = broker.queues["/queue/q"]
    memory_bounded(broker)
    assert len(queue) == 100 and queue.paged >= 90
    assert broker.status()["paging"]["/queue/q"]["paged"] == queue.paged
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/q", ack_mode="client-individual", prefetch=1)
    drain(run, sink, subscription, 100)
    assert sink.texts() == sent
    run.wait(subscription.ack([sink.got[-1][1]]))
    assert len(queue) == 0 and queue.paged == 0 and broker.memory.used == 0


def test_priorities_are_kept_across_the_window(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    for body in bodies(30, "low"):
        run.send(text("/queue/p", body, priority=1))
    for body in bodies(30, "high"):
        run.send(text("/queue/p", body, priority=8))
    run.send(text("/queue/p", "mid", priority=4))
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/p", ack_mode="client-individual", prefetch=1)
    drain(run, sink, subscription, 61)
    assert sink.texts() == [*bodies(30, "high"), "mid", *bodies(30, "low")]


def test_a_selective_consumer_finds_a_match_behind_many_paged_messages(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    run.send(*[text("/queue/s", body, properties={"color": "blue"}) for body in bodies(1500)])
    run.send(text("/queue/s", "red-1", properties={"color": "red"}), text("/queue/s", "blue-x",
             properties={"color": "blue"}), text("/queue/s", "red-2", properties={"color": "red"}))
    assert broker.queues["/queue/s"].paged > 1400
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/s", ack_mode="client-individual", prefetch=1,
                                 selector="color = 'red'")
    drain(run, sink, subscription, 2)
    assert sink.texts() == ["red-1", "red-2"]
    memory_bounded(broker, slack=2)
    # the others are all still there, in order
    other = Sink()
    rest = run.subscribe(other, destination="/queue/s", ack_mode="client-individual", prefetch=1)
    run.wait(subscription.close())
    drain(run, other, rest, 1501)
    assert other.texts() == [*bodies(1500), "blue-x"]


def test_a_selective_consumer_gets_a_paged_match_that_comes_before_one_in_memory(run: Run) -> None:
    """Found by the model: a higher-priority paged message the selector accepts came after a
    lower-priority one in memory."""
    broker = run.broker
    assert broker is not None
    run.send(*[text("/queue/o", f"low{n}", priority=0, properties={"c": "red"}) for n in range(8)])
    run.send(*[text("/queue/o", f"mid{n}", priority=4, properties={"c": "red"}) for n in range(3)])
    run.send(text("/queue/o", "top", priority=9, properties={"c": "blue"}))
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/o", ack_mode="client-individual", prefetch=1,
                                 selector="c = 'red'")
    drain(run, sink, subscription, 11)
    assert sink.texts() == [*(f"mid{n}" for n in range(3)), *(f"low{n}" for n in range(8))]


def test_paged_messages_expire(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    now = broker.now_ms()
    run.send(*[text("/queue/e", body, expiration=now + 1000 if index >= 5 else 0)
               for index, body in enumerate(bodies(50))])
    assert broker.queues["/queue/e"].paged > 30
    run.clock.advance(2)  # (the broker's expiry check runs)
    assert broker.metrics.expired.count == 45 and broker.queues["/queue/e"].paged == 0
    assert broker.queues["/queue/e"].messages() and [text_of(m) for m in broker.queues["/queue/e"].messages()] \
        == bodies(5)
    run.restart()
    assert run.broker is not None
    assert len(run.broker.queues["/queue/e"]) == 5  # the store forgot the expired ones too


def test_redelivery_and_the_dead_letter_queue_on_a_paged_queue(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    run.send(*[text("/queue/r", body) for body in bodies(40)])
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/r", ack_mode="client-individual", prefetch=1)
    for attempt in range(3):
        (message, tag), = sink.got[-1:]
        assert message.text == "m000" and message.redelivered is (attempt > 0)  # type: ignore[attr-defined]
        run.wait(subscription.nack([tag]))
    run.settle()
    assert sink.got[-1][0].text == "m001"  # type: ignore[attr-defined]
    assert [m.text for m in broker.queues["/queue/DLQ.r"].messages()] == ["m000"]  # type: ignore[attr-defined]
    drain(run, sink, subscription, 3 + 39)
    assert [m.text for m, _ in sink.got[3:]] == bodies(40)[1:]  # type: ignore[attr-defined]


def test_a_transaction_into_a_paged_queue(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    run.send(*[text("/queue/t", body, persistent=False) for body in bodies(30)])
    assert broker.queues["/queue/t"].paged > 15
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/t", ack_mode="client-individual", prefetch=1)
    drain(run, sink, subscription, 30)
    assert sink.texts() == bodies(30)


def test_a_durable_subscription_and_topic_subscribers_page_their_backlogs(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    durable = Sink()
    first = run.subscribe(durable, destination="/topic/news", client_id="c", durable_name="d", ack_mode="client",
                          prefetch=1)
    run.wait(first.close())
    live = Sink()
    subscription = run.subscribe(live, destination="/topic/news", ack_mode="client-individual", prefetch=1)
    run.send(*[text("/topic/news", body) for body in bodies(40)])
    assert broker.durables["durable:c:d"].paged > 20
    drain(run, live, subscription, 40)
    assert live.texts() == bodies(40)
    run.restart()
    assert run.broker is not None
    again = Sink()
    resumed = run.subscribe(again, destination="/topic/news", client_id="c", durable_name="d",
                            ack_mode="client-individual", prefetch=1)
    drain(run, again, resumed, 40)
    assert again.texts() == bodies(40)


def test_a_restart_with_a_deep_backlog_keeps_memory_bounded_and_the_order(tmp_path: Path) -> None:
    run = Run(tmp_path, settings(memory_limit=10 ** 9), lazy_recovery=True)
    run.start()
    run.send(*[text("/queue/deep", body, priority=4 if index % 3 else 7) for index, body in enumerate(bodies(600))])
    run.send(*[text("/queue/other", body) for body in bodies(20)])
    run.crash()
    run.settings = settings()
    broker = run.start()
    memory_bounded(broker)
    queue = broker.queues["/queue/deep"]
    assert len(queue) == 600 and queue.paged >= 590
    assert len(broker.queues["/queue/other"]) == 20
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/deep", ack_mode="client-individual", prefetch=1)
    drain(run, sink, subscription, 300)
    run.wait(subscription.close())  # (the last one, not acknowledged, comes again)
    del sink.got[-1]
    expected = [body for index, body in enumerate(bodies(600)) if index % 3 == 0] + \
        [body for index, body in enumerate(bodies(600)) if index % 3]
    assert sink.texts() == expected[:len(sink.got)]
    run.settle()
    broker = run.restart()
    assert len(broker.queues["/queue/deep"]) == 600 - len(sink.got)  # the acknowledged ones are gone for good
    rest = Sink()
    subscription = run.subscribe(rest, destination="/queue/deep", ack_mode="client-individual", prefetch=1)
    drain(run, rest, subscription, 600 - len(sink.got))
    assert rest.texts() == expected[len(sink.got):]
    run.wait(broker.stop())


def test_the_page_file_is_deleted_at_start_and_stop(tmp_path: Path) -> None:
    pages = tmp_path / "pages.sqlite"
    pages.write_bytes(b"left by a crash")
    broker = EmbeddedBroker(Clock(), BrokerSettings(memory_limit=2 * message_size(text("/queue/np", "m000"))),
                            page_path=str(pages))
    broker.start()
    assert not pages.exists()
    for body in bodies(100):  # (paged-out messages are written in groups)
        broker.send(text("/queue/np", body, persistent=False))
    assert pages.exists() and broker.queues["/queue/np"].paged == 98
    assert broker.status()["memory"]["page_file"] == str(pages)
    broker.stop()
    assert not pages.exists()


def test_paging_is_logged_once_per_episode(run: Run) -> None:
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(observer(events.append))
    try:
        broker = run.broker
        assert broker is not None
        run.send(*[text("/queue/l", body) for body in bodies(60)])
        sink = Sink()
        subscription = run.subscribe(sink, destination="/queue/l", ack_mode="auto", prefetch=1)
        run.wait(subscription.close())
        run.send(*[text("/queue/l", body) for body in bodies(60)])
    finally:
        globalLogPublisher.removeObserver(observer(events.append))
    warnings = [e for e in events if e.get("log_level") == LogLevel.warn]
    paging = [e for e in warnings if "paging its messages" in e.get("log_format", "")]
    memory = [e for e in warnings if "memory limit reached" in e.get("log_format", "")]
    assert len(paging) == 2 and len(memory) == 2  # two episodes, not one line per message
    cleared = [e for e in events if "no longer paging" in e.get("log_format", "")]
    assert len(cleared) == 1


def test_metrics_show_memory_and_paging() -> None:
    registry = CollectorRegistry()
    size = message_size(text("/queue/m", "m000"))
    broker = EmbeddedBroker(Clock(), BrokerSettings(memory_limit=4 * size), registry=registry)
    broker.start()
    for body in bodies(10):
        broker.send(text("/queue/m", body, persistent=False))
    labels = {"destination": "/queue/m", "full_policy": "PAGE"}
    assert registry.get_sample_value("jmsgateway_broker_memory_limit_bytes") == 4 * size
    assert registry.get_sample_value("jmsgateway_broker_memory_used_bytes") == broker.memory.used > 0
    assert registry.get_sample_value("jmsgateway_broker_paged_messages", labels) == 6
    assert registry.get_sample_value("jmsgateway_broker_paged_bytes", labels) == 6 * size
    assert registry.get_sample_value("jmsgateway_broker_paged_out_total") == 1  # one episode


# -- BLOCK, FAIL, DROP -------------------------------------------------------------------


def limited(policy: Literal["PAGE", "BLOCK", "FAIL", "DROP"], **fields: Any) -> EmbeddedBroker:
    broker = EmbeddedBroker(Clock(), BrokerSettings(
        destinations={"/queue/limited.>": DestinationLimits(max_size=3 * LIMITED, full_policy=policy)}, **fields))
    broker.start()
    return broker


def test_fail_refuses_the_send_naming_destination_and_limit_and_stores_nothing() -> None:
    broker = limited("FAIL")
    for body in bodies(3):
        assert broker.send(text("/queue/limited.a", body, persistent=False)).called
    refused = broker.send(text("/queue/limited.a", "over", persistent=False))
    failure = refused.result
    refused.addErrback(lambda _: None)
    assert isinstance(failure, Failure) and isinstance(failure.value, DestinationFull)
    assert "/queue/limited.a" in str(failure.value) and f"max_size {3 * LIMITED} bytes" in str(failure.value)
    assert len(broker.queues["/queue/limited.a"]) == 3
    assert broker.metrics.refused_full.count == 1
    # other destinations are not concerned
    assert broker.send(text("/queue/free", "x", persistent=False)).called


def test_fail_refuses_a_whole_transaction() -> None:
    broker = limited("FAIL")
    refused = broker.send_batch([text("/queue/limited.b", body, persistent=False) for body in bodies(5)])
    failures: list[Any] = []
    refused.addErrback(failures.append)
    assert failures and isinstance(failures[0].value, DestinationFull)


def test_drop_discards_and_counts() -> None:
    broker = limited("DROP")
    for body in bodies(5):
        broker.send(text("/queue/limited.c", body, persistent=False))
    assert [m.text for m in broker.queues["/queue/limited.c"].messages()] == bodies(3)  # type: ignore[attr-defined]
    assert broker.metrics.dropped.count == 2


def test_block_holds_the_senders_until_consumers_make_room() -> None:
    broker = limited("BLOCK")
    congestion = broker.congestion_for("/queue/limited.d")
    assert congestion is not None and broker.congestion_for("/queue/free") is not congestion
    for body in bodies(4):
        broker.send(text("/queue/limited.d", body, persistent=False))
    assert congestion.congested  # the fourth was taken, its sender is now held
    released: list[bool] = []
    congestion.when_ready(lambda: released.append(True))
    sink = Sink()
    broker.subscribe(SubscriptionSpec("/queue/limited.d", ack_mode="auto"), sink)
    assert released and not congestion.congested
    assert sink.texts() == bodies(4)


def test_block_destinations_leave_no_flow_control_behind() -> None:
    """A SEND to each of 20,000 invented names under a BLOCK policy: the senders' flow control of a
    name lasts while someone holds it (the destination map's cache, a waiting session), not for ever;
    one made again for a name still blocked comes paused."""
    broker = limited("BLOCK")
    kept = broker.congestion_for("/queue/limited.kept")
    for n in range(20_000):
        assert broker.congestion_for(f"/queue/limited.invented-{n}") is not None
    assert len(broker.admission.congestions) <= 1
    assert broker.congestion_for("/queue/limited.kept") is kept  # (held: the same one)
    for body in bodies(4):
        broker.send(text("/queue/limited.full", body, persistent=False))
    assert "/queue/limited.full" in broker.admission.blocked
    broker.admission.blocked.add("/queue/limited.other")  # (blocked while nobody held its flow control)
    made = broker.congestion_for("/queue/limited.other")
    assert made is not None and made.congested
    again = broker.congestion_for("/queue/limited.full")
    assert again is not None and again.congested
    released: list[bool] = []
    again.when_ready(lambda: released.append(True))
    broker.subscribe(SubscriptionSpec("/queue/limited.full", ack_mode="auto"), Sink())
    assert released and not again.congested


def test_block_on_the_global_limit() -> None:
    broker = limited("BLOCK", memory_limit=2 * LIMITED)
    for body in bodies(3):
        broker.send(text("/queue/limited.e", body, persistent=False))
    congestion = broker.congestion_for("/queue/limited.e")
    assert congestion is not None and congestion.congested
    broker.subscribe(SubscriptionSpec("/queue/limited.e", ack_mode="auto"), Sink())
    assert not congestion.congested


def test_a_topic_subscriber_that_leaves_gives_its_memory_and_pages_back(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    sink = Sink()
    subscription = run.subscribe(sink, destination="/topic/gone", ack_mode="client", prefetch=1)
    run.send(*[text("/topic/gone", body, persistent=False) for body in bodies(40)])
    queue = broker.topics["/topic/gone"][0]
    assert queue.paged > 20 and broker.memory.used > 0
    run.wait(subscription.close())
    assert broker.memory.used == 0 and queue.paged == 0


def test_a_dropped_durable_subscription_and_a_deleted_temporary_queue_free_their_pages(run: Run) -> None:
    broker = run.broker
    assert broker is not None
    durable = run.subscribe(Sink(), destination="/topic/d", client_id="c", durable_name="x", ack_mode="client")
    run.wait(durable.close())
    broker.create_temporary("/remote-temp-queue/t1")
    run.send(*[text("/topic/d", body) for body in bodies(30)], *[text("/remote-temp-queue/t1", body)
                                                                  for body in bodies(30)])
    assert broker.durables["durable:c:x"].paged and broker.queues["/remote-temp-queue/t1"].paged
    run.wait(broker.unsubscribe_durable("c", "x"))
    broker.delete_destination("/remote-temp-queue/t1")
    assert broker.memory.used == 0


def test_a_page_file_that_cannot_be_written_keeps_messages_in_memory_and_says_so_once(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(observer(events.append))
    try:
        broker = EmbeddedBroker(Clock(), BrokerSettings(memory_limit=2 * ONE), page_path=str(blocker / "pages.sqlite"))
        broker.start()
        for body in bodies(10):
            assert broker.send(text("/queue/q", body, persistent=False)).called
    finally:
        globalLogPublisher.removeObserver(observer(events.append))
    assert [m.text for m in broker.queues["/queue/q"].messages()] == bodies(10)  # type: ignore[attr-defined]
    assert len([e for e in events if "cannot be paged out" in e.get("log_format", "")]) == 1


class SlowStore:
    """A store whose writes complete only when the test says so."""

    def __init__(self) -> None:
        self.writes: list[Deferred[None]] = []

    def open(self) -> Deferred[Snapshot]:
        return succeed(Snapshot())

    def close(self) -> Deferred[None]:
        return succeed(None)

    def add_batch(self, entries: list[Any]) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        self.writes.append(d)
        return d

    def remove(self, queue: str, message_id: str) -> Deferred[None]:
        return succeed(None)


def test_senders_are_held_while_the_store_is_behind() -> None:
    """Found by the black-box flood: one pipelined sender of persistent messages outran the store,
    and the messages waiting for their write grew without bound."""
    store = SlowStore()
    broker = EmbeddedBroker(Clock(), BrokerSettings(memory_limit=4 * 2**20), store)  # type: ignore[arg-type]
    broker.start()
    congestion = broker.congestion_for("/queue/w")
    assert congestion is not None and not congestion.congested
    big = "x" * 100_000
    for n in range(12):  # 1.2 MB waiting: past the hold of 1 MiB
        broker.send(TextMessage(destination="/queue/w", message_id=f"ID:{n}", text=big, persistent=True))
    assert congestion.congested
    for write in store.writes[:7]:
        write.callback(None)
    assert not congestion.congested  # back under half of it
    assert len(broker.queues["/queue/w"]) == 7


def test_a_page_file_that_fills_its_disk_stays_sound_and_loses_nothing(run: Run) -> None:
    """A write that fails (SQLite's max_page_count makes the file 'full' as a full disk does) is
    rolled back: the file stays sound, its messages go back to memory and every count stays true."""
    broker = run.broker
    assert broker is not None
    sent = [f"{n:04}:" + "x" * 2000 for n in range(400)]
    run.send(*[text("/queue/full", body, persistent=False) for body in sent[:40]])
    queue = broker.queues["/queue/full"]
    assert queue.paged
    db = broker.page_file().db
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    errors: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_level") == LogLevel.error:
            errors.append(str(event.get("log_format")))

    globalLogPublisher.addObserver(observer(observe))
    try:
        for body in sent[40:]:
            run.send(text("/queue/full", body, persistent=False))
    finally:
        globalLogPublisher.removeObserver(observer(observe))
    assert len([error for error in errors if "cannot be paged out" in error]) == 1, errors
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert len(queue) == 400 and queue.memory == sum(entry[3] for entry in queue._heap)
    assert broker.memory.used == queue.memory
    db.execute("PRAGMA max_page_count = 1073741823")
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/full", ack_mode="client-individual", prefetch=1)
    drain(run, sink, subscription, 400)
    assert sink.texts() == sent
    run.wait(subscription.ack([sink.got[-1][1]]))
    assert len(queue) == 0 and queue.paged == 0 and broker.memory.used == 0


def test_a_restart_reads_no_stored_message_until_a_consumer_reaches_it(tmp_path: Path) -> None:
    """Restart time and memory must not grow with the backlog: recovery counts each queue
    from the store's order index; the messages stay in the store (not in the page file, not
    in the store's row index) until consumers reach them, then come in priority order."""
    run = Run(tmp_path, settings(memory_limit=10 ** 9), lazy_recovery=True)
    run.start()
    total = 3000
    run.send(*[text("/queue/deep", body, priority=4 if index % 5 else 8)
               for index, body in enumerate(bodies(total))])
    run.crash()
    run.settings = settings()
    broker = run.start()
    store: Any = broker.store
    assert len(store._rows) < 100, "recovery read the stored messages into the row index"
    queue = broker.queues["/queue/deep"]
    assert len(queue) == total
    assert broker.page_file().opened is False or queue.page is None or queue.page.fcount == 0, \
        "recovery copied the backlog into the page file"
    memory_bounded(broker)
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/deep", ack_mode="client-individual", prefetch=1)
    drain(run, sink, subscription, 50)
    expected = [body for index, body in enumerate(bodies(total)) if index % 5 == 0] + \
        [body for index, body in enumerate(bodies(total)) if index % 5]
    assert sink.texts() == expected[:len(sink.got)]
    run.wait(subscription.close())
    del sink.got[-1]
    run.settle()
    broker = run.restart()
    assert len(broker.queues["/queue/deep"]) == total - len(sink.got)  # acknowledged ones left the store
    rest = Sink()
    subscription = run.subscribe(rest, destination="/queue/deep", ack_mode="client-individual", prefetch=1)
    drain(run, rest, subscription, total - len(sink.got))
    assert rest.texts() == expected[len(sink.got):]
    run.wait(subscription.ack([rest.got[-1][1]]))
    run.settle()
    broker = run.restart()
    assert len(broker.queues.get("/queue/deep", [])) == 0
    run.wait(broker.stop())
    run.broker = None


def test_a_store_of_schema_version_1_gets_the_order_index_and_keeps_its_messages(tmp_path: Path) -> None:
    import sqlite3

    from gateway.broker.store.sqlite_records import encode_message

    path = tmp_path / "broker.sqlite"
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("CREATE TABLE messages (seq INTEGER PRIMARY KEY, queue TEXT NOT NULL, message_id TEXT NOT NULL, "
               "expiration INTEGER NOT NULL, redelivery INTEGER NOT NULL, record BLOB NOT NULL)")
    db.execute("CREATE TABLE durables (key TEXT PRIMARY KEY, destination TEXT NOT NULL, selector TEXT)")
    db.execute(f"PRAGMA application_id = {0x4A4D5347}")
    db.execute("PRAGMA user_version = 1")
    for seq, body in enumerate(bodies(30), start=1):
        message = text("/queue/old", body, priority=9 if seq % 10 == 0 else 4)
        db.execute("INSERT INTO messages VALUES (?, ?, ?, 0, 0, ?)",
                   (seq, "/queue/old", message.message_id, encode_message(message)))
    db.close()
    run = Run(tmp_path, settings(), lazy_recovery=True)
    broker = run.start()
    assert len(broker.queues["/queue/old"]) == 30
    sink = Sink()
    subscription = run.subscribe(sink, destination="/queue/old", ack_mode="client-individual", prefetch=1)
    drain(run, sink, subscription, 30)
    numbered = list(enumerate(bodies(30), start=1))
    assert sink.texts() == [b for seq, b in numbered if seq % 10 == 0] + [b for seq, b in numbered if seq % 10]
    run.wait(broker.stop())
    check = sqlite3.connect(str(path))
    assert check.execute("PRAGMA user_version").fetchone()[0] == 3  # (through 2)
    check.close()


def test_a_search_in_slices_keeps_the_order_and_delivers_each_message_once(
    run: Run, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Searches of the page that stop after every 32 messages (and go on in later turns),
    two selective consumers and priorities: each gets its matches in order, once; what they
    refuse stays, in order."""
    monkeypatch.setattr(queue_module, "SEARCH_SLICE", 0.0)
    broker = run.broker
    assert broker is not None
    colors = ["red" if n % 97 == 5 else "green" if n % 89 == 7 else "blue" for n in range(2000)]
    run.send(*[text("/queue/x", f"{color}-{n:04}", properties={"color": color}, priority=7 if n % 500 == 400 else 4)
               for n, color in enumerate(colors)])
    assert broker.queues["/queue/x"].paged > 1900
    reds, greens = Sink(), Sink()
    red = run.subscribe(reds, destination="/queue/x", ack_mode="client-individual", prefetch=1,
                        selector="color = 'red'")
    green = run.subscribe(greens, destination="/queue/x", ack_mode="client-individual", prefetch=1,
                          selector="color = 'green'")
    expected_red = sorted((f"red-{n:04}" for n, c in enumerate(colors) if c == "red"),
                          key=lambda body: (int(body[4:]) % 500 != 400, int(body[4:])))
    expected_green = sorted((f"green-{n:04}" for n, c in enumerate(colors) if c == "green"),
                            key=lambda body: (int(body[6:]) % 500 != 400, int(body[6:])))
    for sink, subscription, expected in ((reds, red, expected_red), (greens, green, expected_green)):
        drain(run, sink, subscription, len(expected))
        run.wait(subscription.ack([sink.got[-1][1]]))
        assert sink.texts() == expected
    for _ in range(100):
        run.clock.advance(0)
    assert len(reds.got) == len(expected_red) and len(greens.got) == len(expected_green)
    rest = Sink()
    others = run.subscribe(rest, destination="/queue/x", ack_mode="client-individual", prefetch=1)
    run.wait(red.close())
    run.wait(green.close())
    blues = [(n, f"blue-{n:04}") for n, c in enumerate(colors) if c == "blue"]
    drain(run, rest, others, len(blues))
    assert rest.texts() == [body for n, body in sorted(blues, key=lambda nb: (nb[0] % 500 != 400, nb[0]))]


def test_a_restart_dead_letters_a_backlog_message_past_max_redeliveries_without_reading_the_rest(
    tmp_path: Path,
) -> None:
    """A delivery cut short by each crash counts; past max_redeliveries (2) the restart moves
    the message to the dead-letter queue, found by its redelivery count, not by reading the backlog."""
    run = Run(tmp_path, settings(), lazy_recovery=True)
    run.start()
    run.send(text("/queue/orders", "crasher"), *[text("/queue/orders", body) for body in bodies(500)])
    for attempt in range(3):
        sink = Sink()
        run.subscribe(sink, destination="/queue/orders", ack_mode="client-individual", prefetch=1)
        assert sink.texts()[:1] == ["crasher"] and sink.got[0][0].redelivery_count == attempt
        run.settle()
        run.restart()  # the consumer never answers: the broker died under it
    broker = run.broker
    assert broker is not None
    assert len(broker.store._rows) < 10  # type: ignore[attr-defined]
    dead = Sink()
    run.subscribe(dead, destination="/queue/DLQ.orders")
    assert dead.texts() == ["crasher"]
    rest = Sink()
    subscription = run.subscribe(rest, destination="/queue/orders", ack_mode="client-individual", prefetch=1)
    drain(run, rest, subscription, 500)
    assert rest.texts() == bodies(500)
    run.wait(broker.stop())
    run.broker = None
