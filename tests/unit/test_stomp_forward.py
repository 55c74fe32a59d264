"""forward_parts (a client SEND straight to broker frame parts) equals the message path.

The STOMP session forwards a plain SEND to a JMS broker without building a
JMS message; this differential test holds that shortcut to
``send_frame_parts(frame_to_message(frame))`` for generated SENDs: valid and
invalid JMS headers, user properties, text and bytes bodies.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.connectors.stomp_mapping import forward_parts, send_frame_parts
from gateway.errors import StompProtocolError
from gateway.message.convert import PROTOCOL_HEADERS, frame_to_message
from gateway.wire.frame import Frame
from tests.support.send_frames import send_bodies

NOW = 1_790_000_000_123

JMS_VALUES = {
    "persistent": st.sampled_from(["true", "false", "TRUE", "False", "yes", ""]),
    "priority": st.sampled_from(["0", "4", "07", "9", "10", "-1", "x", ""]),
    "expires": st.sampled_from(["0", "", "1790000000000", "12x", "-5"]),
    "correlation-id": st.text(max_size=8),
    "reply-to": st.sampled_from(["/queue/replies", "/topic/t", ""]),
    "type": st.text(max_size=8),
}
# protocol headers a SEND may carry that are not JMS fields (not "amq-msg-type": forward_parts declines it)
OTHER_PROTOCOL = ["receipt", "transaction", "transformation", "message-id", "subscription", "ack",
                  "redelivered", "timestamp"]


@st.composite
def sends(draw: Any) -> tuple[Frame, bool]:
    headers: dict[str, str] = {"destination": "/queue/jms.orders"}
    for name, values in JMS_VALUES.items():
        if draw(st.booleans()):
            headers[name] = draw(values)
    for name in draw(st.lists(st.sampled_from(OTHER_PROTOCOL), max_size=3, unique=True)):
        headers[name] = draw(st.text(max_size=6))
    properties = draw(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=10), max_size=4))
    for name, value in properties.items():
        headers.setdefault(name, value)
    body = draw(send_bodies(headers, nul=False))
    return Frame("SEND", headers, body), draw(st.booleans())


def outcome(call: Any) -> Any:
    try:
        return call()
    except StompProtocolError as error:
        return ("error", error.message, error.detail)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sends())
def test_forward_parts_equal_the_message_path(case: tuple[Frame, bool]) -> None:
    frame, default_persistent = case
    expected = outcome(lambda: send_frame_parts(
        frame_to_message(frame, default_persistent=default_persistent, now_ms=NOW)))
    got = outcome(lambda: forward_parts(
        frame.headers, frame.body, default_persistent=default_persistent, now_ms=NOW))
    assert got is not None  # no amq-msg-type, no NUL in a text: never declined here
    assert got == expected


def test_examples_the_generator_covers() -> None:
    """A few cases spelled out, so a reader sees what the differential test compares."""
    frame = Frame("SEND", {
        "destination": "/queue/jms.a", "persistent": "TRUE", "priority": "07", "expires": "0",
        "correlation-id": "c-1", "receipt": "r", "x-user": "v", "content-length": "3",
    }, b"abc")
    assert forward_parts(frame.headers, frame.body, default_persistent=False, now_ms=NOW) == (
        {"correlation-id": "c-1", "persistent": "true", "priority": "7", "timestamp": str(NOW), "x-user": "v"},
        b"abc",
        False,
    )
    text = Frame("SEND", {"destination": "/queue/jms.a"}, "h\u00e9".encode())
    assert forward_parts(text.headers, text.body, default_persistent=False, now_ms=NOW) == (
        {"priority": "4", "timestamp": str(NOW)}, "h\u00e9".encode(), True)
    assert outcome(lambda: forward_parts({"destination": "/q"}, b"\xff", default_persistent=False, now_ms=NOW))[:2] == (
        "error", "invalid UTF-8 body")


def test_declined_sends_take_the_message_path() -> None:
    assert forward_parts({"amq-msg-type": "text"}, b"x", default_persistent=False, now_ms=NOW) is None
    assert forward_parts({}, b"a\x00b", default_persistent=False, now_ms=NOW) is None
    assert "amq-msg-type" in PROTOCOL_HEADERS
