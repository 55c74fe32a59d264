"""Sans-IO STOMP codec: bytes in, :class:`Frame` out, and back.

:class:`FrameDecoder` is a plain object with :meth:`FrameDecoder.feed`; it
buffers bytes across arbitrary chunk boundaries, skips heart-beat EOLs
between frames, accepts LF and CRLF line endings, honours ``content-length``
(bodies may then contain NUL), unescapes headers as the negotiated version
says, keeps the first of repeated headers and enforces the configured
limits.  :func:`encode_frame` writes a frame for a given version.

This module must not import Twisted or touch a socket.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.errors import FrameTooLarge, MalformedFrame, StompProtocolError
from gateway.stomp.frame import UNESCAPED_COMMANDS, Frame

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


def encode_frame(frame: Frame, version: str, *, add_content_length: bool = True) -> bytes:
    """Serialise ``frame`` for a peer speaking ``version``.

    ``content-length`` is added when the frame lacks it and either has a body
    or is a MESSAGE, unless ``add_content_length`` is false (a client sending
    a TextMessage to a broker that types messages by that header).
    """
    parts = [frame.command, "\n"]
    headers = frame.headers
    body = frame.body
    escaped = version != "1.0" and frame.command not in UNESCAPED_COMMANDS
    for name, value in headers.items():
        if escaped:
            name = escape_header(name, version)
            value = escape_header(value, version)
        parts.append(name)
        parts.append(":")
        parts.append(value)
        parts.append("\n")
    if add_content_length and "content-length" not in headers and (body or frame.command == "MESSAGE"):
        parts.append(f"content-length:{len(body)}\n")
    parts.append("\n")
    return "".join(parts).encode("utf-8") + body + b"\x00"


HEARTBEAT = b"\n"
"""What a heart-beat looks like on the wire."""


class FrameDecoder:
    """Incremental STOMP frame reader.

    Feed it bytes with :meth:`feed`; it returns the frames completed so far.
    After a protocol violation it returns the error as the last item of the
    list and ignores everything fed afterwards.

    :ivar version: protocol version used to unescape headers; the session
        sets it once CONNECT negotiated one.
    """

    __slots__ = (
        "limits",
        "version",
        "_buf",
        "_pos",
        "_scan",
        "_command",
        "_headers",
        "_header_count",
        "_body_start",
        "_content_length",
        "_failed",
    )

    def __init__(self, limits: Limits | None = None, version: str = "1.0") -> None:
        self.limits = limits or Limits()
        self.version = version
        self._buf = bytearray()
        self._pos = 0
        self._failed = False
        self._reset_frame()

    def _reset_frame(self) -> None:
        self._scan = self._pos
        self._command: str | None = None
        self._headers: dict[str, str] = {}
        self._header_count = 0
        self._body_start = -1
        self._content_length = -1

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> list[Frame | StompProtocolError]:
        """Add ``data`` and return the frames it completed (and an error last, if any)."""
        if self._failed:
            return []
        self._buf += data
        out: list[Frame | StompProtocolError] = []
        try:
            while True:
                frame = self._next_frame()
                if frame is None:
                    break
                out.append(frame)
        except StompProtocolError as error:
            self._failed = True
            self._buf.clear()
            out.append(error)
            return out
        if self._pos:
            del self._buf[: self._pos]
            self._scan -= self._pos
            if self._body_start >= 0:
                self._body_start -= self._pos
            self._pos = 0
        return out

    def _next_frame(self) -> Frame | None:
        buf = self._buf
        end = len(buf)
        if self._command is None and self._scan == self._pos:
            # Skip heart-beats (EOLs) between frames.
            pos = self._pos
            while pos < end:
                byte = buf[pos]
                if byte == 10:
                    pos += 1
                elif byte == 13:
                    if pos + 1 == end:
                        break
                    if buf[pos + 1] != 10:
                        raise MalformedFrame("malformed frame", "a CR not followed by LF before a command")
                    pos += 2
                else:
                    break
            self._pos = self._scan = pos
            if pos == end:
                return None
        if self._body_start < 0 and not self._read_headers():
            return None
        return self._read_body()

    def _read_headers(self) -> bool:
        buf = self._buf
        limits = self.limits
        scan = self._scan
        while True:
            newline = buf.find(b"\n", scan)
            if newline < 0:
                if len(buf) - scan > limits.max_header_length:
                    raise FrameTooLarge(
                        "header too long",
                        f"a header line is longer than the limit of {limits.max_header_length} bytes",
                    )
                self._scan = scan
                return False
            line_end = newline - 1 if newline > scan and buf[newline - 1] == 13 else newline
            if line_end - scan > limits.max_header_length:
                raise FrameTooLarge(
                    "header too long",
                    f"a header line is longer than the limit of {limits.max_header_length} bytes",
                )
            raw = bytes(buf[scan:line_end])
            scan = newline + 1
            if self._command is None:
                self._command = self._decode(raw, "command")
                continue
            if not raw:
                self._scan = self._body_start = scan
                if scan - self._pos > limits.max_frame_size:
                    raise FrameTooLarge("frame too large", f"frame exceeds {limits.max_frame_size} bytes")
                length = self._headers.get("content-length")
                if length is not None:
                    self._content_length = self._parse_length(length)
                return True
            self._header_count += 1
            if self._header_count > limits.max_headers:
                raise FrameTooLarge(
                    "too many headers",
                    f"frame {self._command} has more than {limits.max_headers} headers",
                )
            self._add_header(raw)

    def _add_header(self, raw: bytes) -> None:
        colon = raw.find(b":")
        if colon < 0:
            raise MalformedFrame(
                "malformed header",
                f"header line {raw[:80]!r} of frame {self._command} has no ':'",
            )
        name = self._decode(raw[:colon], "header name")
        value = self._decode(raw[colon + 1 :], "header value")
        if self.version != "1.0" and self._command not in UNESCAPED_COMMANDS:
            name = unescape_header(name, self.version)
            value = unescape_header(value, self.version)
        if name not in self._headers:
            self._headers[name] = value

    def _decode(self, raw: bytes, what: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedFrame(
                "invalid UTF-8",
                f"{what} {raw[:80]!r} of frame {self._command or '?'} is not valid UTF-8 ({exc.reason})",
            ) from None

    def _parse_length(self, text: str) -> int:
        stripped = text.strip()
        if not stripped.isdigit():
            raise MalformedFrame(
                "invalid content-length",
                f"content-length {text!r} of frame {self._command} is not a non-negative integer",
            )
        length = int(stripped)
        if length > self.limits.max_frame_size:
            raise FrameTooLarge(
                "frame too large",
                f"content-length {length} exceeds the limit of {self.limits.max_frame_size} bytes",
            )
        return length

    def _read_body(self) -> Frame | None:
        buf = self._buf
        start = self._body_start
        limits = self.limits
        if self._content_length >= 0:
            terminator = start + self._content_length
            if len(buf) <= terminator:
                return None
            if buf[terminator] != 0:
                raise MalformedFrame(
                    "frame not terminated",
                    f"frame {self._command} has no NUL after its content-length of {self._content_length} bytes",
                )
        else:
            terminator = buf.find(b"\x00", self._scan)
            if terminator < 0:
                self._scan = len(buf)
                if len(buf) - self._pos > limits.max_frame_size:
                    raise FrameTooLarge("frame too large", f"frame exceeds {limits.max_frame_size} bytes")
                return None
        if terminator - self._pos > limits.max_frame_size:
            raise FrameTooLarge("frame too large", f"frame exceeds {limits.max_frame_size} bytes")
        command = self._command
        assert command is not None
        frame = Frame(command, self._headers, bytes(buf[start:terminator]))
        self._pos = terminator + 1
        self._reset_frame()
        return frame
