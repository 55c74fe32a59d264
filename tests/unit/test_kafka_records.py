"""Message <-> Kafka record conversion: the JMS-Bridge names and typed round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.message.kafka_records import (
    ORIGIN_HEADER,
    TYPES_HEADER,
    SoftFailure,
    extract_key,
    message_to_record,
    record_to_message,
)
from gateway.message.model import BytesMessage, Message, ObjectMessage, PropertyValue, TextMessage


def full_message() -> TextMessage:
    return TextMessage(
        destination="/queue/orders",
        message_id="ID:gw-1",
        correlation_id="corr-7",
        reply_to="/queue/replies",
        type="invoice",
        persistent=True,
        priority=7,
        expiration=1_900_000_000_000,
        timestamp=1_800_000_000_000,
        properties={"s": "text", "i": 42, "f": 2.5, "b": True, "raw": b"\xff\x00", "none": None},
        text="héllo",
    )


def test_headers_use_the_jms_bridge_names() -> None:
    key, value, headers = message_to_record(full_message(), None, "gw-1")
    named = dict(headers)
    assert key == b"ID:gw-1"
    assert value == "héllo".encode()
    assert named["jms.MessageId"] == b"ID:gw-1"
    assert named["jms.CorrelationId"] == b"corr-7"
    assert named["jms.ReplyTo"] == b"/queue/replies"
    assert named["jms.Type"] == b"invoice"
    assert named["jms.DeliveryMode"] == b"2"
    assert named["jms.Priority"] == b"7"
    assert named["jms.Expiration"] == b"1900000000000"
    assert named["jms.Timestamp"] == b"1800000000000"
    assert named["jms.Destination"] == b"/queue/orders"
    assert named["jms.MessageType"] == b"text"
    assert named["jms.s"] == b"text" and named["jms.i"] == b"42" and named["jms.b"] == b"true"
    assert named["jms.raw"] == b"\xff\x00" and named["jms.none"] is None
    assert json.loads(named[TYPES_HEADER] or b"") == {"b": "boolean", "f": "double", "i": "long", "raw": "bytes"}
    assert named[ORIGIN_HEADER] == b"gw-1"


def test_full_round_trip() -> None:
    original = full_message()
    key, value, headers = message_to_record(original, None, "gw-1")
    back = record_to_message(key, value, headers)
    assert isinstance(back, TextMessage) and back.text == "héllo"
    for name in ("destination", "message_id", "correlation_id", "reply_to", "type", "persistent", "priority",
                 "expiration", "timestamp"):
        assert getattr(back, name) == getattr(original, name), name
    expected = dict(original.properties)
    expected[ORIGIN_HEADER] = "gw-1"
    assert back.properties == expected
    assert type(back.properties["i"]) is int and type(back.properties["f"]) is float


def test_bytes_message_stays_bytes_even_when_utf8() -> None:
    message = BytesMessage(message_id="ID:b", body=b"plain ascii")
    back = record_to_message(*message_to_record(message, None, None))
    assert isinstance(back, BytesMessage) and back.body == b"plain ascii"


def test_plain_kafka_records_become_text_or_bytes() -> None:
    text = record_to_message(b"k", "grüße".encode(), [("source", b"crm")], fallback_id="ID:kafka:t:0:5",
                             destination="/topic/kafka.t", timestamp=123)
    assert isinstance(text, TextMessage) and text.text == "grüße"
    assert text.message_id == "ID:kafka:t:0:5" and text.destination == "/topic/kafka.t" and text.timestamp == 123
    assert text.properties == {"source": "crm"}
    assert text.persistent  # Kafka records are durable
    binary = record_to_message(None, b"\xff\xfe", None)
    assert isinstance(binary, BytesMessage) and binary.body == b"\xff\xfe"
    as_bytes = record_to_message(None, b"ascii", None, text_records=False)
    assert isinstance(as_bytes, BytesMessage)


def test_property_named_like_a_header_is_escaped() -> None:
    message = TextMessage(message_id="ID:x", text="", properties={"Type": "prop", "MessageType": "p2"})
    message.type = "header"
    _, _, headers = message_to_record(message, None, None)
    assert ("jms.property.Type", b"prop") in headers
    back = record_to_message(None, b"", headers)
    assert back.type == "header" and back.properties == {"Type": "prop", "MessageType": "p2"}


def test_origin_property_is_replaced_by_our_origin() -> None:
    message = TextMessage(message_id="ID:x", text="", properties={ORIGIN_HEADER: "other-gw"})
    _, _, headers = message_to_record(message, None, "gw-1")
    assert [v for n, v in headers if n == ORIGIN_HEADER] == [b"gw-1"]
    assert "jms." + ORIGIN_HEADER not in dict(headers)


def test_key_extraction() -> None:
    message = TextMessage(message_id="ID:x", correlation_id="abc-1", properties={"n": 7, "bad": "a/b", "f": True})
    assert extract_key(message, "msg.header.CorrelationId") == b"abc-1"
    assert extract_key(message, "JMSCorrelationID") == b"abc-1"
    assert extract_key(message, "n") == b"7"
    assert extract_key(message, None) == b"ID:x"
    for header, reason in (("missing", "no-key"), ("bad", "key-not-alphanumeric"), ("f", "key-not-alphanumeric")):
        with pytest.raises(SoftFailure) as info:
            extract_key(message, header)
        assert info.value.reason == reason


def test_only_text_and_bytes_convert() -> None:
    with pytest.raises(SoftFailure) as info:
        message_to_record(ObjectMessage(message_id="ID:o", payload=b"x"), None, None)
    assert info.value.reason == "unsupported-type"


property_names = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N"), include_characters="_.-"), min_size=1, max_size=12
)
property_values: st.SearchStrategy[PropertyValue] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)


@given(
    properties=st.dictionaries(property_names, property_values, max_size=8),
    body=st.one_of(st.text(max_size=50), st.binary(max_size=50)),
    correlation=st.one_of(st.none(), st.text(max_size=10)),
    priority=st.integers(min_value=0, max_value=9),
    persistent=st.booleans(),
)
def test_round_trip_keeps_types(
    properties: dict[str, PropertyValue], body: str | bytes, correlation: str | None, priority: int, persistent: bool
) -> None:
    properties.pop(ORIGIN_HEADER, None)
    message: Message = TextMessage(text=body) if isinstance(body, str) else BytesMessage(body=body)
    message.message_id = "ID:h-1"
    message.correlation_id = correlation
    message.priority = priority
    message.persistent = persistent
    message.properties = properties
    back = record_to_message(*message_to_record(message, None, None))
    assert type(back) is type(message)
    assert back.properties == properties
    assert {k: type(v) for k, v in back.properties.items()} == {k: type(v) for k, v in properties.items()}
    assert (back.correlation_id, back.priority, back.persistent) == (correlation, priority, persistent)
    if isinstance(message, TextMessage):
        assert isinstance(back, TextMessage) and back.text == message.text
    else:
        assert isinstance(back, BytesMessage) and back.body == body
