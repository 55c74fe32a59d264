"""Example and table-driven tests of the sans-IO STOMP codec (:mod:`gateway.wire.codec`).

Each escaping rule, each limit (at and one past it), every error the decoder
reports, ``.buffered``, linear scanning of large input, and
:func:`encode_frame`.  The property-based round trips live in
``test_codec_properties.py``.
"""

from __future__ import annotations

import pytest

from gateway.errors import FrameTooLarge, MalformedFrame, StompProtocolError
from gateway.wire.codec import (
    HEARTBEAT,
    FrameDecoder,
    Limits,
    encode_frame,
    escape_header,
    unescape_header,
)
from gateway.wire.frame import Frame

MiB = 1024 * 1024
CHUNKINGS = pytest.mark.parametrize("chunk", [0, 1, 3], ids=["one-feed", "1-byte", "3-byte"])


def feed_in(decoder: FrameDecoder, data: bytes, chunk: int) -> list[Frame | StompProtocolError]:
    """Feed ``data`` whole (``chunk == 0``) or ``chunk`` bytes at a time; collect all output."""
    if chunk == 0:
        return decoder.feed(data)
    out: list[Frame | StompProtocolError] = []
    for start in range(0, len(data), chunk):
        out.extend(decoder.feed(data[start : start + chunk]))
    return out


def decode(data: bytes, version: str = "1.2", chunk: int = 0, limits: Limits | None = None) -> list[object]:
    return list(feed_in(FrameDecoder(limits, version), data, chunk))


def only_error(out: list[object]) -> StompProtocolError:
    assert len(out) == 1, out
    error = out[0]
    assert isinstance(error, StompProtocolError), out
    return error


# -- framing -------------------------------------------------------------------------------------


@CHUNKINGS
def test_decodes_frames_with_heartbeats_before_between_and_after(chunk: int) -> None:
    wire = b"\n\r\nSEND\ndestination:/queue/a\n\nhello\x00\n\n\r\nMESSAGE\nx:1\n\n\x00\r\n\n"
    decoder = FrameDecoder(version="1.2")
    assert feed_in(decoder, wire, chunk) == [
        Frame("SEND", {"destination": "/queue/a"}, b"hello"),
        Frame("MESSAGE", {"x": "1"}, b""),
    ]
    assert decoder.buffered == 0


@CHUNKINGS
def test_crlf_line_endings(chunk: int) -> None:
    wire = b"SEND\r\ndestination:/queue/a\r\nreceipt:7\r\n\r\nbody\r\n\x00"
    assert decode(wire, chunk=chunk) == [
        Frame("SEND", {"destination": "/queue/a", "receipt": "7"}, b"body\r\n"),
    ]


@CHUNKINGS
@pytest.mark.parametrize("body", [b"\n", b"\r\n", b"\n\nx", b"\r\n\r\n"])
def test_body_starting_with_eols_after_a_crlf_or_lf_blank_line(body: bytes, chunk: int) -> None:
    for wire in (b"SEND\r\nh:1\r\n\r\n" + body + b"\x00", b"SEND\nh:1\n\n" + body + b"\x00"):
        assert decode(wire, chunk=chunk) == [Frame("SEND", {"h": "1"}, body)]


def test_frame_without_headers_and_blank_line_directly_after_command() -> None:
    assert decode(b"DISCONNECT\n\n\x00DISCONNECT\r\n\r\n\x00") == [Frame("DISCONNECT"), Frame("DISCONNECT")]


@CHUNKINGS
def test_nul_padding_between_frames_is_skipped(chunk: int) -> None:
    # RabbitMQ's STOMP tests send "\n\x00" before frames; RabbitMQ takes it as padding.
    wire = (b"\x00\n\x00SUBSCRIBE\ndestination:/queue/a\nid:1\n\n\x00\n\x00"
            b"SEND\ndestination:/queue/a\n\nhi\x00\x00\x00\r\n\x00")
    decoder = FrameDecoder(version="1.2")
    assert feed_in(decoder, wire, chunk) == [
        Frame("SUBSCRIBE", {"destination": "/queue/a", "id": "1"}),
        Frame("SEND", {"destination": "/queue/a"}, b"hi"),
    ]
    assert decoder.buffered == 0


