"""Property tests of the frame encoder against any header a sender or a Kafka record can carry.

For every version, a frame encoded by :func:`encode_frame` and read back by a decoder of that
version gives exactly one frame, with the intended headers and body, except the headers the
version cannot carry, which are left out and reported (docs/stomp.md, "Headers a version cannot
carry").  Which headers those are is stated here independently of the encoder: a NUL anywhere;
in 1.0 a LF in a name or value, or a ``:`` in a name; before 1.2 a value that ends in CR; text
that is not Unicode (a lone surrogate).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.message.convert import message_to_frame
from gateway.message.kafka_records import record_to_message
from gateway.wire.codec import FrameDecoder, Limits, encode_frame
from gateway.wire.frame import VERSIONS, Frame

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = Limits(max_frame_size=1 << 30, max_headers=100_000, max_header_length=1 << 30)

SPECIALS = ["\x00", ":", "\n", "\r", "\\", "\\n", "\\c", "\\r", "\\t", "MESSAGE", "\ud800", "\udfff", "\u00e9",
            "\U0001f600", " "]
text = st.lists(st.one_of(st.sampled_from(SPECIALS), st.characters(codec=None)), max_size=10).map("".join)
names = text.filter(lambda name: name != "content-length")


def carried(name: str, value: str, version: str) -> bool:
    """Whether a reader of ``version`` can get ``name:value`` back as it was (the spec's rules)."""
    if "\x00" in name + value:
        return False
    if version == "1.0" and ("\n" in name + value or ":" in name):
        return False
    if version != "1.2" and value.endswith("\r"):
        return False
    return not any(0xD800 <= ord(char) <= 0xDFFF for char in name + value)


def round_trip(frame: Frame, version: str) -> tuple[Frame, list[str]]:
    dropped: list[str] = []
    wire = encode_frame(frame, version, dropped=dropped)
    decoded = FrameDecoder(LIMITS, version).feed(wire)
    assert len(decoded) == 1 and isinstance(decoded[0], Frame), (wire, decoded)
    return decoded[0], dropped


@SETTINGS
@given(st.sampled_from(VERSIONS), st.dictionaries(names, text, max_size=6), st.binary(max_size=30))
def test_a_message_reads_back_as_one_frame_with_every_header_the_version_can_carry(
    version: str, headers: dict[str, str], body: bytes
) -> None:
    frame = Frame("MESSAGE", {"subscription": "s1", **headers}, body)
    decoded, dropped = round_trip(frame, version)
    expected = {name: value for name, value in frame.headers.items() if carried(name, value, version)}
    expected.setdefault("content-length", str(len(body)))
    assert decoded.command == "MESSAGE"
    assert decoded.headers == expected
    assert decoded.body == body
    assert dropped == [name for name, value in frame.headers.items() if not carried(name, value, version)]


kafka_names = st.text(min_size=1, max_size=8).map(lambda name: "x-" + name)


@SETTINGS
@given(st.sampled_from(VERSIONS),
       st.lists(st.tuples(kafka_names, st.binary(max_size=12)), max_size=5, unique_by=lambda h: h[0]),
       st.booleans(), st.binary(max_size=20))
def test_a_kafka_record_reaches_a_client_of_any_version_as_one_message(
    version: str, headers: list[tuple[str, bytes]], prefixed: bool, value: bytes
) -> None:
    """Record header bytes arrive as their UTF-8 text, as hex when they are not UTF-8, or not at all
    when the version cannot carry the text; never as U+FFFD, never as a second frame."""
    record_headers = [(("jms." if prefixed else "") + name, raw) for name, raw in headers]
    message = record_to_message(b"k", value, [("jms.MessageType", b"bytes"), *record_headers],
                                fallback_id="ID:kafka:t:0:1")
    decoded, _ = round_trip(message_to_frame(message, "s1", "ack-1", "/queue/kafka.t"), version)
    assert decoded.body == value
    assert decoded.headers["subscription"] == "s1" and decoded.headers["ack"] == "ack-1"
    assert decoded.headers["message-id"] == "ID:kafka:t:0:1"
    for name, raw in headers:
        try:
            intended = raw.decode("utf-8")
        except UnicodeDecodeError:
            intended = raw.hex()
        if carried(name, intended, version):
            assert decoded.headers[name] == intended
        else:
            assert name not in decoded.headers
