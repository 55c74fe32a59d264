"""The Kafka connector's idempotency window (gateway.connectors.kafka_dedup): keys by topic and id,
the tail read once per topic before the first keyed send, duplicates settled without a send."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import formatEvent, globalLogPublisher

from gateway.connectors.kafka_dedup import TopicSendIds, key_of_record
from gateway.message.model import TextMessage
from tests.support.log_events import observer


def message(sent_id: str | None, destination: str = "/queue/kafka.t", header: str = "x-dedup-id") -> TextMessage:
    result = TextMessage(destination=destination, text="x")
    if sent_id is not None:
        result.properties[header] = sent_id
    return result


class Sends:
    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def __call__(self, fresh: list[Any]) -> Deferred[Any]:
        self.batches.append(fresh)
        return succeed(len(fresh))


def window(tail: dict[str, list[tuple[str, int]]] | None = None, size: int = 10) -> tuple[TopicSendIds, list[str]]:
    read: list[str] = []

    def read_tail(topic: str) -> Deferred[list[tuple[str, int]]]:
        read.append(topic)
        return succeed((tail or {}).get(topic, []))

    clock = Clock()
    clock.advance(1000)
    return TopicSendIds(clock, read_tail, size=size, seconds=60), read


def test_a_resent_id_is_settled_without_a_second_send() -> None:
    ids, _ = window()
    sends = Sends()
    ids.send([("t", message("a"))], sends)
    result: list[Any] = []
    ids.send([("t", message("a"))], sends).addCallback(result.append)
    assert len(sends.batches) == 1
    assert result == [None]
    assert ids.window.duplicates == 1


def test_the_key_is_the_topic_not_the_destination_alias() -> None:
    ids, _ = window()
    sends = Sends()
    ids.send([("t", message("a", "/queue/kafka.t"))], sends)
    ids.send([("t", message("a", "/topic/t"))], sends)
    ids.send([("u", message("a", "/queue/u"))], sends)  # another topic: not a duplicate
    assert len(sends.batches) == 2


def test_the_originals_are_sent_and_only_the_fresh_ones() -> None:
    ids, _ = window()
    sends = Sends()
    first = message("a")
    ids.send([("t", first)], sends)
    fresh, plain = message("b"), message(None)
    ids.send([("t", message("a")), ("t", fresh), ("t", plain)], sends)
    assert sends.batches[0] == [first]
    assert sends.batches[1] == [fresh, plain]
    assert sends.batches[1][0].destination == "/queue/kafka.t"


def test_the_tail_is_read_once_per_topic_before_the_first_send() -> None:
    ids, read = window({"t": [("kafka:t\nold", 999_000)]})
    sends = Sends()
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(observer(events.append))
    try:
        ids.send([("t", message("old"))], sends)
        ids.send([("t", message("new"))], sends)
    finally:
        globalLogPublisher.removeObserver(observer(events.append))
    assert read == ["t"]
    assert [len(b) for b in sends.batches] == [1]  # "old" was in the tail
    said = [formatEvent(event) for event in events]
    assert any("1 keys (x-dedup-id) read back from the tail of topic t" in line for line in said), said
    assert not any("embedded broker" in line for line in said), said  # (the Kafka window, not the broker's)


def test_a_send_waits_for_the_tail_being_read() -> None:
    reading: Deferred[list[tuple[str, int]]] = Deferred()
    clock = Clock()
    ids = TopicSendIds(clock, lambda topic: reading, size=10, seconds=60)
    sends = Sends()
    ids.send([("t", message("a"))], sends)
    ids.send([("t", message("b"))], sends)
    assert sends.batches == []
    reading.callback([("kafka:t\na", 0)])
    assert [[m.properties["x-dedup-id"] for m in b] for b in sends.batches] == [["b"]]


def test_an_unreadable_tail_leaves_an_empty_window() -> None:
    ids = TopicSendIds(Clock(), lambda topic: Deferred.fromCoroutine(_fails()), size=10, seconds=60)
    sends = Sends()
    ids.send([("t", message("a"))], sends)
    assert len(sends.batches) == 1


async def _fails() -> list[tuple[str, int]]:
    raise OSError("no broker")


def test_a_failed_send_leaves_the_id_out_of_the_window() -> None:
    ids, _ = window()
    failed: Deferred[Any] = Deferred()
    ids.send([("t", message("a"))], lambda fresh: failed).addErrback(lambda _: None)
    failed.errback(OSError("refused"))
    sends = Sends()
    ids.send([("t", message("a"))], sends)
    assert len(sends.batches) == 1


def test_artemis_header_and_records_keys() -> None:
    assert key_of_record("t", [("jms.x-dedup-id", b"a"), ("jms._AMQ_DUPL_ID", b"b")]) == "kafka:t\na"
    assert key_of_record("t", [("jms._AMQ_DUPL_ID", b"b")]) == "kafka:t\nb"
    assert key_of_record("t", [("jms.MessageId", b"ID:1")]) is None
    assert key_of_record("t", None) is None
    ids, _ = window({"t": [("kafka:t\nb", 999_000)]})
    sends = Sends()
    ids.send([("t", message("b", header="_AMQ_DUPL_ID"))], sends)
    assert sends.batches == []


def test_size_zero_is_off() -> None:
    ids, _ = window(size=0)
    assert not ids.enabled