@CHUNKINGS
def test_malformed_frame_after_nul_padding_is_still_refused(chunk: int) -> None:
    error = only_error(decode(b"\n\x00SEND\nh:a\x00b\n\n\x00", chunk=chunk))
    assert isinstance(error, MalformedFrame)
    assert "NUL before the blank line" in error.detail


def test_heartbeat_only_feeds_return_nothing_and_buffer_nothing() -> None:
    decoder = FrameDecoder()
    for beat in (HEARTBEAT, b"\r\n", b"\n\n\n"):
        assert decoder.feed(beat) == []
        assert decoder.buffered == 0
    assert HEARTBEAT == b"\n"


def test_crlf_heartbeat_split_between_cr_and_lf() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\r") == []
    assert decoder.buffered == 1
    assert decoder.feed(b"\n") == []
    assert decoder.buffered == 0
    assert decoder.feed(b"\r") == []
    assert decoder.feed(b"\nSEND\n\n\x00") == [Frame("SEND")]


@pytest.mark.parametrize("wire", [b"\rSEND\n\n\x00", b"\n\r\rSEND\n\n\x00"])
def test_cr_without_lf_before_a_command_is_malformed(wire: bytes) -> None:
    error = only_error(decode(wire))
    assert isinstance(error, MalformedFrame)
    assert "CR" in error.detail


@CHUNKINGS
def test_header_line_without_colon_is_malformed(chunk: int) -> None:
    error = only_error(decode(b"SEND\ndestination\n\n\x00", chunk=chunk))
    assert isinstance(error, MalformedFrame)
    assert error.message == "malformed header"
    assert "destination" in error.detail and "SEND" in error.detail


def test_header_values_keep_colons_after_the_first() -> None:
    assert decode(b"SEND\nurl:http://x:80/\n\n\x00", version="1.0") == [
        Frame("SEND", {"url": "http://x:80/"}),
    ]


def test_empty_header_name_and_value_are_kept() -> None:
    assert decode(b"SEND\n:\na:\n\n\x00") == [Frame("SEND", {"": "", "a": ""})]


@CHUNKINGS
@pytest.mark.parametrize(
    "wire",
    [
        b"CONNECT\nhost:x\n\x00",  # blank line missing: the frame ends inside its headers
        b"CONNECT\nhost:x\n\x00\n",
        b"SEND\nh:a\x00b\n\n\x00",
        b"SEND\x00\n\n\x00",
    ],
)
def test_nul_before_the_blank_line_is_malformed(wire: bytes, chunk: int) -> None:
    error = only_error(decode(wire, chunk=chunk))
    assert isinstance(error, MalformedFrame)
    assert "NUL before the blank line" in error.detail


# -- repeated headers ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_repeated_header_first_wins(version: str) -> None:
    wire = b"MESSAGE\nfoo:World\nfoo:Hello\nbar:1\nfoo:again\n\n\x00"
    assert decode(wire, version) == [Frame("MESSAGE", {"foo": "World", "bar": "1"})]


def test_repeated_header_first_wins_after_unescaping() -> None:
    assert decode(b"SEND\na\\cb:first\na\\cb:second\n\n\x00", "1.2") == [Frame("SEND", {"a:b": "first"})]


def test_repeated_content_length_first_wins() -> None:
    assert decode(b"SEND\ncontent-length:3\ncontent-length:1\n\na\x00b\x00") == [
        Frame("SEND", {"content-length": "3"}, b"a\x00b"),
    ]


# -- escaping ------------------------------------------------------------------------------------

# (version, escaped form on the wire, decoded text)
UNESCAPE_TABLE = [
    ("1.1", "a\\\\b", "a\\b"),
    ("1.1", "a\\nb", "a\nb"),
    ("1.1", "a\\cb", "a:b"),
    ("1.2", "a\\\\b", "a\\b"),
    ("1.2", "a\\nb", "a\nb"),
    ("1.2", "a\\cb", "a:b"),
    ("1.2", "a\\rb", "a\rb"),
    ("1.2", "\\\\n", "\\n"),  # an escaped backslash followed by a plain n
    ("1.2", "\\c\\c\\n\\r\\\\", "::\n\r\\"),
    ("1.2", "caf\u00e9 \u65e5\u672c", "caf\u00e9 \u65e5\u672c"),
    ("1.0", "a\\\\b", "a\\\\b"),  # 1.0: no escaping at all
    ("1.0", "a\\nb", "a\\nb"),
    ("1.0", "a\\cb", "a\\cb"),
    ("1.0", "a\\rb", "a\\rb"),
    ("1.0", "a\\tb", "a\\tb"),
    ("1.0", "trailing\\", "trailing\\"),
]


