"""JMS message <-> broker STOMP frame mapping (gateway.connectors.stomp_mapping)."""

from __future__ import annotations

import json

import pytest

from gateway.connectors.stomp_mapping import (
    XSTREAM_JSON,
    decode_map,
    encode_map,
    message_from_frame,
    send_frame_parts,
)
from gateway.errors import ConnectorError
from gateway.message.model import BytesMessage, MapMessage, ObjectMessage, StreamMessage, TextMessage
from gateway.wire.frame import Frame


def test_text_message_is_sent_without_content_length_and_with_jms_headers() -> None:
    message = TextMessage(
        destination="/queue/a",
        message_id="ID:gw-1",
        text="hé",
        correlation_id="c",
        reply_to="/queue/r",
        type="t",
        persistent=True,
        priority=6,
        expiration=123,
        timestamp=99,
        properties={"n": 3, "ok": True},
    )
    headers, body, text = send_frame_parts(message)
    assert text is True
    assert body == "hé".encode()
    assert headers == {
        "correlation-id": "c",
        "reply-to": "/queue/r",
        "type": "t",
        "persistent": "true",
        "priority": "6",
        "expires": "123",
        "timestamp": "99",
        "n": "3",
        "ok": "true",
    }


def test_no_expires_header_for_a_message_that_never_expires() -> None:
    headers, _, _ = send_frame_parts(TextMessage(destination="/queue/a", text="x"))
    assert "expires" not in headers and "persistent" not in headers


def test_text_with_nul_uses_amq_msg_type_or_fails() -> None:
    message = TextMessage(destination="/queue/a", text="a\x00b")
    headers, body, text = send_frame_parts(message)
    assert (headers["amq-msg-type"], body, text) == ("text", b"a\x00b", False)
    with pytest.raises(ConnectorError, match="NUL"):
        send_frame_parts(message, amq_msg_type=False)


def test_bytes_message_keeps_content_length() -> None:
    headers, body, text = send_frame_parts(BytesMessage(destination="/queue/a", body=b"\x00\x01"))
    assert (body, text) == (b"\x00\x01", False)
    assert "amq-msg-type" not in headers


def test_map_message_becomes_jms_map_json() -> None:
    message = MapMessage(destination="/queue/a", map={"s": "v", "i": 1, "l": 2**40, "d": 0.5, "b": False})
    headers, body, text = send_frame_parts(message)
    assert headers["transformation"] == "jms-map-json"
    assert text is True
    assert json.loads(body) == {
        "map": {
            "entry": [
                {"string": ["s", "v"]},
                {"string": "i", "int": 1},
                {"string": "l", "long": 2**40},
                {"string": "d", "double": 0.5},
                {"string": "b", "boolean": False},
            ]
        }
    }
    assert decode_map(body) == message.map


def test_map_values_the_broker_refuses_and_other_types_fail() -> None:
    with pytest.raises(ConnectorError, match="'raw'"):
        send_frame_parts(MapMessage(destination="/queue/a", map={"raw": b"x"}))
    with pytest.raises(ConnectorError, match="StreamMessage"):
        send_frame_parts(StreamMessage(destination="/queue/a", items=[1]))
    with pytest.raises(ConnectorError, match="java-serialized"):
        send_frame_parts(ObjectMessage(destination="/queue/a", payload=b"\xac\xed"))
    json_object = ObjectMessage(destination="/q", payload=b'{"string":"x"}', encoding=XSTREAM_JSON)
    headers, body, _ = send_frame_parts(json_object)
    assert headers["transformation"] == "jms-object-json" and body == b'{"string":"x"}'


def test_empty_map_round_trips() -> None:
    assert decode_map(encode_map({}).encode()) == {}
    assert decode_map(b'{"map":""}') == {}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"map":{"entry":{"string":"only","int":1}}}', {"only": 1}),
        (b'{"map":{"entry":[{"string":"n","int":"3"},{"string":"f","boolean":"true"}]}}', {"n": 3, "f": True}),
        (
            b'{"map":{"entry":[{"string":"r","byte-array":"AQI="},{"string":"c","char":"x"}]}}',
            {"r": b"\x01\x02", "c": "x"},
        ),
    ],
)
def test_decode_map_forms_activemq_writes(body: bytes, expected: dict[str, object]) -> None:
    assert decode_map(body) == expected


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"other":1}', b'{"map":{"entry":[{"int":1}]}}', b'{"map":{"entry":[{"string":"k","weird":1}]}}'],
)
def test_decode_map_rejects_what_is_not_a_map(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_map(body)


def broker_frame(headers: dict[str, str], body: bytes = b"") -> Frame:
    base = {
        "destination": "/queue/a",
        "message-id": "ID:broker-1",
        "subscription": "s1",
        "ack": "ack-1",
        "timestamp": "1700000000000",
        "expires": "0",
        "priority": "4",
    }
    return Frame("MESSAGE", {**base, **headers}, body)


def test_message_frame_without_content_length_is_text_with_broker_fields() -> None:
    frame = broker_frame(
        {"persistent": "true", "redelivered": "true", "correlation-id": "c", "reply-to": "/queue/r", "x": "1"}, b"hi"
    )
    message = message_from_frame(frame)
    assert isinstance(message, TextMessage) and message.text == "hi"
    assert message.message_id == "ID:broker-1"
    assert message.timestamp == 1700000000000
    assert message.redelivered is True
    assert message.persistent is True
    assert (message.correlation_id, message.reply_to) == ("c", "/queue/r")
    assert message.properties == {"x": "1"}


def test_message_frame_with_content_length_is_bytes() -> None:
    message = message_from_frame(broker_frame({"content-length": "2"}, b"\x00\x01"))
    assert isinstance(message, BytesMessage) and message.body == b"\x00\x01"


def test_labelled_map_and_object_frames_become_typed_messages() -> None:
    mapped = message_from_frame(
        broker_frame({"transformation": "jms-map-json", "type": "t"}, b'{"map":{"entry":{"string":["k","v"]}}}')
    )
    assert isinstance(mapped, MapMessage) and mapped.map == {"k": "v"}
    assert mapped.type == "t" and mapped.message_id == "ID:broker-1"
    assert "transformation" not in mapped.properties
    obj = message_from_frame(broker_frame({"transformation": "jms-object-json"}, b'{"string":"x"}'))
    assert isinstance(obj, ObjectMessage) and obj.payload == b'{"string":"x"}' and obj.encoding == XSTREAM_JSON
    text = message_from_frame(broker_frame({"transformation": "jms-json"}, b"plain"))
    assert isinstance(text, TextMessage) and text.text == "plain"


def test_unreadable_map_body_is_a_connector_error() -> None:
    with pytest.raises(ConnectorError, match="jms-map-json"):
        message_from_frame(broker_frame({"transformation": "jms-map-json"}, b"{broken"))


def test_text_that_is_not_utf8_is_kept_as_bytes() -> None:
    message = message_from_frame(broker_frame({}, b"\xff\xfe"))
    assert isinstance(message, BytesMessage) and message.body == b"\xff\xfe"
