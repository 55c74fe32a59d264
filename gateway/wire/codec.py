"""Sans-IO STOMP codec: bytes in, :class:`Frame` out, and back.

:class:`FrameDecoder` is a plain object with :meth:`FrameDecoder.feed`; it
buffers bytes across arbitrary chunk boundaries, skips heart-beat EOLs
and stray NULs between frames (padding, as RabbitMQ takes it), accepts LF
and CRLF line endings, honours ``content-length`` (bodies may then contain
NUL), unescapes headers as the negotiated version says, keeps the first of
repeated headers and enforces the configured limits.  :func:`encode_frame`
writes a frame for a given version.

This module must not import Twisted or touch a socket.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from gateway.errors import FrameSkipped, FrameTooLarge, MalformedFrame, StompProtocolError
from gateway.wire.compiled import mypyc_attr
from gateway.wire.frame import UNESCAPED_COMMANDS, Frame

MiB = 1024 * 1024


@dataclass(slots=True, frozen=True)
class Limits:
    """Size limits a decoder enforces; a violation is a fatal protocol error.

    :ivar max_frame_size: command + headers + body, in bytes.
    :ivar max_headers: number of header lines in one frame.
    :ivar max_header_length: bytes in one header (or command) line.
    """

    max_frame_size: int = 32 * MiB
    max_headers: int = 1000
    max_header_length: int = 64 * 1024


_ESCAPE_11 = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"})
_ESCAPE_12 = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"})
_UNESCAPE_11 = {"\\": "\\", "n": "\n", "c": ":"}
_UNESCAPE_12 = {"\\": "\\", "n": "\n", "c": ":", "r": "\r"}
_ESCAPE_SEQUENCE = re.compile(r"\\(.?)", re.DOTALL)


def escape_header(text: str, version: str) -> str:
    """Escape a header name or value for ``version`` (no-op for 1.0)."""
    if version == "1.2":
        return text.translate(_ESCAPE_12)
    if version == "1.1":
        return text.translate(_ESCAPE_11)
    return text


def unescape_header(text: str, version: str) -> str:
    """Undo :func:`escape_header`; an undefined escape is a :class:`MalformedFrame`."""
    if version == "1.0" or "\\" not in text:
        return text
    table = _UNESCAPE_12 if version == "1.2" else _UNESCAPE_11

    def replace(match: re.Match[str]) -> str:
        char = match.group(1)
        try:
            return table[char]
        except KeyError:
            shown = "\\" + char if char else "a trailing \\"
            raise MalformedFrame(
                "invalid header escape",
                f"undefined escape sequence {shown!r} in header {text!r} (STOMP {version})",
            ) from None

    return _ESCAPE_SEQUENCE.sub(replace, text)


def _unescape_known(text: str, version: str) -> str | None:
    """:func:`unescape_header` for 1.1 and 1.2 by ``str.replace`` on text without a NUL (a header
    block's); None if an escape is undefined (the general path then says which)."""
    if "\\" not in text:
        return text
    # Pairs of backslashes first (str.replace pairs them from the left, as a reader does), held as NUL.
    held = text.replace("\\\\", "\x00")
    bare = held.replace("\\c", "").replace("\\n", "")
    if version == "1.2":
        bare = bare.replace("\\r", "")
    if "\\" in bare:
        return None
    held = held.replace("\\c", ":").replace("\\n", "\n")
    if version == "1.2":
        held = held.replace("\\r", "\r")
    return held.replace("\x00", "\\")


_BARE_ACK = re.compile(b"ACK\nid:([^\n\r\\\\\x00]*)\n\n\x00")
"""A STOMP 1.2 client's ACK as most are sent: its ``id`` alone, without an escape or a CR, no
body (:meth:`FrameDecoder._whole_frame` reads it without the header loop)."""
_UNSAFE_NAME_10 = re.compile("[:\n\x00]")
_NEEDS_ESCAPE = re.compile("[\\\\:\n\r]")


def unrepresentable(name: str, value: str, version: str, *, escaped: bool = True) -> bool:
    """Whether the header ``name:value`` cannot be written for ``version`` so that
    every reader parses it back as it is.

    A NUL anywhere ends the frame; in 1.0, and in the frames whose headers are
    never escaped (``escaped`` false: CONNECT, CONNECTED), a LF starts another
    header and a ``:`` in the name ends the name; before 1.2 a CR that ends the
    value is read as part of a CRLF line end (there is no escape for it); text
    that is not Unicode (a lone surrogate) cannot be UTF-8.
    """
    if _unsafe(name, value, version, escaped):
        return True
    try:
        name.encode("utf-8")
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _unsafe(name: str, value: str, version: str, escaped: bool) -> bool:
    """:func:`unrepresentable` but for lone surrogates (the encoder finds those when it encodes)."""
    if "\x00" in name or "\x00" in value:
        return True
    if (not escaped or version == "1.0") and (_UNSAFE_NAME_10.search(name) or "\n" in value):
        return True
    return version != "1.2" and value.endswith("\r")


def _header_line(name: str, value: str) -> str:
    return f"{name}:{value}"


def _escape_joined(text: str, version: str) -> str:
    """:func:`escape_header` for 1.1 and 1.2 by ``str.replace`` (faster on long text)."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    return text.replace("\r", "\\r") if version == "1.2" else text


def encode_frame(
    frame: Frame, version: str, *, add_content_length: bool = True, dropped: list[str] | None = None
) -> bytes:
    """Serialise ``frame`` for a peer speaking ``version``.

    ``content-length`` is added when the frame lacks it and either has a body
    or is a MESSAGE, unless ``add_content_length`` is false (a client sending
    a TextMessage to a broker that types messages by that header).

    Headers are escaped as ``version`` says (1.1, 1.2).  A header that no
    escape of the version can carry (:func:`unrepresentable`: a NUL, a CR in
    1.1, a line break in 1.0) is left out rather than written in a form a
    reader would split into other headers or frames; its name is appended to
    ``dropped`` when given.
    """
    headers = frame.headers
    body = frame.body
    escaped = version != "1.0" and frame.command not in UNESCAPED_COMMANDS
    mark = len(dropped) if dropped is not None else 0
    # Special characters are rare: one test over all names and values first, then per header only if needed.
    names = "".join(headers)
    probe = names + "".join(headers.values())
    if escaped:
        special = "\\" in probe or ":" in probe or "\n" in probe or "\r" in probe or "\x00" in probe
        # Only a NUL, or a CR before 1.2, can make a header unwritable.
        check = special and ("\x00" in probe or (version != "1.2" and "\r" in probe))
    else:  # nothing is escaped: only what would break the line or the frame matters (a ':' in a value is fine)
        special = check = "\n" in probe or "\r" in probe or "\x00" in probe or ":" in names
    if not special:
        lines = [f"{name}:{value}" for name, value in headers.items()]
    elif escaped and not check:
        # Something to escape (in a MESSAGE, typically the ':' of a message-id) but nothing to leave out,
        # so no NUL anywhere: escape all names and all values in two translate calls, NUL-separated.
        # (str.replace scans in C; translate with a multi-character table looks every character up)
        lines = list(map(_header_line, _escape_joined("\x00".join(headers), version).split("\x00"),
                         _escape_joined("\x00".join(headers.values()), version).split("\x00")))
    else:
        table = _ESCAPE_12 if version == "1.2" else _ESCAPE_11
        needs_escape = _NEEDS_ESCAPE.search
        lines = []
        for name, value in headers.items():
            if check and _unsafe(name, value, version, escaped):
                if dropped is not None:
                    dropped.append(name)
                continue
            if escaped:  # (translate only what needs it: most values, e.g. numbers, do not)
                if needs_escape(name):
                    name = name.translate(table)
                if needs_escape(value):
                    value = value.translate(table)
            lines.append(f"{name}:{value}")
    if add_content_length and "content-length" not in headers and (body or frame.command == "MESSAGE"):
        lines.append(f"content-length:{len(body)}")
    head = f"{frame.command}\n" + "\n".join(lines) + "\n\n" if lines else f"{frame.command}\n\n"
    try:
        encoded = head.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (text from Java): leave out the headers holding one
        kept = {name: value for name, value in headers.items()
                if not unrepresentable(name, value, version, escaped=escaped)}
        if dropped is not None:
            del dropped[mark:]
            dropped.extend(name for name in headers if name not in kept)
        return encode_frame(Frame(frame.command, kept, body), version, add_content_length=add_content_length)
    return b"".join((encoded, body, b"\x00"))


_VIEW_COPY = 2048
"""Bodies from this size on are copied out of the buffer through a view (once), smaller ones by a slice (a
second copy, cheaper than making the view)."""

_HEADER_BLOCKS: dict[bytes, tuple[str, dict[str, str], int]] = {}
"""Header blocks :meth:`FrameDecoder._whole_frame` read before (any connection): the block's bytes
(command and header lines, no CR, no backslash, so the same under every version) to its command,
headers and line count.  A producer sends the same block again and again (destination, persistent,
content-length of one size): looking it up skips the decode, the split and the header loop.  The
cached dict is never handed out (a copy is).  At most :data:`_HEADER_BLOCKS_MAX` blocks of up to
:data:`_HEADER_BLOCK_CACHED` bytes (cleared when full)."""
_HEADER_BLOCKS_MAX = 1024
_HEADER_BLOCK_CACHED = 512
_BLOCK_MISSES = 8
_BLOCKS_SKIPPED = 256
"""A decoder whose last :data:`_BLOCK_MISSES` header blocks were all new (a receipt or an id in
every SEND) reads its next :data:`_BLOCKS_SKIPPED` frames without the look-up (a miss costs the
key's copy and an entry, ~0.5 µs), then tries again."""


def _body(buf: bytearray, start: int, end: int) -> bytes:
    """``buf[start:end]`` as bytes: a large body copied once (through a view), not twice."""
    if end - start < _VIEW_COPY:
        return bytes(buf[start:end])
    with memoryview(buf) as view:
        return view[start:end].tobytes()


HEARTBEAT = b"\n"
"""What a heart-beat looks like on the wire."""

SKIP_LIMIT = 128 * MiB
"""The default :attr:`FrameDecoder.skip_limit`: a skipped frame may have that many bytes (a stock ActiveMQ
carries messages up to 100 MB); a larger one is fatal, as any oversized frame without skipping."""

_NOT_SKIPPING = -2
_TO_NUL = -1
"""Values of :attr:`FrameDecoder._skip_left` but a count of bytes: no frame is being skipped; the
skipped frame (without ``content-length``) ends at the next NUL."""


@mypyc_attr(allow_interpreted_subclasses=True)  # (the tests' differential decoders subclass it)
class FrameDecoder:
    """Incremental STOMP frame reader.

    Feed it bytes with :meth:`feed`; it returns the frames completed so far.
    After a protocol violation it returns the error as the last item of the
    list and ignores everything fed afterwards.

    A frame that arrived whole, with LF line ends and within the limits
    (what clients pipeline under load) is read in one pass
    (:meth:`_whole_frame`); anything else takes the general path, which reads
    and refuses exactly as if the shortcut were not there.  There, the header
    block (command and headers, up to the blank line) is decoded in one go
    once it is complete; until then only the bytes that arrived
    since the previous feed are examined, so decoding is linear in the input
    however it is chunked.  Limits are checked as bytes arrive: an oversized
    frame or header is refused before it is buffered whole.  The frame size
    counts command, headers and body (not the NUL, nor heart-beats before
    the frame).  Between frames, EOLs (heart-beats) and NULs are skipped:
    some clients, and RabbitMQ's own tests, pad frames with an EOL and a NUL.
    A NUL after a command has begun, before the blank line, is a malformed
    frame.

    A frame over ``max_frame_size`` whose command is in :attr:`skip_oversized`
    and whose header block was within the limits is not fatal: it is yielded as
    a :class:`~gateway.errors.FrameSkipped` (headers, size) in its place, its
    body is discarded as it arrives (never buffered whole: with
    ``content-length`` from the moment the headers are read, without it once
    the limit is passed) and the frames after it are read as usual.  That is
    the error path only: the frames within the limits take the same steps
    whether skipping is on or not.

    :ivar skip_oversized: the commands whose oversized frames are skipped
        (a broker connection: ``MESSAGE``); empty (the default), every
        oversized frame is fatal.
    :ivar skip_limit: the most bytes (command, headers, body) a skipped frame
        may have: one that announces more is fatal at once, one without
        ``content-length`` once that many were discarded (a body that never
        ends is not read for ever).
    :ivar version: protocol version used to unescape headers; the session
        sets it once CONNECT negotiated one.
    """

    __slots__ = (
        "_blocks_missed",
        "_blocks_skipped",
        "_body_start",
        "_buf",
        "_command",
        "_content_length",
        "_failed",
        "_headers",
        "_lines",
        "_pos",
        "_resume",
        "_scan",
        "_skip_left",
        "_skip_seen",
        "limits",
        "skip_limit",
        "skip_oversized",
        "version",
    )

    def __init__(self, limits: Limits | None = None, version: str = "1.0", *,
                 skip_oversized: frozenset[str] = frozenset(), skip_limit: int = SKIP_LIMIT) -> None:
        self.limits = limits or Limits()
        self.version = version
        self.skip_oversized = skip_oversized
        self.skip_limit = skip_limit
        self._buf = bytearray()
        self._pos = 0
        self._failed = False  # (after a fatal error; and while a skipped frame's body is discarded)
        self._skip_left = _NOT_SKIPPING  # (body bytes of the skipped frame still to discard, or _TO_NUL)
        self._skip_seen = 0  # (_TO_NUL: bytes of the skipped frame before the buffer's start)
        self._blocks_missed = 0  # (header blocks not in _HEADER_BLOCKS in a row)
        self._blocks_skipped = 0  # (frames still to read without looking their block up)
        self._reset_frame()

    def _reset_frame(self) -> None:
        # _pos: first byte of the current frame.  Header phase: _scan is the
        # start of the unfinished line, _resume the end of the bytes examined
        # so far, _lines the LFs among them.  Body phase (_body_start >= 0):
        # _scan is where to resume looking for the NUL.
        self._scan = self._resume = self._pos
        self._lines = 0
        self._command: str | None = None
        self._headers: dict[str, str] = {}
        self._body_start = -1
        self._content_length = -1

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buf) - self._pos

    def push(self, data: bytes) -> None:
        """Buffer ``data`` without reading frames from it (the next :meth:`frames` call does)."""
        if not self._failed or self._skip_left != _NOT_SKIPPING:  # (skipping: the next frames call discards)
            self._buf += data

    def may_hold_frame(self) -> bool:
        """Whether the bytes after the frames read so far may make a whole frame (a NUL is among
        them); false means the next :meth:`frames` call would yield nothing without more input."""
        if self._failed:
            return self._skip_left != _NOT_SKIPPING and self._buf.find(b"\x00") >= 0
        return self._buf.find(b"\x00", self._pos) >= 0

    def feed(self, data: bytes) -> list[Frame | StompProtocolError]:
        """Add ``data`` and return the frames it completed (and an error last, if any).

        Every frame is decoded under :attr:`version` as it was when ``feed``
        was called; a caller that changes the version on a frame (a server on
        CONNECT) iterates :meth:`frames` instead.
        """
        return list(self.frames(data))

    def frames(self, data: bytes) -> Iterator[Frame | StompProtocolError]:
        """Add ``data`` and yield the frames it completed one by one (an error last, if any).

        Each frame is decoded only when the caller asks for it, so a
        :attr:`version` set while handling one frame applies to the frames
        after it, even those that came in the same read (CONNECT and the
        frames a client pipelined behind it).  A caller may stop iterating
        early; the rest stays buffered for the next call.
        """
        if self._failed:
            if self._skip_left != _NOT_SKIPPING:  # (discarding a skipped frame's body)
                self._buf += data
                yield from self._skipping(None)
            return
        self._compact()
        self._buf += data
        try:
            while True:
                frame = self._whole_frame() if self._body_start < 0 and self._resume == self._pos else None
                if frame is None:
                    frame = self._next_frame()
                    if frame is None:
                        break
                yield frame
        except StompProtocolError as error:
            if self.skip_oversized:
                yield from self._skipping(error)
                return
            self._fail()
            yield error
            return
        self._compact()

    def _fail(self) -> None:
        """A fatal error: nothing more is read (nor skipped), what is buffered is dropped."""
        self._failed = True
        self._skip_left = _NOT_SKIPPING
        self._buf.clear()
        self._pos = 0
        self._reset_frame()

    def _skipping(self, error: StompProtocolError | None) -> Iterator[Frame | StompProtocolError]:
        """:meth:`frames` from ``error`` on, for a decoder with :attr:`skip_oversized` (``error`` None: more of
        a skipped frame's body is in the buffer, from its start): an oversized frame to skip is yielded as
        :class:`~gateway.errors.FrameSkipped`, the body it has in the buffer is discarded and the frames
        after it are read (each skipped as it comes); any other error is fatal, as without skipping."""
        while True:
            if error is not None:
                skipped = self._skip(error)
                if skipped is None:
                    self._fail()
                    yield error
                    return
                yield skipped
                error = None
            try:
                if not self._discard():
                    return  # (the rest of its body comes in later reads)
                while True:  # (the loop of frames, again: the frames after the skipped one)
                    frame = self._whole_frame() if self._body_start < 0 and self._resume == self._pos else None
                    if frame is None:
                        frame = self._next_frame()
                        if frame is None:
                            break
                    yield frame
            except StompProtocolError as next_error:
                error = next_error
                continue
            self._compact()
            return

    def _skip(self, error: StompProtocolError) -> FrameSkipped | None:
        """Start skipping the current frame if ``error`` is its body going over ``max_frame_size`` (its
        header block was read and within the limits: there is a command and headers to report) and its
        command is one to skip: the buffer then starts at its body; None for any other error."""
        command = self._command
        start = self._body_start
        if not isinstance(error, FrameTooLarge) or start < 0 or command is None \
                or command not in self.skip_oversized:
            return None
        headers = self._headers
        announced = headers.get("content-length")
        if announced is not None:  # (what _parse_length refused: digits, announcing more than the limit)
            digits = announced.strip().lstrip("0")
            if len(digits) > 18:  # (no broker sends that: one that announces it is not to be followed)
                return None
            length = int(digits or "0")
            size = start - self._pos + length
            if size > self.skip_limit:
                return None
            whole = True
            self._skip_left = length
        else:
            size = len(self._buf) - self._pos
            terminator = self._buf.find(b"\x00", start)
            whole = terminator >= 0
            if whole:  # (it arrived whole)
                size = terminator - self._pos
                if size > self.skip_limit:
                    return None
            self._skip_left = _TO_NUL
            self._skip_seen = start - self._pos
        skipped = FrameSkipped(command, headers, size, whole, self.limits.max_frame_size)
        del self._buf[:start]
        self._pos = 0
        self._failed = True
        self._reset_frame()
        return skipped

    def _discard(self) -> bool:
        """Drop the skipped frame's bytes at the start of the buffer; true once it ended (the buffer then
        holds what came after it and reading goes on), false while more of it is to come.  A frame whose
        ``content-length`` bytes are not followed by its NUL is a :class:`MalformedFrame`; one without
        ``content-length`` past :attr:`skip_limit` a :class:`FrameTooLarge`."""
        buf = self._buf
        left = self._skip_left
        if left == _TO_NUL:
            end = buf.find(b"\x00")
            if self._skip_seen + (end if end >= 0 else len(buf)) > self.skip_limit:
                self._skip_left = _NOT_SKIPPING
                raise FrameTooLarge("frame too large", f"a skipped frame without content-length is larger than "
                                                       f"{self.skip_limit} bytes, the most one may have")
            if end < 0:
                self._skip_seen += len(buf)
                buf.clear()
                return False
        else:
            if len(buf) <= left:
                self._skip_left = left - len(buf)
                buf.clear()
                return False
            end = left
            if buf[end] != 0:
                self._skip_left = _NOT_SKIPPING
                raise MalformedFrame("frame not terminated",
                                     "a skipped frame has no NUL where its content-length says its body ends")
        del buf[: end + 1]
        self._skip_left = _NOT_SKIPPING
        self._failed = False
        self._pos = 0
        self._reset_frame()
        return True

    def _compact(self) -> None:
        """Drop the bytes of the frames already returned."""
        pos = self._pos
        if pos:
            del self._buf[:pos]
            self._scan -= pos
            self._resume -= pos
            if self._body_start >= 0:
                self._body_start -= pos
            self._pos = 0

    def _whole_frame(self) -> Frame | None:  # noqa: C901 (the hot path, inlined on purpose: docs/performance.md)
        """The common case in one go: a frame with LF line ends, valid escapes and within every limit.
        If its header block has arrived but not all of its body, the headers are kept and the body
        phase goes on from there (:meth:`_read_body`, as after :meth:`_read_headers`): a large body is
        neither searched nor parsed again with each read that brings more of it.  None (nothing changed
        but heart-beats skipped) for anything else, which :meth:`_next_frame` then reads, or refuses,
        from the same place."""
        buf = self._buf
        pos = self._pos
        end = len(buf)
        ack = _BARE_ACK.match(buf, pos) if pos < end and buf[pos] == 65 else None  # (65: "A")
        if ack is not None:
            limits = self.limits
            size = ack.end() - 1 - pos  # (command and header: the frame but its NUL)
            if size <= limits.max_frame_size and size - 2 <= limits.max_header_length and limits.max_headers:
                try:
                    frame = Frame("ACK", {"id": ack.group(1).decode("utf-8")})
                except UnicodeDecodeError:
                    pass
                else:
                    self._pos = self._scan = self._resume = pos + size + 1
                    return frame
        while pos < end and (buf[pos] == 10 or buf[pos] == 0):  # heart-beats, NUL padding
            pos += 1
        if pos != self._pos:
            self._pos = self._scan = self._resume = pos
        # No NUL may come before the blank line: the first NUL ends the frame, or its body has one
        # (if there is none yet, the body is still coming).
        first_nul = buf.find(b"\x00", pos)
        header_end = buf.find(b"\n\n", pos, first_nul if first_nul >= 0 else end)
        limits = self.limits
        if header_end < 0 or header_end - pos > limits.max_header_length:
            return None
        block = buf[pos:header_end]
        key: bytes | None = None
        known = None
        if self._blocks_skipped:
            self._blocks_skipped -= 1
        elif header_end - pos <= _HEADER_BLOCK_CACHED:
            key = bytes(block)
            known = _HEADER_BLOCKS.get(key)
        if known is not None:
            self._blocks_missed = 0
            command, cached, line_count = known
            if line_count - 1 > limits.max_headers:
                return None
            headers = cached.copy()
        else:
            parsed = self._header_block(block, limits)
            if parsed is None:
                return None
            command, headers, line_count = parsed
            if key is not None:
                self._blocks_missed += 1
                if self._blocks_missed >= _BLOCK_MISSES:  # (a peer whose blocks differ: look no more for a while)
                    self._blocks_missed = 0
                    self._blocks_skipped = _BLOCKS_SKIPPED
                if b"\\" not in key:  # (no escapes: the same in every version)
                    if len(_HEADER_BLOCKS) >= _HEADER_BLOCKS_MAX:
                        _HEADER_BLOCKS.clear()
                    _HEADER_BLOCKS[key] = (command, headers.copy(), line_count)
        body_start = header_end + 2
        length = headers.get("content-length")
        if length is not None:
            if not (length.isdigit() and length.isascii() and len(length) <= 18):
                return None
            terminator = body_start + int(length)
            if terminator - pos > limits.max_frame_size:
                return None
            if terminator >= end:  # the body is still coming
                self._hand_over(command, headers, body_start, int(length))
                return None
            if buf[terminator] != 0:
                return None
        else:
            terminator = first_nul
            if terminator < 0:  # (the body phase checks the frame size limit)
                self._hand_over(command, headers, body_start, -1)
                return None
            if terminator - pos > limits.max_frame_size:
                return None
        self._pos = self._scan = self._resume = terminator + 1
        if terminator - body_start < _VIEW_COPY:
            return Frame(command, headers, bytes(buf[body_start:terminator]))
        return Frame(command, headers, _body(buf, body_start, terminator))

    def _header_block(self, block: bytearray, limits: Limits) -> tuple[str, dict[str, str], int] | None:
        """The command, headers and line count of a header block in :meth:`_whole_frame`'s common
        case (LF line ends, valid UTF-8 and escapes, within ``max_headers``); None for anything else."""
        if b"\r" in block:
            return None
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            return None
        lines = text.split("\n")
        command = lines[0]
        if len(lines) - 1 > limits.max_headers:
            return None
        headers: dict[str, str] = {}
        version = self.version
        if "\\" in text and version != "1.0" and command not in UNESCAPED_COMMANDS:
            header_lines = iter(lines)
            next(header_lines)  # (the command)
            for line in header_lines:  # (a MESSAGE's message-id often has an escaped ':')
                name, colon, value = line.partition(":")
                if not colon:
                    return None
                if "\\" in line:
                    known_name = _unescape_known(name, version)
                    known_value = _unescape_known(value, version)
                    if known_name is None or known_value is None:
                        return None
                    name, value = known_name, known_value
                if name not in headers:
                    headers[name] = value
        else:
            header_lines = iter(lines)
            next(header_lines)  # (the command; iterating is cheaper than indexing per line)
            for line in header_lines:
                name, colon, value = line.partition(":")
                if not colon:
                    return None
                if name not in headers:
                    headers[name] = value
        return command, headers, len(lines)

    def _hand_over(self, command: str, headers: dict[str, str], body_start: int, length: int) -> None:
        """Enter the body phase of a frame whose header block :meth:`_whole_frame` read, in the state
        :meth:`_read_headers` leaves (without ``content-length`` the NUL is looked for from the end of
        the buffer on: there was none before)."""
        self._command = command
        self._headers = headers
        self._body_start = body_start
        self._content_length = length
        self._scan = len(self._buf)

    def _next_frame(self) -> Frame | None:
        buf = self._buf
        end = len(buf)
        if self._body_start < 0 and self._lines == 0:
            # Skip heart-beats (EOLs) and NUL padding before the command.
            pos = self._pos
            while pos < end:
                byte = buf[pos]
                if byte == 10 or byte == 0:
                    pos += 1
                elif byte == 13:
                    if pos + 1 == end:
                        break
                    if buf[pos + 1] != 10:
                        raise MalformedFrame("malformed frame", "a CR not followed by LF before a command")
                    pos += 2
                else:
                    break
            if pos != self._pos:
                self._pos = self._scan = self._resume = pos
            if pos == end:
                return None
        if self._body_start < 0 and not self._read_headers():
            return None
        return self._read_body()

    def _read_headers(self) -> bool:
        """Decode the header block if it is complete; else check what arrived."""
        buf = self._buf
        pos = self._pos
        search = self._resume - 2  # a blank line may straddle two feeds
        if search < pos:
            search = pos
        # No NUL may come before the blank line, so the first NUL bounds the
        # search and keeps it within this frame.
        limit = buf.find(b"\x00", search)
        if limit < 0:
            limit = len(buf)
        header_end = buf.find(b"\n\n", search, limit)
        crlf = buf.find(b"\n\r\n", search, header_end + 2 if header_end >= 0 else limit)
        if crlf >= 0:
            header_end = crlf
            body_start = crlf + 3
        elif header_end >= 0:
            body_start = header_end + 2
        else:
            if limit < len(buf):
                raise self._nul_in_headers()
            self._check_partial_headers()
            return False

        limits = self.limits
        if body_start - pos > limits.max_frame_size:
            raise self._frame_too_large()
        block = buf[pos:header_end]
        if len(block) > limits.max_header_length:
            self._check_line_lengths(block, 0)
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._invalid_utf8(block, exc) from None
        lines = text.split("\n")
        if "\r" in text:
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        if len(lines) - 1 > limits.max_headers:
            raise self._too_many_headers()
        command = self._command = lines[0]
        headers = self._headers
        version = self.version
        escaped = version != "1.0" and command not in UNESCAPED_COMMANDS
        for index in range(1, len(lines)):
            line = lines[index]
            name, colon, value = line.partition(":")
            if not colon:
                raise MalformedFrame(
                    "malformed header",
                    f"header line {index} {line[:80]!r} of frame {command} has no ':'",
                )
            if escaped and "\\" in line:
                name = unescape_header(name, version)
                value = unescape_header(value, version)
            if name not in headers:
                headers[name] = value
        self._body_start = body_start
        # Nothing in [search, limit) is a NUL: the body's NUL search resumes there.
        self._scan = limit
        length = headers.get("content-length")
        if length is not None:
            self._content_length = self._parse_length(length, body_start - pos)
        return True

    def _check_partial_headers(self) -> None:
        """Refuse an unfinished header block that can no longer become valid."""
        buf = self._buf
        limits = self.limits
        end = len(buf)
        resume = self._resume
        if end - self._pos > limits.max_frame_size:
            raise self._frame_too_large()
        new_lines = buf.count(b"\n", resume)
        self._lines += new_lines
        if self._lines - 1 > limits.max_headers:
            raise self._too_many_headers()
        line_start = self._scan
        if end - line_start > limits.max_header_length:
            self._check_line_lengths(buf[line_start:end], self._lines - new_lines)
        if new_lines:
            self._scan = buf.rfind(b"\n", resume) + 1
        self._resume = end

    def _check_line_lengths(self, block: bytearray, first_line: int) -> None:
        """Refuse a line of ``block`` (line ``first_line`` of the frame onwards) over the limit."""
        limit = self.limits.max_header_length
        for offset, line in enumerate(block.split(b"\n")):
            # A trailing CR is (or, on an unfinished line, may be) part of the EOL.
            if len(line) - line.endswith(b"\r") > limit:
                raise self._line_too_long(first_line + offset)

    def _frame_name(self) -> str:
        """The command of the current frame, for error details; ``?`` if unknown yet."""
        if self._command is not None:
            return self._command
        buf = self._buf
        newline = buf.find(b"\n", self._pos, self._pos + 64)
        if newline < 0:
            return "?"
        return bytes(buf[self._pos : newline]).rstrip(b"\r").decode("utf-8", "replace")

    def _line_too_long(self, line: int) -> FrameTooLarge:
        limit = self.limits.max_header_length
        if line == 0:
            detail = f"the command line is longer than the limit of {limit} bytes"
            return FrameTooLarge("command too long", detail)
        return FrameTooLarge(
            "header too long",
            f"header line {line} of frame {self._frame_name()} is longer than the limit of {limit} bytes",
        )

    def _too_many_headers(self) -> FrameTooLarge:
        return FrameTooLarge(
            "too many headers",
            f"frame {self._frame_name()} has more than the limit of {self.limits.max_headers} headers",
        )

    def _frame_too_large(self) -> FrameTooLarge:
        return FrameTooLarge(
            "frame too large",
            f"frame {self._frame_name()} is larger than the limit of {self.limits.max_frame_size} bytes",
        )

    def _nul_in_headers(self) -> MalformedFrame:
        return MalformedFrame(
            "malformed frame",
            f"frame {self._frame_name()} has a NUL before the blank line that ends its headers",
        )

    def _invalid_utf8(self, block: bytearray, exc: UnicodeDecodeError) -> MalformedFrame:
        line = block.count(b"\n", 0, exc.start)
        raw = bytes(block.split(b"\n")[line])
        what = "the command" if line == 0 else f"header line {line} of frame {self._frame_name()}"
        return MalformedFrame("invalid UTF-8", f"{what} ({raw[:80]!r}) is not valid UTF-8: {exc.reason}")

    def _parse_length(self, text: str, header_bytes: int) -> int:
        """Read ``content-length``; the frame it announces must fit the limit."""
        digits = text.strip()
        if not (digits.isascii() and digits.isdigit()):
            raise MalformedFrame(
                "invalid content-length",
                f"content-length {text[:80]!r} of frame {self._command} is not a non-negative integer",
            )
        limit = self.limits.max_frame_size
        significant = digits.lstrip("0")
        # More digits than any limit has: refuse before int() (which caps digits).
        length = int(significant or "0") if len(significant) <= 18 else limit + 1
        if header_bytes + length > limit:
            raise FrameTooLarge(
                "frame too large",
                f"frame {self._command} has content-length {significant[:40] or 0}; with its "
                f"{header_bytes} bytes of command and headers it exceeds the limit of {limit} bytes",
            )
        return length

    def _read_body(self) -> Frame | None:
        buf = self._buf
        start = self._body_start
        if self._content_length >= 0:
            terminator = start + self._content_length
            if len(buf) <= terminator:
                return None
            if buf[terminator] != 0:
                length = self._content_length
                detail = f"frame {self._command} has no NUL after its content-length of {length} bytes"
                raise MalformedFrame("frame not terminated", detail)
        else:
            terminator = buf.find(b"\x00", self._scan)
            if terminator < 0:
                self._scan = len(buf)
                if len(buf) - self._pos > self.limits.max_frame_size:
                    raise self._frame_too_large()
                return None
            if terminator - self._pos > self.limits.max_frame_size:
                raise self._frame_too_large()
        command = self._command
        assert command is not None
        frame = Frame(command, self._headers, _body(buf, start, terminator))
        self._pos = terminator + 1
        self._reset_frame()
        return frame