@pytest.mark.parametrize(("version", "escaped", "text"), UNESCAPE_TABLE)
def test_unescape_rules(version: str, escaped: str, text: str) -> None:
    assert unescape_header(escaped, version) == text
    wire = f"SEND\n{escaped}:{escaped}\n\n\x00".encode()
    assert decode(wire, version) == [Frame("SEND", {text: text})]


# (version, text, escaped form on the wire)
ESCAPE_TABLE = [
    ("1.1", "a\\b", "a\\\\b"),
    ("1.1", "a\nb", "a\\nb"),
    ("1.1", "a:b", "a\\cb"),
    ("1.1", "a\rb", "a\rb"),  # 1.1 has no \r escape
    ("1.2", "a\\b", "a\\\\b"),
    ("1.2", "a\nb", "a\\nb"),
    ("1.2", "a:b", "a\\cb"),
    ("1.2", "a\rb", "a\\rb"),
    ("1.2", "\\n", "\\\\n"),
    ("1.2", "\u00e9\t", "\u00e9\t"),  # nothing else is escaped
    ("1.0", "a\\b:c\rd", "a\\b:c\rd"),
]


@pytest.mark.parametrize(("version", "text", "escaped"), ESCAPE_TABLE)
def test_escape_rules(version: str, text: str, escaped: str) -> None:
    assert escape_header(text, version) == escaped
    if "\n" not in text:  # 1.0 cannot carry a newline; the table has none for it
        assert encode_frame(Frame("SEND", {"h": text}), version) == f"SEND\nh:{escaped}\n\n\x00".encode()


@pytest.mark.parametrize("version", ["1.1", "1.2"])
@pytest.mark.parametrize(
    ("escaped", "shown"),
    [("a\\tb", "\\t"), ("\\x", "\\x"), ("a\\", "trailing"), ("\\\\\\", "trailing"), ("\\ ", "\\ ")],
)
def test_undefined_escape_is_fatal(version: str, escaped: str, shown: str) -> None:
    with pytest.raises(MalformedFrame):
        unescape_header(escaped, version)
    for line in (f"h:{escaped}", f"{escaped}:v"):
        error = only_error(decode(f"SEND\n{line}\n\n\x00".encode(), version))
        assert isinstance(error, MalformedFrame)
        assert error.fatal
        assert error.message == "invalid header escape"
        assert shown in error.detail and version in error.detail


def test_backslash_r_is_undefined_in_1_1() -> None:
    error = only_error(decode(b"SEND\nh:a\\rb\n\n\x00", "1.1"))
    assert isinstance(error, MalformedFrame)
    assert "\\\\r" in error.detail or "\\r" in error.detail


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("command", ["CONNECT", "CONNECTED"])
def test_connect_and_connected_are_never_unescaped(version: str, command: str) -> None:
    wire = f"{command}\nlogin:a\\cb\\nc\\t\\\npasscode:x\\\\y:z\n\n\x00".encode()
    assert decode(wire, version) == [Frame(command, {"login": "a\\cb\\nc\\t\\", "passcode": "x\\\\y:z"})]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("command", ["CONNECT", "CONNECTED"])
def test_connect_and_connected_are_never_escaped(version: str, command: str) -> None:
    frame = Frame(command, {"login": "a\\b", "host": "h:1"})
    assert encode_frame(frame, version) == f"{command}\nlogin:a\\b\nhost:h:1\n\n\x00".encode()


def test_version_attribute_switches_unescaping_after_connect() -> None:
    decoder = FrameDecoder()
    assert decoder.version == "1.0"
    assert decoder.feed(b"CONNECT\naccept-version:1.2\nhost:a\\c\n\n\x00") == [
        Frame("CONNECT", {"accept-version": "1.2", "host": "a\\c"}),
    ]
    decoder.version = "1.2"
    assert decoder.feed(b"SEND\ndestination:a\\cb\n\n\x00") == [Frame("SEND", {"destination": "a:b"})]


# -- content-length ------------------------------------------------------------------------------


