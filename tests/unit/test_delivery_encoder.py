"""The direct MESSAGE encoder (:mod:`gateway.stomp.delivery`) against the general path.

Whenever :class:`MessageEncoder` answers, its bytes are exactly those of
``encode_frame(message_to_frame(...))`` with nothing left out; when it cannot (a header the
version cannot carry, a property named like a MESSAGE header) it answers None and the session
takes the general path.  Random messages: any header text, property names and values of every
JMS type, redelivery marks, both body types, every version, with and without an ``ack``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.message.convert import message_to_frame
from gateway.message.model import MESSAGE_ID_PREFIX, BytesMessage, Message, TextMessage
from gateway.stomp.delivery import RESERVED, MessageEncoder
from gateway.wire.codec import encode_frame
from gateway.wire.frame import VERSIONS

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SPECIALS = ["\x00", ":", "\n", "\r", "\\", "\\c", "\ud800", "\u00e9", "\U0001f600", " ", "ID:x-1"]
text = st.lists(st.one_of(st.sampled_from(SPECIALS), st.characters(codec=None)), max_size=8).map("".join)
plain = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e, exclude_characters="\\:"), max_size=8)
some_text = st.one_of(plain, text)
names = st.one_of(some_text, st.sampled_from(sorted(RESERVED)))
values = st.one_of(some_text, st.integers(-2**63, 2**63 - 1), st.floats(), st.booleans(), st.binary(max_size=4),
                   st.none())


@st.composite
def messages(draw: st.DrawFn) -> Message:
    message: Message
    if draw(st.booleans()):
        message = BytesMessage(body=draw(st.binary(max_size=20)))
    else:
        message = TextMessage(text=draw(st.one_of(st.none(), plain, st.text(max_size=10).filter(
            lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)))))
    message.destination = draw(some_text)
    message.message_id = draw(st.one_of(
        st.just("ID:jmsgw-1-abc-7"), some_text,
        # the gateway's own ids (their prefix escaped once, beforehand) and look-alikes that are not
        st.builds(lambda tail: MESSAGE_ID_PREFIX + tail, st.one_of(st.integers(0).map(str), some_text)),
    ))
    message.correlation_id = draw(st.one_of(st.none(), some_text))
    message.reply_to = draw(st.one_of(st.none(), some_text))
    message.type = draw(st.one_of(st.none(), some_text))
    message.persistent = draw(st.booleans())
    message.priority = draw(st.integers(0, 9))
    message.expiration = draw(st.integers(0, 2**45))
    message.timestamp = draw(st.integers(0, 2**45))
    message.redelivery_count = draw(st.integers(0, 3))
    message.redelivered = message.redelivery_count > 0 or draw(st.booleans())
    message.properties = draw(st.dictionaries(names, values, max_size=4))
    return message


def general(message: Message, sub_id: str, ack: str | None, destination: str, version: str) -> tuple[bytes, list[str]]:
    dropped: list[str] = []
    return encode_frame(message_to_frame(message, sub_id, ack, destination), version, dropped=dropped), dropped


@SETTINGS
@given(messages(), st.sampled_from(VERSIONS), st.one_of(plain, some_text), st.one_of(plain, some_text),
       st.one_of(st.none(), st.just("jmsgw-3-17"), some_text))
def test_the_direct_encoder_writes_what_the_general_path_writes(
    message: Message, version: str, sub_id: str, destination: str, ack: str | None
) -> None:
    if version != "1.2":
        ack = None  # (only 1.2 has the ack header)
    encoder = MessageEncoder(sub_id, destination, version)
    try:
        expected, dropped = general(message, sub_id, ack, destination, version)
    except UnicodeEncodeError:  # a lone surrogate in a text body: both paths refuse it alike
        return
    for _ in range(2):  # the second time from the fan-out cache
        data = encoder.encode(message, ack)
        if data is None:
            continue
        assert not dropped
        assert data == expected
    headers = message_to_frame(message, sub_id, ack, destination).headers
    texts = "".join(headers) + "".join(headers.values())
    simple = not ("\x00" in texts or "\r" in texts or any(0xD800 <= ord(c) <= 0xDFFF for c in texts))
    if version != "1.0" and simple and not set(message.properties) & RESERVED:
        assert encoder.encode(message, ack) is not None  # nothing special: the direct encoder must not decline

def test_a_fan_out_encodes_a_message_once_and_each_subscription_keeps_its_own_lines() -> None:
    message = TextMessage(text="hello", destination="/topic/t", message_id="ID:m-1", timestamp=5)
    first = MessageEncoder("a", "/topic/t", "1.2").encode(message, None)
    second = MessageEncoder("b:c", "/topic/t", "1.2").encode(message, "k-1")
    assert first == encode_frame(message_to_frame(message, "a", None, "/topic/t"), "1.2")
    assert second == encode_frame(message_to_frame(message, "b:c", "k-1", "/topic/t"), "1.2")


def test_a_message_redelivered_in_place_is_encoded_again() -> None:
    message = BytesMessage(body=b"x", destination="/queue/q", message_id="ID:m-2")
    encoder = MessageEncoder("s", "/queue/q", "1.1")
    assert b"redelivered" not in (encoder.encode(message, None) or b"")
    message.redelivered, message.redelivery_count = True, 1
    data = encoder.encode(message, None)
    assert data == encode_frame(message_to_frame(message, "s", None, "/queue/q"), "1.1")
    assert b"redelivered:true\n" in data and b"JMSXDeliveryCount:2\n" in data


def test_property_lines_kept_are_bounded_and_per_version() -> None:
    """String properties' header lines are kept for the next message (most carry the same few), per
    escaping (``a:b`` is escaped in 1.2 and cannot be a 1.0 name), never more than PROPERTY_LINES_MAX."""
    from gateway.stomp import delivery

    delivery._PROPERTY_LINES.clear()
    for version in ("1.2", "1.0", "1.2"):
        message = BytesMessage(body=b"x")
        message.message_id = f"{MESSAGE_ID_PREFIX}1"
        message.properties = {"content-type": "text/plain", "a\\b": "c:d", "n": 1, "t": True}
        data = MessageEncoder("s", "/queue/q", version).encode(message, None)
        assert data == encode_frame(message_to_frame(message, "s", None, "/queue/q"), version)
    for index in range(delivery.PROPERTY_LINES_MAX + 10):
        message = BytesMessage(body=b"")
        message.message_id = f"{MESSAGE_ID_PREFIX}2"
        message.properties = {"k": str(index)}
        assert MessageEncoder("s", "/queue/q", "1.2").encode(message, None) is not None
        assert len(delivery._PROPERTY_LINES) <= delivery.PROPERTY_LINES_MAX
