"""frame_record (a client SEND straight to a Kafka record) equals the message path.

The Kafka router forwards a plain SEND without building a JMS message; this
differential test holds that shortcut to ``message_to_record(frame_to_message
(frame))`` for generated SENDs (JMS headers valid and not, user properties,
colliding property names, text and bytes bodies) and route keys, and checks
that it declines only where the message path has to decide.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import StompProtocolError
from gateway.message.convert import frame_to_message
from gateway.message.kafka_records import (
    HEADER_NAMES,
    ORIGIN_HEADER,
    SoftFailure,
    canonical_header_name,
    message_to_record,
)
from gateway.routing.frame_records import frame_record
from gateway.wire.frame import Frame
from tests.support.send_frames import send_bodies

NOW = 1_790_000_000_123
MESSAGE_ID = "ID:jmsgw-test-1"
ORIGIN = "gw-test"
DESTINATION = "/queue/orders"

JMS_VALUES = {
    "persistent": st.sampled_from(["true", "false", "TRUE", "yes", ""]),
    "priority": st.sampled_from(["0", "4", "07", "9", "10", "x", ""]),
    "expires": st.sampled_from(["0", "", "1790000000000", "12x"]),
    "correlation-id": st.sampled_from(["c-1", "cust7", "", "not a key", "k\u00e9"]),
    "reply-to": st.sampled_from(["/queue/replies", "/topic/t", ""]),
    "type": st.sampled_from(["order", "", "two words"]),
    "amq-msg-type": st.sampled_from(["text", "bytes", "map"]),
    ORIGIN_HEADER: st.sampled_from([ORIGIN, "other-gw"]),
}
OTHER_PROTOCOL = ["transaction", "transformation", "message-id", "subscription", "ack", "redelivered", "timestamp"]
PROPERTY_NAMES = st.one_of(
    st.text(min_size=1, max_size=8),
    st.sampled_from(["region", "Type", "MessageType", "property.x", "Priority", "jms.x"]),
)
KEYS = st.sampled_from([
    None, "msg.header.CorrelationId", "JMSCorrelationID", "CorrelationId", "msg.header.ReplyTo", "JMSType",
    "msg.header.region", "region", "msg.header.Priority", "MessageId", "msg.header.receipt", "absent",
])


@st.composite
def sends(draw: Any) -> tuple[Frame, bool, str | None]:
    headers: dict[str, str] = {"destination": DESTINATION}
    for name, values in JMS_VALUES.items():
        if draw(st.integers(0, 3)) == 0:
            headers[name] = draw(values)
    for name in draw(st.lists(st.sampled_from(OTHER_PROTOCOL), max_size=2, unique=True)):
        headers[name] = draw(st.text(max_size=6))
    properties = draw(st.dictionaries(PROPERTY_NAMES, st.sampled_from(["eu", "7", "", "a b", "x\u00e9"]), max_size=4))
    for name, value in properties.items():
        headers.setdefault(name, value)
    body = draw(send_bodies(headers))
    return Frame("SEND", headers, body), draw(st.booleans()), draw(KEYS)


def through_message(frame: Frame, default_persistent: bool, key: str | None) -> Any:
    """The message path: the record, a protocol error, or a soft failure."""
    try:
        message = frame_to_message(frame, default_persistent=default_persistent, now_ms=NOW)
    except StompProtocolError as error:
        return ("error", error.message, error.detail)
    message.message_id = MESSAGE_ID
    message.destination = DESTINATION
    try:
        return message_to_record(message, key, ORIGIN)
    except SoftFailure as failure:
        return ("soft-failure", failure.reason)


def forwarded(frame: Frame, default_persistent: bool, key: str | None) -> Any:
    try:
        return frame_record(frame.headers, frame.body, DESTINATION, default_persistent=default_persistent,
                            message_id=MESSAGE_ID, now_ms=NOW, key_name=key, origin=ORIGIN)
    except StompProtocolError as error:
        return ("error", error.message, error.detail)


def message_path_must_decide(frame: Frame, key: str | None, expected: Any) -> bool:
    """Why frame_record may decline: the cases the module docstring lists."""
    headers = frame.headers
    if "amq-msg-type" in headers or ORIGIN_HEADER in headers:
        return True
    if isinstance(expected, tuple) and expected[0] == "soft-failure":
        return True
    name = (key or "").removeprefix("msg.header.")
    canonical = canonical_header_name(name)
    return canonical in HEADER_NAMES and canonical not in ("CorrelationId", "ReplyTo", "Type")


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sends())
def test_frame_record_equals_the_message_path(case: tuple[Frame, bool, str | None]) -> None:
    frame, default_persistent, key = case
    expected = through_message(frame, default_persistent, key)
    got = forwarded(frame, default_persistent, key)
    if got is None:
        assert message_path_must_decide(frame, key, expected), (frame, key, expected)
    elif "amq-msg-type" in frame.headers:
        raise AssertionError(f"amq-msg-type must take the message path: {got}")
    else:
        assert got == expected


def test_examples_the_generator_covers() -> None:
    """A few cases spelled out, so a reader sees what the differential test compares."""
    headers = {"destination": DESTINATION, "correlation-id": "cust7", "persistent": "true", "priority": "07",
               "region": "eu", "Type": "t", "content-length": "3"}
    record = frame_record(headers, b"abc", "/queue/renamed", default_persistent=False, message_id=MESSAGE_ID,
                          now_ms=NOW, key_name="msg.header.CorrelationId", origin=ORIGIN)
    assert record == (b"cust7", b"abc", [
        ("jms.MessageType", b"bytes"),
        ("jms.MessageId", MESSAGE_ID.encode()),
        ("jms.CorrelationId", b"cust7"),
        ("jms.DeliveryMode", b"2"),
        ("jms.Priority", b"7"),
        ("jms.Timestamp", str(NOW).encode()),
        ("jms.Destination", b"/queue/renamed"),
        ("jms.region", b"eu"),
        ("jms.property.Type", b"t"),
        ("jmsbridge.origin", ORIGIN.encode()),
    ])
    text = frame_record({"destination": DESTINATION}, "h\u00e9".encode(), DESTINATION, default_persistent=False,
                        message_id=MESSAGE_ID, now_ms=NOW, key_name=None, origin=ORIGIN)
    assert text is not None and text[0] == MESSAGE_ID.encode() and text[2][0] == ("jms.MessageType", b"text")


def test_declines_where_the_message_path_decides() -> None:
    def record(headers: dict[str, str], key: str | None = None) -> Any:
        return frame_record({"destination": DESTINATION, **headers}, b"x", DESTINATION, default_persistent=False,
                            message_id=MESSAGE_ID, now_ms=NOW, key_name=key, origin=ORIGIN)

    assert record({"amq-msg-type": "text"}) is None
    assert record({ORIGIN_HEADER: ORIGIN}) is None  # the cycle guard
    assert record({}, key="msg.header.CorrelationId") is None  # no key: the route's soft-failure policy
    assert record({"correlation-id": "a b"}, key="CorrelationId") is None  # not alphanumeric
    assert record({}, key="JMSPriority") is None  # a numeric JMS header: left to the message path
    assert record({"correlation-id": "k1"}, key="JMSCorrelationID") is not None