@CHUNKINGS
def test_content_length_body_may_contain_nul(chunk: int) -> None:
    body = b"\x00a\x00\x00b\x00"
    wire = b"SEND\ncontent-length:6\n\n" + body + b"\x00SEND\n\nnext\x00"
    assert decode(wire, chunk=chunk) == [
        Frame("SEND", {"content-length": "6"}, body),
        Frame("SEND", {}, b"next"),
    ]


def test_content_length_zero() -> None:
    assert decode(b"MESSAGE\ncontent-length:0\n\n\x00") == [Frame("MESSAGE", {"content-length": "0"})]


@CHUNKINGS
@pytest.mark.parametrize("wire", [b"SEND\ncontent-length:2\n\nabc\x00", b"SEND\ncontent-length:4\n\nabc\x00x"])
def test_wrong_content_length_is_malformed(wire: bytes, chunk: int) -> None:
    error = only_error(decode(wire, chunk=chunk))
    assert isinstance(error, MalformedFrame)
    assert error.message == "frame not terminated"
    assert "content-length" in error.detail and "SEND" in error.detail


@pytest.mark.parametrize("value", ["abc", "-1", "+3", "1.5", "", "0x10", "\u00b2", "\u0663", "1 2"])
def test_non_numeric_content_length_is_malformed(value: str) -> None:
    error = only_error(decode(f"SEND\ncontent-length:{value}\n\nabc\x00".encode()))
    assert isinstance(error, MalformedFrame)
    assert error.message == "invalid content-length"
    assert "not a non-negative integer" in error.detail


@pytest.mark.parametrize("digits", [5000, 30])
def test_absurd_content_length_is_too_large_not_a_crash(digits: int) -> None:
    error = only_error(decode(f"SEND\ncontent-length:{'9' * digits}\n\n\x00".encode()))
    assert isinstance(error, FrameTooLarge)
    assert str(Limits().max_frame_size) in error.detail


def test_content_length_with_leading_zeros() -> None:
    wire = b"SEND\ncontent-length:" + b"0" * 5000 + b"3\n\nabc\x00"
    [frame] = decode(wire)
    assert isinstance(frame, Frame)
    assert frame.body == b"abc"


# -- limits --------------------------------------------------------------------------------------


def test_default_limits() -> None:
    limits = Limits()
    assert limits.max_frame_size >= 32 * MiB
    assert limits.max_headers >= 100
    assert limits.max_header_length >= 1024
    assert FrameDecoder().limits == limits


def frame_of_size(size: int, *, with_length: bool) -> bytes:
    """An encoded SEND frame whose command + headers + body are exactly ``size`` bytes."""
    for body_length in range(size, -1, -1):
        wire = encode_frame(Frame("SEND", {}, b"x" * body_length), "1.2", add_content_length=with_length)
        if len(wire) - 1 == size:
            return wire
    raise AssertionError(f"no frame of {size} bytes")


@CHUNKINGS
@pytest.mark.parametrize("with_length", [True, False], ids=["content-length", "no-content-length"])
def test_frame_size_limit(with_length: bool, chunk: int) -> None:
    limits = Limits(max_frame_size=200)
    at_limit = frame_of_size(200, with_length=with_length)
    [frame] = decode(b"\n\n" + at_limit, limits=limits, chunk=chunk)  # heart-beats do not count
    assert isinstance(frame, Frame)
    error = only_error(decode(frame_of_size(201, with_length=with_length), limits=limits, chunk=chunk))
    assert isinstance(error, FrameTooLarge)
    assert error.message == "frame too large"
    assert "200" in error.detail and "SEND" in error.detail


def test_frame_size_counts_headers_too() -> None:
    limits = Limits(max_frame_size=100)
    headers = {f"h{i}": "v" * 10 for i in range(10)}
    error = only_error(decode(encode_frame(Frame("SEND", headers), "1.2"), limits=limits))
    assert isinstance(error, FrameTooLarge)
    assert "100" in error.detail


def test_oversized_frame_is_refused_before_it_is_buffered_whole() -> None:
    limits = Limits(max_frame_size=1000)
    # Without content-length: refused as soon as more than the limit is buffered, long before any NUL.
    decoder = FrameDecoder(limits)
    assert decoder.feed(b"SEND\n\n" + b"x" * 994) == []
    [error] = decoder.feed(b"x")
    assert isinstance(error, FrameTooLarge)
    # With content-length: refused when the headers announce too much, before any body byte.
    decoder = FrameDecoder(limits)
    [error] = decoder.feed(b"SEND\ncontent-length:990\n\n")
    assert isinstance(error, FrameTooLarge)
    assert "990" in error.detail and "1000" in error.detail
    # Endless headers: refused by the frame size, not only at the blank line.
    decoder = FrameDecoder(Limits(max_frame_size=1000, max_headers=10_000))
    out: list[Frame | StompProtocolError] = []
    fed = 0
    while not out:
        out = decoder.feed(b"h:" + b"v" * 40 + b"\n")
        fed += 43
    assert isinstance(out[-1], FrameTooLarge)
    assert fed <= 1000 + 43


