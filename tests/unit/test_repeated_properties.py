"""Issue 39: a producer's repeated properties, read and written once (the application shape).

An application's producer sends the same headers with every SEND (a ``content-type``), so its messages
carry the same string properties.  :class:`gateway.message.convert.PropertyMemo` (one per connection)
gives a SEND whose headers equal the last ones' a copy of the properties they made, and
:class:`gateway.stomp.delivery.MessageEncoder` writes the header lines of properties equal to the last
ones it wrote again.  Neither may change a message or a frame: seeded random sequences with repeats,
equal dicts whose values differ in type (``"1"``, ``1``, ``1.0``, ``True``), reserved names, escapes,
charsets, and dicts changed after they were used are compared with the code without the memos.
"""

from __future__ import annotations

import random

import pytest

from gateway.message import convert
from gateway.message.convert import PropertyMemo, frame_to_message, message_to_frame
from gateway.message.model import MESSAGE_ID_PREFIX, BytesMessage, Message, PropertyValue, TextMessage
from gateway.stomp.delivery import MessageEncoder
from gateway.wire.codec import encode_frame
from gateway.wire.frame import VERSIONS, Frame

SEEDS = range(8)

HEADER_CHOICES: list[dict[str, str]] = [
    {"destination": "/queue/a", "persistent": "false"},
    {"destination": "/queue/a", "content-type": "text/plain", "persistent": "false", "content-length": "1"},
    {"destination": "/queue/a", "content-type": "text/plain", "persistent": "false", "content-length": "1"},
    {"destination": "/queue/b", "content-type": "text/plain", "persistent": "false", "content-length": "1"},
    {"destination": "/queue/a", "content-type": "text/plain; charset=latin-1"},
    {"destination": "/queue/a", "content-type": "text/plain; charset=utf-8", "app": "x"},
    {"destination": "/queue/a", "app": "x", "content-type": "text/plain", "receipt": "r"},
    {"destination": "/queue/a", "content-type": "text/plain", "app": "x"},
    {"destination": "/queue/a", "app": "x", "content-type": "text/plain"},  # (equal dicts, another order)
    {"destination": "/queue/a", "app": "y", "priority": "4", "correlation-id": "c"},
    {"destination": "/queue/a", "a:b": "c\\d", "JMSXGroupID": "g"},
]


def _sends(rng: random.Random, count: int) -> list[dict[str, str]]:
    """Runs of equal headers (a producer's), now and then a header that differs every time."""
    sends: list[dict[str, str]] = []
    while len(sends) < count:
        headers = dict(rng.choice(HEADER_CHOICES))
        if rng.random() < 0.1:
            headers["unique"] = str(len(sends))
        sends.extend(dict(headers) for _ in range(rng.choice((1, 1, 2, 5, 20))))
    return sends


def _fields(message: Message) -> dict[str, object]:
    fields = {name: getattr(message, name) for name in (
        "destination", "persistent", "priority", "expiration", "correlation_id", "reply_to", "type",
        "redelivered", "redelivery_count", "properties")}
    fields["class"] = type(message)
    return fields


@pytest.mark.parametrize("seed", SEEDS)
def test_a_connection_s_sends_make_the_messages_they_made_without_the_memo(seed: int) -> None:
    rng = random.Random(seed)
    memo = PropertyMemo()
    hits = 0
    for headers in _sends(rng, 3_000):
        frame = Frame("SEND", dict(headers), b"y")
        made = frame_to_message(frame, now_ms=1, memo=memo)
        expected = frame_to_message(Frame("SEND", dict(headers), b"y"), now_ms=1)
        assert _fields(made) == _fields(expected)
        assert list(made.properties) == list(expected.properties)  # (their order too)
        hits += memo.headers is not None and made.properties == memo.properties
        if rng.random() < 0.3:  # the message's dict and the frame's are their own: a change stays in them
            made.properties["changed"] = "later"
            made.properties.pop("app", None)
            frame.headers.clear()
            frame.headers.update(rng.choice(HEADER_CHOICES))
    assert hits > 1_000


