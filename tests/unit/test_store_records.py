"""The stored form of messages: every field and value type round-trips, garbage is refused."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker.store.sqlite_records import decode_message, encode_message
from gateway.errors import StoreError
from gateway.message.model import (
    BytesMessage,
    MapMessage,
    Message,
    ObjectMessage,
    StreamMessage,
    TextMessage,
)
from tests.unit.test_store_contract import every_kind, same_message

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=64)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
optional_text = st.none() | st.text(max_size=40)

headers: dict[str, Any] = {
    "destination": st.text(max_size=40),
    "message_id": st.text(max_size=40),
    "correlation_id": optional_text,
    "reply_to": optional_text,
    "type": optional_text,
    "persistent": st.booleans(),
    "priority": st.integers(0, 9),
    "expiration": st.integers(0, 2**62),
    "timestamp": st.integers(0, 2**62),
    "redelivered": st.booleans(),
    "redelivery_count": st.integers(0, 2**31),
    "properties": st.dictionaries(st.text(max_size=16), scalars, max_size=8),
}

messages = st.one_of(
    st.builds(Message, **headers),
    st.builds(TextMessage, text=st.none() | st.text(), **headers),
    st.builds(BytesMessage, body=st.binary(max_size=512), **headers),
    st.builds(MapMessage, map=st.dictionaries(st.text(max_size=8), values, max_size=6), **headers),
    st.builds(ObjectMessage, payload=st.binary(max_size=128), encoding=st.text(max_size=16), **headers),
    st.builds(StreamMessage, items=st.lists(values, max_size=6), **headers),
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_any_message_round_trips(message: Message) -> None:
    again = decode_message(encode_message(message))
    assert same_message(message, again)


def test_every_kind_round_trips() -> None:
    for message in every_kind():
        assert same_message(message, decode_message(encode_message(message)))


def test_values_keep_their_type() -> None:
    message = TextMessage(properties={"one": 1, "one_float": 1.0, "true": True, "none": None, "b": b"1", "s": "1"})
    again = decode_message(encode_message(message))
    assert {key: type(value) for key, value in again.properties.items()} == {
        "one": int, "one_float": float, "true": bool, "none": type(None), "b": bytes, "s": str,
    }


def test_a_text_body_is_stored_once() -> None:
    body = "x" * 10_000
    record = encode_message(TextMessage(destination="/queue/a", message_id="ID:1", text=body))
    assert len(body) < len(record) < len(body) + 100


@pytest.mark.parametrize("value", [object(), {1: "int key"}, {1.5}])
def test_values_that_cannot_be_stored_are_refused(value: Any) -> None:
    with pytest.raises(StoreError, match="cannot store"):
        encode_message(TextMessage(message_id="ID:1", properties={"bad": value}))


def test_out_of_range_header_fields_are_refused() -> None:
    with pytest.raises(StoreError, match="ID:1"):
        encode_message(TextMessage(message_id="ID:1", priority=1000))


@pytest.mark.parametrize(
    "record",
    [b"", b"\x01", b"\x02" + b"\x00" * 30, b"\x01\x09" + b"\x00" * 30],
    ids=["empty", "short", "unknown-version", "unknown-kind"],
)
def test_garbage_is_refused(record: bytes) -> None:
    with pytest.raises(ValueError):
        decode_message(record)


@settings(max_examples=200, deadline=None)
@given(messages, st.data())
def test_a_truncated_or_extended_record_is_refused(message: Message, data: st.DataObject) -> None:
    record = encode_message(message)
    cut = data.draw(st.integers(0, len(record) - 1))
    with pytest.raises(ValueError):
        decode_message(record[:cut])
    with pytest.raises(ValueError):
        decode_message(record + b"\x00")


def test_fields_are_all_covered() -> None:
    # A new Message field must be added to the record format (and to this list).
    assert [f.name for f in dataclasses.fields(Message)] == [
        "destination", "message_id", "correlation_id", "reply_to", "type", "persistent", "priority",
        "expiration", "timestamp", "redelivered", "redelivery_count", "properties",
    ]