@CHUNKINGS
def test_header_count_limit(chunk: int) -> None:
    limits = Limits(max_headers=3)
    three = b"SEND\na:1\nb:2\na:3\n\n\x00"  # a repeated header still counts
    assert decode(three, limits=limits, chunk=chunk) == [Frame("SEND", {"a": "1", "b": "2"})]
    error = only_error(decode(b"SEND\na:1\nb:2\nc:3\nd:4\n\n\x00", limits=limits, chunk=chunk))
    assert isinstance(error, FrameTooLarge)
    assert error.message == "too many headers"
    assert "3" in error.detail and "SEND" in error.detail


def test_header_count_limit_before_the_blank_line() -> None:
    decoder = FrameDecoder(Limits(max_headers=3))
    assert decoder.feed(b"SEND\na:1\nb:2\nc:3\n") == []
    [error] = decoder.feed(b"d:4\n")
    assert isinstance(error, FrameTooLarge)


@CHUNKINGS
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["LF", "CRLF"])
def test_header_line_length_limit(eol: bytes, chunk: int) -> None:
    limits = Limits(max_header_length=10)
    at_limit = b"SEND" + eol + b"h:12345678" + eol + eol + b"\x00"
    assert decode(at_limit, limits=limits, chunk=chunk) == [Frame("SEND", {"h": "12345678"})]
    error = only_error(decode(b"SEND" + eol + b"h:123456789" + eol + eol + b"\x00", limits=limits, chunk=chunk))
    assert isinstance(error, FrameTooLarge)
    assert error.message == "header too long"
    assert "10" in error.detail and "SEND" in error.detail and "line 1" in error.detail


def test_header_line_at_limit_split_between_cr_and_lf() -> None:
    decoder = FrameDecoder(Limits(max_header_length=10))
    assert decoder.feed(b"SEND\r\nh:12345678\r") == []
    assert decoder.feed(b"\n\r\n\x00") == [Frame("SEND", {"h": "12345678"})]


def test_header_line_too_long_before_its_end_arrives() -> None:
    decoder = FrameDecoder(Limits(max_header_length=10))
    assert decoder.feed(b"SEND\nh:12345678") == []
    [error] = decoder.feed(b"9")
    assert isinstance(error, FrameTooLarge)
    assert error.message == "header too long"


def test_long_line_among_short_ones_names_its_number() -> None:
    wire = b"SEND\na:1\nb:2\nc:" + b"x" * 20 + b"\nd:4\n"
    for chunk in (0, 7):
        error = only_error(decode(wire, limits=Limits(max_header_length=10), chunk=chunk))
        assert isinstance(error, FrameTooLarge)
        assert "header line 3 of frame SEND" in error.detail


@CHUNKINGS
def test_command_line_length_limit(chunk: int) -> None:
    limits = Limits(max_header_length=4)
    assert decode(b"SEND\r\n\r\n\x00", limits=limits, chunk=chunk) == [Frame("SEND")]
    error = only_error(decode(b"ABORT\n\n\x00", limits=limits, chunk=chunk))
    assert isinstance(error, FrameTooLarge)
    assert error.message == "command too long"
    assert "command line" in error.detail and "4" in error.detail


