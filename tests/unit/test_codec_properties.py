r"""Property-based tests of the STOMP codec: encode, chunk arbitrarily, decode, get the frames back.

Frames are generated with every special character (``:`` ``\n`` ``\r``
``\\`` NUL in bodies, non-ASCII) in header names and values, for each
protocol version, then written with :func:`encode_frame`, joined with
heart-beat EOLs (LF and CRLF) and fed to a :class:`FrameDecoder` in 1-byte
feeds or at random split points.

What cannot round-trip, and is therefore not generated:

* 1.0, CONNECT and CONNECTED have no escaping: no ``\n`` in their names or
  values and no ``:`` in names.
* Without a ``\r`` escape (1.0 and 1.1, CONNECT and CONNECTED) a value
  cannot end in ``\r``: the decoder reads ``\r\n`` as a line ending
  whatever the version, since it must read a 1.2 client's CONNECT before a
  version is negotiated.
* NUL never appears in headers; a body without ``content-length`` has no NUL.

Each line of the header block (and the blank line) ends in LF or CRLF, drawn
line by line.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import StompProtocolError
from gateway.wire.codec import FrameDecoder, Limits, _unescape_known, encode_frame, escape_header, unescape_header
from gateway.wire.frame import COMMANDS, UNESCAPED_COMMANDS, VERSIONS, Frame

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SPECIALS = [":", "\n", "\r", "\\", "\\n", "\\c", "\\r", "\\t", "\u00e9", "\u65e5", "\U0001f600", " ", "\t"]
header_text = st.lists(
    st.one_of(
        st.sampled_from(SPECIALS),
        st.characters(codec="utf-8", exclude_characters="\x00"),
    ),
    max_size=8,
).map("".join)
BODY_BYTES = [b"\n", b"\r", b"\r\n", b"\x00", b"\n\n", b"x"]
heartbeats = st.lists(st.sampled_from([b"\n", b"\r\n"]), max_size=3).map(b"".join)


@st.composite
def frames(draw: st.DrawFn, version: str) -> tuple[Frame, bool]:
    """A frame that survives encoding for ``version``, and whether to add content-length."""
    command = draw(st.sampled_from(sorted(COMMANDS)))
    escaped = version != "1.0" and command not in UNESCAPED_COMMANDS
    names = header_text.filter(lambda n: n != "content-length")
    values = header_text
    if not escaped:
        names = names.map(lambda n: n.replace(":", "").replace("\n", ""))
        values = values.map(lambda v: v.replace("\n", ""))
    if version != "1.2" or not escaped:
        values = values.map(lambda v: v.rstrip("\r"))
    headers = draw(st.dictionaries(names, values, max_size=5))
    with_length = draw(st.booleans())
    body = draw(st.one_of(st.binary(max_size=64), st.lists(st.sampled_from(BODY_BYTES), max_size=8).map(b"".join)))
    if not with_length:
        body = body.replace(b"\x00", b"")
    return Frame(command, headers, body), with_length


def with_crlf(draw: st.DrawFn, encoded: bytes) -> bytes:
    """``encoded`` with some of its header-block LFs (drawn one by one) turned into CRLF."""
    head, _, rest = encoded.partition(b"\n\n")
    lines = [*head.split(b"\n"), b""]
    eols = [draw(st.sampled_from([b"\n", b"\r\n"])) for _ in lines]
    return b"".join(line + eol for line, eol in zip(lines, eols, strict=True)) + rest


@st.composite
def streams(draw: st.DrawFn) -> tuple[str, list[Frame], bytes]:
    """A version, the frames a decoder should yield, and the bytes on the wire."""
    version = draw(st.sampled_from(VERSIONS))
    drawn = draw(st.lists(frames(version), min_size=1, max_size=5))
    expected: list[Frame] = []
    wire = [draw(heartbeats)]
    for frame, with_length in drawn:
        wire.append(with_crlf(draw, encode_frame(frame, version, add_content_length=with_length)))
        wire.append(draw(heartbeats))
        headers = dict(frame.headers)
        if with_length and (frame.body or frame.command == "MESSAGE"):
            headers["content-length"] = str(len(frame.body))
        expected.append(Frame(frame.command, headers, frame.body))
    return version, expected, b"".join(wire)


def split(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(wire), *(cut % (len(wire) + 1) for cut in cuts)})
    return [wire[a:b] for a, b in itertools.pairwise(points)]


def decode_chunks(version: str, chunks: list[bytes]) -> list[Frame | StompProtocolError]:
    decoder = FrameDecoder(Limits(), version)
    out: list[Frame | StompProtocolError] = []
    fed = 0
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
        fed += len(chunk)
        assert 0 <= decoder.buffered <= fed
    assert decoder.buffered == 0
    return out


@SETTINGS
@given(streams())
def test_round_trip_in_one_feed(stream: tuple[str, list[Frame], bytes]) -> None:
    version, expected, wire = stream
    assert decode_chunks(version, [wire]) == expected


@SETTINGS
@given(streams())
def test_round_trip_in_one_byte_feeds(stream: tuple[str, list[Frame], bytes]) -> None:
    version, expected, wire = stream
    assert decode_chunks(version, [wire[i : i + 1] for i in range(len(wire))]) == expected


@SETTINGS
@given(streams(), st.lists(st.integers(min_value=0), max_size=30))
def test_round_trip_split_anywhere(stream: tuple[str, list[Frame], bytes], cuts: list[int]) -> None:
    version, expected, wire = stream
    assert decode_chunks(version, split(wire, cuts)) == expected


@SETTINGS
@given(streams(), st.randoms(use_true_random=False))
def test_frames_come_out_as_soon_as_they_are_complete(
    stream: tuple[str, list[Frame], bytes], rnd: random.Random
) -> None:
    """However the stream is cut, each feed yields exactly the frames it completed."""
    version, expected, wire = stream
    decoder = FrameDecoder(Limits(), version)
    done = 0
    position = 0
    while position < len(wire):
        step = rnd.randint(1, 40)
        out = decoder.feed(wire[position : position + step])
        position += step
        assert out == expected[done : done + len(out)]
        done += len(out)
    assert done == len(expected)


@SETTINGS
@given(st.sampled_from(["1.1", "1.2"]), header_text)
def test_escape_then_unescape_is_identity(version: str, text: str) -> None:
    if version == "1.1":
        # 1.1 cannot escape \r; it passes through untouched.
        assert unescape_header(escape_header(text, version), version) == text
        return
    escaped = escape_header(text, version)
    assert "\n" not in escaped and "\r" not in escaped and ":" not in escaped
    assert unescape_header(escaped, version) == text


@SETTINGS
@given(header_text)
def test_version_1_0_never_escapes(text: str) -> None:
    assert escape_header(text, "1.0") == text
    assert unescape_header(text, "1.0") == text


TOKENS = [b"SEND\n", b"CONNECT\r\n", b"\n", b"\r", b"\r\n", b"\n\n", b"\x00", b":", b"\\", b"\\c", b"\\t"]
TOKENS += [b"h:v\n", b"h", b"v" * 12, b"content-length:", b"3", b"x" * 40, "\u00e9".encode(), b"\xff", b"\xc3"]


@st.composite
def damaged_streams(draw: st.DrawFn) -> bytes:
    """A valid stream with a few bytes replaced, inserted or deleted."""
    wire = bytearray(draw(streams())[2])
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=len(wire)))
        edit = draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = draw(st.sampled_from([0, 10, 13, 58, 92, 0xFF, 0x74]))
        if edit == "insert" or at == len(wire):
            wire.insert(at, byte)
        elif edit == "replace":
            wire[at] = byte
        else:
            del wire[at]
    return bytes(wire)


garbage = st.one_of(
    st.binary(max_size=200),
    st.lists(st.sampled_from(TOKENS), max_size=40).map(b"".join),
    damaged_streams(),
)


@SETTINGS
@given(garbage, st.sampled_from(VERSIONS), st.lists(st.integers(min_value=0), max_size=10))
def test_garbage_never_crashes_and_chunking_does_not_change_the_outcome(
    data: bytes, version: str, cuts: list[int]
) -> None:
    """Arbitrary bytes give frames and at most one protocol error (last); cutting them changes neither."""
    limits = Limits(max_frame_size=150, max_headers=4, max_header_length=40)
    whole = FrameDecoder(limits, version).feed(data)
    pieces: list[Frame | StompProtocolError] = []
    decoder = FrameDecoder(limits, version)
    for chunk in split(data, cuts):
        pieces.extend(decoder.feed(chunk))
    for out in (whole, pieces):
        errors = [item for item in out if isinstance(item, StompProtocolError)]
        assert len(errors) <= 1
        if errors:
            assert out[-1] is errors[0]
            assert errors[0].message and errors[0].detail
    assert [item for item in whole if isinstance(item, Frame)] == [item for item in pieces if isinstance(item, Frame)]
    # Which limit is reported first may depend on the cuts; that there is an error may not.
    assert isinstance(whole[-1:][0] if whole else None, StompProtocolError) == isinstance(
        pieces[-1:][0] if pieces else None, StompProtocolError
    )


@SETTINGS
@given(st.sampled_from(["1.1", "1.2"]), st.sampled_from(sorted(COMMANDS)),
       st.dictionaries(header_text, header_text, max_size=6))
def test_encoded_headers_are_each_escaped_as_escape_header_says(version: str, command: str,
                                                                 headers: dict[str, str]) -> None:
    """encode_frame escapes a whole frame's names and values at once; the result is, header by header,
    what escape_header gives (or, for what cannot be written, the header is left out)."""
    dropped: list[str] = []
    encoded = encode_frame(Frame(command, headers, b""), version, add_content_length=False, dropped=dropped)
    if command in UNESCAPED_COMMANDS:
        return
    expected = [f"{escape_header(name, version)}:{escape_header(value, version)}"
                for name, value in headers.items() if name not in dropped]
    head = encoded.decode("utf-8").split("\n\n", 1)[0]
    assert head.split("\n")[1:] == ([] if not expected else "\n".join(expected).split("\n"))


class GeneralDecoder(FrameDecoder):
    """The decoder without its whole-frame shortcut (:meth:`FrameDecoder._whole_frame`)."""

    __slots__ = ()

    def _whole_frame(self) -> Frame | None:
        return None


def outcome(items: list[Frame | StompProtocolError]) -> list[object]:
    return [item if isinstance(item, Frame) else (type(item), item.message, item.detail) for item in items]


HEADER_LINES = [b"h:v", b"h:w", b"a:b:c", b"k\\c:v\\n", b"bad\\t:x", b"nocolon", b"h:v\r", b"", b"x" * 30 + b":y",
                b"content-length:3", b"content-length:0003", b"content-length:99", b"content-length: 3",
                b"content-length:-1", b"content-length:" + b"9" * 20, "\u00e9:\u65e5".encode(), b"\xff:v",
                b"content-length:3000"]


@st.composite
def frame_streams(draw: st.DrawFn) -> bytes:
    """Frames made of a pool of header lines (repeats, escapes, CRs, content-lengths right and wrong,
    invalid UTF-8) and bodies with and without NULs, with heart-beats between them."""
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        out.append(draw(st.sampled_from([b"", b"\n", b"\r\n", b"\x00", b"\n\n"])))
        lines = [draw(st.sampled_from([b"SEND", b"CONNECT", b"MESSAGE", b"ACK", b""]))]
        lines += draw(st.lists(st.sampled_from(HEADER_LINES), max_size=6))
        out.append(b"\n".join(lines) + draw(st.sampled_from([b"\n\n", b"\n\r\n", b"\n"])))
        # (bodies past 2 KB are copied out through a view; a body cut short is read on in the body phase)
        out.append(draw(st.sampled_from([b"abc", b"", b"a\x00c", b"x" * 100, b"y" * 3000, b"z\x00" * 1500])) + b"\x00")
    return b"".join(out)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(garbage, streams().map(lambda stream: stream[2]), frame_streams()), st.sampled_from(VERSIONS),
       st.lists(st.integers(min_value=0), max_size=10),
       st.sampled_from([None, (150, 4, 40), (60, 2, 12), (60, 4, 200)]))
def test_the_whole_frame_shortcut_reads_and_refuses_exactly_as_the_general_path(
    data: bytes, version: str, cuts: list[int], limits: tuple[int, int, int] | None
) -> None:
    """Same frames, same error (message and detail) at the same place, however the bytes are cut."""
    bounds = Limits(*limits) if limits else Limits()
    fast, general = FrameDecoder(bounds, version), GeneralDecoder(bounds, version)
    for chunk in split(data, cuts):
        assert outcome(fast.feed(chunk)) == outcome(general.feed(chunk))
        assert fast.buffered == general.buffered


@SETTINGS
@given(st.sampled_from(["1.1", "1.2"]),
       st.lists(st.sampled_from(["\\", "\\\\", "c", "n", "r", "t", ":", "x", "\n"]), max_size=12).map("".join))
def test_the_shortcut_unescapes_as_unescape_header_does(version: str, text: str) -> None:
    try:
        expected: str | None = unescape_header(text, version)
    except StompProtocolError:
        expected = None
    assert _unescape_known(text, version) == expected


ACK_ID_PARTS = [b"jmsgw-1-", b"7", b":", b"\\c", b"\\", b"\r", b"\n", b"\x00", b"\xff", "\u00e9".encode(), b" ", b""]


@st.composite
def ack_streams(draw: st.DrawFn) -> bytes:
    r"""ACK frames as a STOMP 1.2 client sends them (``ACK\nid:<id>\n\n\0``) and near misses:
    ids with escapes, CRs, line breaks, NULs, invalid UTF-8; a second header; CRLF line ends; a
    body; heart-beats and other frames between them."""
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        out.append(draw(st.sampled_from([b"", b"", b"\n", b"\r\n", b"\x00"])))
        ack_id = b"".join(draw(st.lists(st.sampled_from(ACK_ID_PARTS), max_size=5)))
        head = draw(st.sampled_from([b"ACK\nid:", b"ACK\nid:", b"ACK\nid:", b"ACK\r\nid:", b"NACK\nid:", b"ACK\nidx:"]))
        extra = draw(st.sampled_from([b"", b"", b"", b"\nreceipt:r", b"\nid:second", b"\ntransaction:t"]))
        end = draw(st.sampled_from([b"\n\n\x00", b"\n\n\x00", b"\n\n\x00", b"\r\n\r\n\x00", b"\n\nbody\x00",
                                    b"\n\x00"]))
        out.append(head + ack_id + extra + end)
    return b"".join(out)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ack_streams(), st.sampled_from(VERSIONS), st.lists(st.integers(min_value=0), max_size=6),
       st.sampled_from([None, (20, 4, 200), (200, 4, 12), (200, 0, 200), (16, 1, 14)]))
def test_the_bare_ack_shortcut_reads_and_refuses_exactly_as_the_general_path(
    data: bytes, version: str, cuts: list[int], limits: tuple[int, int, int] | None
) -> None:
    """The ACK fast path of :meth:`FrameDecoder._whole_frame` gives the general path's frames and
    errors, however the bytes are cut, within and past every limit."""
    bounds = Limits(*limits) if limits else Limits()
    fast, general = FrameDecoder(bounds, version), GeneralDecoder(bounds, version)
    for chunk in split(data, cuts):
        assert outcome(fast.feed(chunk)) == outcome(general.feed(chunk))
        assert fast.buffered == general.buffered


class ShortcutOnlyDecoder(FrameDecoder):
    """Refuses to read a frame through the general path."""

    __slots__ = ()

    def _next_frame(self) -> Frame | None:
        assert self.buffered == 0, "the general path was taken"
        return None


ACK_CASES = [b"ACK\nid:a\x00b\n\n\x00", b"ACK\nid:a\rb\n\n\x00", b"ACK\nid:a\r\n\n\x00", b"ACK\nid:a\\cb\n\n\x00",
             b"ACK\nid:a\\tb\n\n\x00", b"ACK\nid:a\nb:c\n\n\x00", b"ACK\nid:\xff\n\n\x00", b"ACK\nid:\n\n\x00",
             b"ACK\nid:a:b\n\n\x00", b"ACK\nid:a\n\nbody\x00", b"ACK\nid:a\n\x00", b"ACK\nid:a\n\n"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("data", ACK_CASES)
def test_near_bare_acks_are_read_as_the_general_path_reads_them(data: bytes, version: str) -> None:
    fast, general = FrameDecoder(version=version), GeneralDecoder(version=version)
    assert outcome(fast.feed(data + b"ACK\nid:next\n\n\x00")) == outcome(general.feed(data + b"ACK\nid:next\n\n\x00"))
    assert fast.buffered == general.buffered


BARE_ACK = b"ACK\nid:jmsgw-1-12\n\n\x00"


@pytest.mark.parametrize("slack", [-1, 0, 1])
@pytest.mark.parametrize(("limit", "exact"), [
    ("max_frame_size", len(BARE_ACK) - 1),  # (the NUL is not counted)
    ("max_header_length", len(b"id:jmsgw-1-12")),  # (a line's length: the general path's rule)
    ("max_header_length", len(BARE_ACK) - 3),  # (the header block's: the whole-frame shortcut's)
    ("max_headers", 1),
])
def test_a_bare_ack_at_each_limit_is_read_as_the_general_path_reads_it(limit: str, exact: int, slack: int) -> None:
    data = BARE_ACK
    bounds = Limits(**{limit: exact + slack})
    fast, general = FrameDecoder(bounds, "1.2"), GeneralDecoder(bounds, "1.2")
    assert outcome(fast.feed(data)) == outcome(general.feed(data))
    assert fast.buffered == general.buffered


def test_a_bare_ack_takes_the_shortcut() -> None:
    """(So that the property test above compares the shortcut, not the general path with itself.)"""
    decoder = ShortcutOnlyDecoder(version="1.2")
    assert decoder.feed(b"ACK\nid:jmsgw-1-7\n\n\x00ACK\nid:\xc3\xa9:x\n\n\x00") == [
        Frame("ACK", {"id": "jmsgw-1-7"}), Frame("ACK", {"id": "\u00e9:x"})]


@SETTINGS
@given(st.lists(st.sampled_from([b"\x00", b"x" * 700, b"\n\n", b"a", b"\r\n"]), max_size=12).map(b"".join),
       st.booleans(), st.sampled_from(VERSIONS),
       st.lists(st.integers(min_value=0), min_size=1, max_size=8))
def test_bodies_cut_anywhere_are_read_whole_by_both_paths(body: bytes, with_length: bool, version: str,
                                                          cuts: list[int]) -> None:
    """A body (with NULs inside when content-length says how long it is) arriving in pieces, cut
    anywhere, the header block too: the shortcut, which reads on in the body phase once the headers
    are in, gives the frames the general path gives, and the bytes they were made of."""
    if not with_length:
        body = body.replace(b"\x00", b"")
    wire = b"".join(encode_frame(Frame("SEND", {"destination": "/queue/a", "receipt": str(index)}, body),
                                 version, add_content_length=with_length) for index in range(3))
    fast, general = FrameDecoder(Limits(), version), GeneralDecoder(Limits(), version)
    got: list[Frame | StompProtocolError] = []
    for chunk in split(wire, cuts):
        items = fast.feed(chunk)
        assert outcome(items) == outcome(general.feed(chunk))
        assert fast.buffered == general.buffered
        got += items
    assert [(item.headers["receipt"], item.body) for item in got if isinstance(item, Frame)] == [
        (str(index), body) for index in range(3)]
