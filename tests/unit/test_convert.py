"""SEND frame -> JMS message -> MESSAGE frame, by the GlassFish bridge's rules."""

from __future__ import annotations

import pytest

from gateway.errors import StompProtocolError
from gateway.message.convert import frame_to_message, message_to_frame
from gateway.message.model import BytesMessage, MapMessage, TextMessage
from gateway.wire.frame import Frame


def send(headers: dict[str, str], body: bytes = b"") -> Frame:
    return Frame("SEND", {"destination": "/queue/a", **headers}, body)


def test_content_length_makes_a_bytes_message() -> None:
    message = frame_to_message(send({"content-length": "3"}, b"a\x00b"))
    assert isinstance(message, BytesMessage)
    assert message.body == b"a\x00b"


def test_no_content_length_makes_a_text_message() -> None:
    message = frame_to_message(send({}, "grüße".encode()))
    assert isinstance(message, TextMessage)
    assert message.text == "grüße"


def test_amq_msg_type_overrides_the_rule() -> None:
    assert isinstance(frame_to_message(send({"content-length": "2", "amq-msg-type": "text"}, b"hi")), TextMessage)
    assert isinstance(frame_to_message(send({"amq-msg-type": "bytes"}, b"hi")), BytesMessage)
    with pytest.raises(StompProtocolError, match="amq-msg-type"):
        frame_to_message(send({"amq-msg-type": "map"}))


def test_invalid_utf8_text_is_refused() -> None:
    with pytest.raises(StompProtocolError) as caught:
        frame_to_message(send({}, b"ok\xff"))
    assert "byte 2" in caught.value.detail


def test_jms_headers_and_properties() -> None:
    message = frame_to_message(send({
        "correlation-id": "c", "reply-to": "/queue/r", "type": "t", "persistent": "TRUE", "priority": "9",
        "expires": "123", "receipt": "r1", "transaction": "tx", "custom": "v",
    }), default_persistent=False, now_ms=42)
    assert (message.correlation_id, message.reply_to, message.type) == ("c", "/queue/r", "t")
    assert message.persistent and message.priority == 9 and message.expiration == 123
    assert message.timestamp == 42
    assert message.properties == {"custom": "v"}
    assert message.message_id.startswith("ID:")


@pytest.mark.parametrize(("header", "value"), [("priority", "10"), ("priority", "x"), ("expires", "soon"),
                                               ("persistent", "yes")])
def test_bad_header_values(header: str, value: str) -> None:
    with pytest.raises(StompProtocolError, match=header):
        frame_to_message(send({header: value}))


def test_default_persistence_applies_without_header() -> None:
    assert frame_to_message(send({}), default_persistent=True).persistent
    assert not frame_to_message(send({}), default_persistent=False).persistent


def test_message_to_frame() -> None:
    message = TextMessage(destination="/queue/a", message_id="ID:1", text="hé", priority=5, redelivered=True,
                          properties={"flag": True, "n": 3, "x": None})
    frame = message_to_frame(message, "sub-1", "ack-1")
    assert frame.command == "MESSAGE"
    assert frame.body == "hé".encode()
    headers = frame.headers
    assert headers["subscription"] == "sub-1" and headers["ack"] == "ack-1"
    assert headers["redelivered"] == "true" and headers["priority"] == "5"
    assert headers["flag"] == "true" and headers["n"] == "3" and headers["x"] == ""
    assert "ack" not in message_to_frame(message, "s", None).headers
    with pytest.raises(TypeError, match="MapMessage"):
        message_to_frame(MapMessage(map={"a": 1}), "s", None)


def test_message_frames_say_text_or_bytes_and_count_redeliveries() -> None:
    # every MESSAGE has content-length, so the type travels as ActiveMQ's amq-msg-type
    text = message_to_frame(TextMessage(destination="/queue/a", text="t"), "s", None)
    raw = message_to_frame(BytesMessage(destination="/queue/a", body=b"t"), "s", None)
    assert (text.headers["amq-msg-type"], raw.headers["amq-msg-type"]) == ("text", "bytes")
    assert "JMSXDeliveryCount" not in text.headers and "redelivered" not in text.headers
    again = message_to_frame(TextMessage(destination="/queue/a", text="t", redelivered=True, redelivery_count=2),
                             "s", None)
    assert again.headers["redelivered"] == "true" and again.headers["JMSXDeliveryCount"] == "3"
    copied = TextMessage(destination="/queue/a", text="t", properties={"JMSXDeliveryCount": "3"})
    assert "JMSXDeliveryCount" not in message_to_frame(copied, "s", None).headers
    # a client resending a MESSAGE as it came keeps the type
    for frame, kind in ((text, TextMessage), (raw, BytesMessage)):
        resent = Frame("SEND", {**frame.headers, "content-length": str(len(frame.body))}, frame.body)
        assert type(frame_to_message(resent)) is kind


def test_a_declared_charset_decodes_the_text() -> None:
    frame = Frame("SEND", {"destination": "/queue/a", "content-type": 'text/plain;charset="windows-1252"'},
                  "€ café".encode("cp1252"))
    message = frame_to_message(frame)
    assert isinstance(message, TextMessage) and message.text == "€ café"
    assert message.properties["content-type"] == "text/plain;charset=utf-8"
    utf8 = frame_to_message(Frame("SEND", {"content-type": "text/plain; charset=UTF-8"}, "é".encode()))
    assert isinstance(utf8, TextMessage) and utf8.text == "é"
    assert utf8.properties["content-type"] == "text/plain; charset=UTF-8"  # already true: unchanged


@pytest.mark.parametrize(
    ("content_type", "body", "message"),
    [("text/plain; charset=klingon", b"x", "unknown charset"), ("text/plain; charset=ascii", b"\xe9", "invalid body")],
)
def test_a_charset_that_cannot_decode_the_body_is_refused(content_type: str, body: bytes, message: str) -> None:
    with pytest.raises(StompProtocolError) as error:
        frame_to_message(Frame("SEND", {"content-type": content_type}, body))
    assert error.value.message == message
    assert content_type.rsplit("=", 1)[1] in error.value.detail


def test_the_send_shortcuts_leave_a_foreign_charset_to_the_message_path() -> None:
    from gateway.connectors.stomp_mapping import forward_parts
    from gateway.message.convert import foreign_charset

    latin = {"destination": "/queue/a", "content-type": "text/plain; charset=iso-8859-1"}
    assert foreign_charset(latin) and not foreign_charset({**latin, "content-length": "1"})
    assert not foreign_charset({"content-type": "text/plain; charset=utf-8"})
    assert forward_parts(latin, b"\xe9", default_persistent=False, now_ms=0) is None
    from gateway.routing.frame_records import frame_record

    assert frame_record(latin, b"\xe9", "/queue/a", default_persistent=False, message_id="ID:1", now_ms=0,
                        key_name=None, origin="gw") is None