def test_large_body_without_content_length_within_default_limits() -> None:
    body = bytes(range(1, 256)) * (5 * MiB // 255)
    decoder = FrameDecoder()
    wire = encode_frame(Frame("SEND", {}, body), "1.2", add_content_length=False)
    out: list[Frame | StompProtocolError] = []
    for start in range(0, len(wire), 4096):
        out.extend(decoder.feed(wire[start : start + 4096]))
    assert out == [Frame("SEND", {}, body)]


# -- UTF-8 ---------------------------------------------------------------------------------------


@CHUNKINGS
@pytest.mark.parametrize(
    ("wire", "where"),
    [
        (b"SE\xffND\n\n\x00", "command"),
        (b"SEND\nname\xc3:v\n\n\x00", "header line 1"),
        (b"SEND\na:1\nh:\xed\xa0\x80\n\n\x00", "header line 2"),  # an encoded surrogate
        (b"SEND\nh:\xe6\x97\n\n\x00", "header line 1"),  # truncated sequence
    ],
)
def test_invalid_utf8_in_headers_is_malformed(wire: bytes, where: str, chunk: int) -> None:
    error = only_error(decode(wire, chunk=chunk))
    assert isinstance(error, MalformedFrame)
    assert error.message == "invalid UTF-8"
    assert where in error.detail


def test_non_ascii_headers_and_invalid_utf8_bodies_are_fine() -> None:
    wire = "SEND\nd\u00e9st:\u65e5\u672c\U0001f600\n\n".encode() + b"\xff\xfe\x00"
    assert decode(wire) == [Frame("SEND", {"d\u00e9st": "\u65e5\u672c\U0001f600"}, b"\xff\xfe")]


# -- after an error ------------------------------------------------------------------------------


def test_frames_before_an_error_come_first_and_then_nothing() -> None:
    decoder = FrameDecoder(version="1.2")
    out = decoder.feed(b"SEND\n\na\x00\nSEND\n\nb\x00SEND\nbad\n\n\x00SEND\n\nc\x00")
    assert out[:2] == [Frame("SEND", {}, b"a"), Frame("SEND", {}, b"b")]
    assert len(out) == 3 and isinstance(out[2], MalformedFrame)
    assert decoder.buffered == 0
    assert decoder.feed(b"SEND\n\nd\x00") == []
    assert decoder.feed(b"") == []
    assert decoder.buffered == 0


def test_error_in_a_later_feed_keeps_earlier_frames() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"SEND\n\na\x00SEND\nh:") == [Frame("SEND", {}, b"a")]
    [error] = decoder.feed(b"1\nnocolon\n\n\x00")
    assert isinstance(error, MalformedFrame)
    assert decoder.feed(b"SEND\n\n\x00") == []


def test_errors_are_fatal_protocol_errors_with_message_and_detail() -> None:
    for wire, limits in [
        (b"SEND\nh:\\t\n\n\x00", Limits()),
        (b"SEND\n" + b"x" * 50, Limits(max_header_length=10)),
    ]:
        error = only_error(decode(wire, limits=limits))
        assert error.fatal
        assert error.message and error.detail
        assert str(error) == error.message


# -- buffered ------------------------------------------------------------------------------------


def test_buffered_counts_bytes_of_the_unfinished_frame() -> None:
    decoder = FrameDecoder()
    assert decoder.buffered == 0
    decoder.feed(b"SEND\nh:")
    assert decoder.buffered == 7
    decoder.feed(b"v\n\nbo")
    assert decoder.buffered == 12
    decoder.feed(b"dy\x00\n\nMESS")
    assert decoder.buffered == 4
    decoder.feed(b"AGE\ncontent-length:3\n\n\x00\x00")
    assert decoder.buffered == len(b"MESSAGE\ncontent-length:3\n\n") + 2
    assert decoder.feed(b"\x00\x00") == [Frame("MESSAGE", {"content-length": "3"}, b"\x00\x00\x00")]
    assert decoder.buffered == 0


# -- linear time ---------------------------------------------------------------------------------