def test_equal_headers_give_the_kept_properties_without_reading_the_headers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    memo = PropertyMemo()
    headers = {"destination": "/queue/a", "content-type": "text/plain", "content-length": "1"}
    first = frame_to_message(Frame("SEND", dict(headers), b"y"), memo=memo)
    read: list[dict[str, str]] = []
    original = PropertyMemo.read

    def reading(self: PropertyMemo, headers: dict[str, str]) -> dict[str, PropertyValue]:
        read.append(headers)
        return original(self, headers)

    monkeypatch.setattr(PropertyMemo, "read", reading)
    second = frame_to_message(Frame("SEND", dict(headers), b"y"), memo=memo)
    assert read == []
    assert second.properties == first.properties == {"content-type": "text/plain"}
    assert second.properties is not first.properties
    frame_to_message(Frame("SEND", {**headers, "content-type": "text/html"}, b"y"), memo=memo)
    assert len(read) == 1  # (other headers: read)


def test_a_producer_whose_headers_always_differ_stops_comparing_for_a_while(
        monkeypatch: pytest.MonkeyPatch) -> None:
    memo = PropertyMemo()
    compared: list[int] = []

    class Headers(dict[str, str]):
        def __eq__(self, other: object) -> bool:
            if isinstance(other, dict):  # (against None, nothing kept: no comparison of headers)
                compared.append(1)
            return super().__eq__(other)

        __hash__ = None

    def send(index: int) -> Message:
        return frame_to_message(Frame("SEND", Headers({"destination": "/queue/a", "id": str(index)}), b"y"),
                                memo=memo)

    for index in range(convert.MEMO_MISSES):
        assert send(index).properties == {"id": str(index)}
    misses = len(compared)
    for index in range(convert.MEMO_SKIPPED):
        assert send(index).properties == {"id": str(index)}
    assert len(compared) == misses  # (skipped: read without the comparison)
    send(0)
    send(0)
    assert send(0).properties == {"id": "0"}
    assert len(compared) > misses  # (and compared again after)


PROPERTY_CHOICES: list[dict[str, PropertyValue]] = [
    {},
    {"content-type": "text/plain"},
    {"content-type": "text/plain"},
    {"content-type": "text/html"},
    {"n": "1"},
    {"n": 1},
    {"n": 1.0},
    {"n": True},
    {"n": "true"},
    {"n": b"1"},
    {"a:b": "c\\d", "e": "f\ng"},
    {"content-type": "text/plain", "app": "x"},
    {"app": "x", "content-type": "text/plain"},
    {"type": "reserved"},
    {"bad": "nul\x00"},
    {"k": "\ud800"},
]


def _message(rng: random.Random, index: int, properties: dict[str, PropertyValue]) -> Message:
    message: Message = BytesMessage(body=b"x") if rng.random() < 0.5 else TextMessage(text="x")
    message.destination = "/queue/a"
    message.message_id = f"{MESSAGE_ID_PREFIX}{index}"
    message.timestamp = index
    message.properties = properties
    return message


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("version", VERSIONS)
def test_one_subscription_s_messages_are_written_as_the_general_path_writes_them(seed: int, version: str) -> None:
    rng = random.Random(seed)
    encoder = MessageEncoder("s", "/queue/a", version)
    used: list[dict[str, PropertyValue]] = []
    for index in range(1_500):
        if used and rng.random() < 0.25:  # a dict used before, changed since (the kept lines must not follow it)
            properties = rng.choice(used)
            if properties:
                name = rng.choice(list(properties))
                changed: list[PropertyValue] = ["1", 1, 1.0, True, "other", "text/plain"]
                properties[name] = rng.choice(changed)
        else:
            properties = dict(rng.choice(PROPERTY_CHOICES))
            used.append(properties)
        message = _message(rng, index, properties)
        data = encoder.encode(message, None)
        if data is None:
            continue
        assert data == encode_frame(message_to_frame(message, "s", None, "/queue/a"), version), properties


def test_equal_string_properties_reuse_the_lines_written_last() -> None:
    encoder = MessageEncoder("s", "/queue/a", "1.2")
    first = _message(random.Random(0), 1, {"content-type": "text/plain"})
    assert encoder.encode(first, None) is not None
    assert encoder._lines_of == {"content-type": "text/plain"}
    assert encoder._lines_of is not first.properties  # (a copy: the message's dict may change)
    numbers = _message(random.Random(0), 2, {"n": 1})
    assert encoder.encode(numbers, None) is not None
    assert encoder._lines_of == {"content-type": "text/plain"}  # (not kept: only string properties are)