class CountingBuffer(bytearray):
    """A bytearray that counts the bytes its searches examine."""

    scanned = 0

    def _span(self, start: int | None, end: int | None) -> tuple[int, int]:
        length = len(self)
        start = 0 if start is None else (start + length if start < 0 else min(start, length))
        end = length if end is None else (end + length if end < 0 else min(end, length))
        return start, max(start, end)

    def find(self, sub: bytes, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
        found = super().find(sub, start, end)
        first, last = self._span(start, end)
        self.scanned += (found + len(sub) if found >= 0 else last) - first
        return found

    def rfind(self, sub: bytes, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
        found = super().rfind(sub, start, end)
        first, last = self._span(start, end)
        self.scanned += last - (found if found >= 0 else first)
        return found

    def count(self, sub: bytes, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
        first, last = self._span(start, end)
        self.scanned += last - first
        return super().count(sub, start, end)

    def index(self, *args: object) -> int:
        raise AssertionError("the decoder is expected to search with find/rfind/count")


def counting_decoder(limits: Limits | None = None) -> tuple[FrameDecoder, CountingBuffer]:
    decoder = FrameDecoder(limits)
    buffer = CountingBuffer()
    decoder._buf = buffer  # white-box: count every search the decoder makes
    return decoder, buffer


def feed_chunks(decoder: FrameDecoder, wire: bytes, size: int) -> list[Frame | StompProtocolError]:
    out: list[Frame | StompProtocolError] = []
    for start in range(0, len(wire), size):
        out.extend(decoder.feed(wire[start : start + size]))
    return out


@pytest.mark.parametrize("with_length", [False, True], ids=["no-content-length", "content-length"])
def test_large_body_in_small_chunks_is_scanned_in_linear_time(with_length: bool) -> None:
    body = b"z" * (5 * MiB)
    wire = encode_frame(Frame("SEND", {"destination": "/queue/big"}, body), "1.2", add_content_length=with_length)
    decoder, buffer = counting_decoder()
    out = feed_chunks(decoder, wire, 4096)
    headers = {"destination": "/queue/big"} | ({"content-length": str(len(body))} if with_length else {})
    assert out == [Frame("SEND", headers, body)]
    assert isinstance(decoder._buf, CountingBuffer)  # still instrumented after the decoder compacted it
    # Quadratic rescanning would be ~ len(wire)**2 / 8192 = 3000+ times the input.
    assert 0 < buffer.scanned <= 3 * len(wire)


def test_long_header_block_in_tiny_chunks_is_scanned_in_linear_time() -> None:
    # One 200 KiB header line, then 2000 short ones, fed 64 bytes at a time.
    wire = b"SEND\nbig:" + b"v" * 200_000 + b"\n" + b"h:1\n" * 2000 + b"\nbody\x00"
    decoder, buffer = counting_decoder(Limits(max_header_length=256 * 1024, max_headers=5000))
    [frame] = feed_chunks(decoder, wire, 64)
    assert isinstance(frame, Frame)
    assert len(frame.headers["big"]) == 200_000
    assert buffer.scanned <= 8 * len(wire)


def test_many_small_frames_in_one_chunk_are_scanned_in_linear_time() -> None:
    one = b"MESSAGE\nsubscription:1\nmessage-id:42\n\n" + b"payload " * 4 + b"\x00\r\n"
    wire = one * 5000
    for crlf in (False, True):
        data = wire.replace(b"\n", b"\r\n").replace(b"\r\r", b"\r") if crlf else wire
        decoder, buffer = counting_decoder()
        assert len(decoder.feed(data)) == 5000
        assert buffer.scanned <= 6 * len(data)


# -- encode_frame --------------------------------------------------------------------------------


def test_encode_adds_content_length_for_a_body() -> None:
    assert encode_frame(Frame("SEND", {"destination": "/q"}, b"a\x00b"), "1.2") == (
        b"SEND\ndestination:/q\ncontent-length:3\n\na\x00b\x00"
    )


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_encode_adds_content_length_to_every_message(version: str) -> None:
    assert encode_frame(Frame("MESSAGE", {"a": "1"}), version) == b"MESSAGE\na:1\ncontent-length:0\n\n\x00"


def test_encode_without_body_adds_no_content_length() -> None:
    assert encode_frame(Frame("RECEIPT", {"receipt-id": "7"}), "1.2") == b"RECEIPT\nreceipt-id:7\n\n\x00"


def test_encode_without_adding_content_length() -> None:
    assert encode_frame(Frame("SEND", {"d": "/q"}, b"text"), "1.2", add_content_length=False) == (
        b"SEND\nd:/q\n\ntext\x00"
    )
    assert encode_frame(Frame("MESSAGE"), "1.1", add_content_length=False) == b"MESSAGE\n\n\x00"


def test_encode_keeps_an_existing_content_length() -> None:
    frame = Frame("SEND", {"content-length": "2"}, b"ab")
    assert encode_frame(frame, "1.2") == b"SEND\ncontent-length:2\n\nab\x00"


def test_encode_escapes_names_and_values_per_version() -> None:
    frame = Frame("SEND", {"k:\\\n\r": "v:\\\n\r"})
    assert encode_frame(frame, "1.2") == b"SEND\nk\\c\\\\\\n\\r:v\\c\\\\\\n\\r\n\n\x00"
    inner_cr = Frame("SEND", {"k:\\\n\r": "v:\\\n\rx"})
    assert encode_frame(inner_cr, "1.1") == b"SEND\nk\\c\\\\\\n\r:v\\c\\\\\\n\rx\n\n\x00"
    plain = Frame("SEND", {"k\\": "v:\\"})
    assert encode_frame(plain, "1.0") == b"SEND\nk\\:v:\\\n\n\x00"


@pytest.mark.parametrize(
    ("version", "headers"),
    [
        ("1.0", {"x-h": "a\nsubscription:EVIL"}),
        ("1.0", {"a:b": "v"}),
        ("1.0", {"x": "a\r"}),
        ("1.1", {"x": "a\r"}),
        ("1.1", {"x": "a\x00MESSAGE"}),
        ("1.2", {"x\x00": "v"}),
        ("1.2", {"x": "\ud800"}),
    ],
)
def test_encode_leaves_out_what_the_version_cannot_carry(version: str, headers: dict[str, str]) -> None:
    dropped: list[str] = []
    frame = Frame("MESSAGE", {"subscription": "s", **headers}, b"body")
    assert encode_frame(frame, version, dropped=dropped) == b"MESSAGE\nsubscription:s\ncontent-length:4\n\nbody\x00"
    assert dropped == list(headers)


def test_encode_writes_utf8() -> None:
    frame = Frame("SEND", {"d\u00e9st": "\u65e5\U0001f600"}, b"")
    assert encode_frame(frame, "1.2") == "SEND\nd\u00e9st:\u65e5\U0001f600\n\n\x00".encode()


# -- the header-block cache of the common case ------------------------------------------------------

def test_a_header_block_seen_before_decodes_the_same_and_is_never_shared() -> None:
    wire = b"SEND\ndestination:/queue/cache-a\npersistent:false\nx:1\nx:2\ncontent-length:2\n\nab\x00"
    first, second = FrameDecoder().feed(wire * 2)
    assert isinstance(first, Frame) and isinstance(second, Frame)
    expected = {"destination": "/queue/cache-a", "persistent": "false", "x": "1", "content-length": "2"}
    assert first.headers == second.headers == expected
    assert list(second.headers) == list(expected)  # (the order, too)
    first.headers.pop("x")  # (a handler changes the headers it was given: no later frame sees it)
    second.headers["destination"] = "changed"
    [third] = FrameDecoder(version="1.0").feed(wire)
    assert isinstance(third, Frame) and third.headers == expected


def test_a_header_block_seen_before_is_held_to_each_decoders_limits() -> None:
    wire = b"SEND\ndestination:/queue/cache-b\na:1\nb:2\nc:3\n\n\x00"
    assert FrameDecoder().feed(wire) == [Frame("SEND", {"destination": "/queue/cache-b", "a": "1", "b": "2", "c": "3"})]
    error = only_error(decode(wire, limits=Limits(max_headers=3)))
    assert isinstance(error, FrameTooLarge) and error.message == "too many headers"
    error = only_error(decode(wire, limits=Limits(max_header_length=20)))
    assert isinstance(error, FrameTooLarge)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_an_escaped_header_block_is_read_under_each_decoders_version(version: str) -> None:
    wire = b"SEND\ndestination:/queue/cache-c\nk:a\\cb\n\n\x00"
    FrameDecoder(version="1.2").feed(wire)  # (another version's reading first)
    [frame] = FrameDecoder(version=version).feed(wire)
    assert isinstance(frame, Frame)
    assert frame.headers["k"] == ("a\\cb" if version == "1.0" else "a:b")


def test_frames_decode_alike_while_a_decoder_skips_the_header_block_lookup() -> None:
    """New blocks in a row make a decoder skip the look-up for a while: the frames are the same."""
    decoder = FrameDecoder(version="1.2")
    wire = b"".join(b"SEND\ndestination:/queue/cache-d\nreceipt:%d\n\n%d\x00" % (n, n) for n in range(300))
    wire += b"SEND\ndestination:/queue/cache-d\n\nsame\x00" * 300
    frames = decoder.feed(wire)
    assert frames[:300] == [Frame("SEND", {"destination": "/queue/cache-d", "receipt": str(n)}, str(n).encode())
                            for n in range(300)]
    assert frames[300:] == [Frame("SEND", {"destination": "/queue/cache-d"}, b"same")] * 300
