"""The project's own STOMP fuzzer: a generator of client streams and the oracle that judges the
server's answer to each.

A *case* is one client connection: a CONNECT (for 1.0, 1.1 or 1.2; sent alone and answered, or
pipelined with what follows), then frames: valid SENDs with headers full of escapes, valid ones
with a byte mutated, malformed ones of every kind the codec must refuse (undefined escapes, a
header line without ``:``, a NUL or invalid UTF-8 in the header block, a lying or non-numeric
``content-length``, a CR without LF between frames), NUL padding and heart-beats between frames,
and a final ``DISCONNECT`` with a receipt.
The bytes are cut into writes at random points.

:func:`reference_frames` is a plain, non-incremental reading of the STOMP spec (written apart
from :mod:`gateway.wire.codec`, which it checks): the frames a server must accept, in order, and
whether the stream then holds a malformed frame or ends inside one.  :func:`judge` compares what
the server did with it: every RECEIPT and every stored message comes from an accepted frame, with
the headers and body the spec gives it; a malformed frame ends the connection with ERROR and
nothing of it or after it is taken; a complete stream always ends with the connection closed.
"""

from __future__ import annotations

import random
import socket
import time
from dataclasses import dataclass, field

from gateway.wire.frame import Frame

VERSIONS = ("1.0", "1.1", "1.2")
ESCAPES = {"1.1": {"\\": "\\", "n": "\n", "c": ":"}, "1.2": {"\\": "\\", "n": "\n", "c": ":", "r": "\r"}}
NOT_COPIED = frozenset({
    "destination", "receipt", "transaction", "content-length", "amq-msg-type", "transformation", "message-id",
    "subscription", "ack", "redelivered", "timestamp", "expires", "priority", "persistent", "correlation-id",
    "reply-to", "type", "content-type",
})
"""SEND headers that do not come back unchanged on MESSAGE (JMS fields, per-delivery ones)."""
HEADER_TEXT = ["a", "b", "z", "0", " ", ":", "\n", "\r", "\\", "é", "日", "😀", "-", "_", "."]
MAX_FRAME = 32 * 1024 * 1024


class Malformed(Exception):
    """The spec's verdict: the stream holds a frame a server must refuse."""


@dataclass(slots=True)
class Reading:
    """What the spec says of a stream: the frames to accept, then a malformed frame or the end."""

    frames: list[Frame] = field(default_factory=list)
    malformed: str | None = None
    """Why the frame after ``frames`` is malformed; None if there is none."""
    incomplete: bool = False
    """The stream ends inside a frame (a server waits for the rest)."""


def _unescape(text: str, version: str) -> str:
    if version == "1.0" or "\\" not in text:
        return text
    table = ESCAPES[version]
    out = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, None)
        if following is None or following not in table:
            raise Malformed(f"undefined escape \\{following or ''}")
        out.append(table[following])
    return "".join(out)


def reference_frames(data: bytes, version: str) -> Reading:
    """Read ``data`` (everything after CONNECT) as the STOMP ``version`` spec says."""
    reading = Reading()
    pos = 0
    end = len(data)
    while True:
        while pos < end and data[pos] in (0, 10, 13):  # heart-beats (LF or CRLF) and NUL padding
            if data[pos] == 13:
                if pos + 1 == end:
                    reading.incomplete = True
                    return reading
                if data[pos + 1] != 10:
                    reading.malformed = "CR without LF between frames"
                    return reading
                pos += 1
            pos += 1
        if pos == end:
            return reading
        nul = data.find(b"\x00", pos)
        blank = [index for index in (data.find(b"\n\n", pos), data.find(b"\n\r\n", pos)) if index >= 0]
        if not blank or (0 <= nul < min(blank)):
            if nul >= 0:
                reading.malformed = "NUL in the header block"
            else:
                reading.incomplete = True
            return reading
        header_end = min(blank)
        body_start = header_end + (3 if data[header_end + 1] == 13 else 2)
        try:
            text = data[pos:header_end].decode("utf-8")
        except UnicodeDecodeError:
            reading.malformed = "header block not UTF-8"
            return reading
        lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
        command = lines[0]
        headers: dict[str, str] = {}
        try:
            for line in lines[1:]:
                if ":" not in line:
                    raise Malformed("header line without ':'")
                name, value = line.split(":", 1)
                if command not in ("CONNECT", "CONNECTED"):
                    name, value = _unescape(name, version), _unescape(value, version)
                headers.setdefault(name, value)
            length_text = headers.get("content-length")
            if length_text is not None:
                digits = length_text.strip()
                if not (digits.isascii() and digits.isdigit()):
                    raise Malformed("content-length not a number")
                length = int(digits)
                if body_start - pos + length > MAX_FRAME:
                    raise Malformed("frame too large")
                if body_start + length >= end:
                    reading.incomplete = True
                    return reading
                if data[body_start + length] != 0:
                    raise Malformed("no NUL after content-length bytes")
                terminator = body_start + length
            else:
                terminator = data.find(b"\x00", body_start)
                if terminator < 0:
                    reading.incomplete = True
                    return reading
        except Malformed as error:
            reading.malformed = str(error)
            return reading
        reading.frames.append(Frame(command, headers, data[body_start:terminator]))
        pos = terminator + 1


# -- generating -----------------------------------------------------------------------------------


def _escape(text: str, version: str) -> str:
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    return out.replace("\r", "\\r") if version == "1.2" else out


def _text(rng: random.Random, version: str, name: bool) -> str:
    pieces = rng.choices(HEADER_TEXT, k=rng.randint(1 if name else 0, 6))
    text = "".join(pieces)
    if version == "1.0":
        text = text.replace("\n", "").replace(":" if name else "\n", "")
    if version != "1.2":
        text = text.rstrip("\r")
    if name and not text:
        text = "h"
    return text


def valid_send(rng: random.Random, version: str, destination: str, index: int) -> bytes:
    """A SEND that every server must accept, with headers needing escapes where the version has them."""
    headers = [("destination", destination), ("receipt", f"r{index}"), ("fz", str(index))]
    for _ in range(rng.randint(0, 4)):
        headers.append((f"x-{_text(rng, version, True)}", _text(rng, version, False)))
    if rng.random() < 0.4:
        body = bytes(rng.choices(b"ab\x00\n\r\xff", k=rng.randint(0, 12)))
        headers.append(("content-length", str(len(body))))
    else:
        body = "".join(rng.choices(["a", "é", "\n", " ", "日"], k=rng.randint(0, 12))).encode()
    eol = "\r\n" if rng.random() < 0.2 else "\n"
    lines = [f"{_escape(n, version) if version != '1.0' else n}:{_escape(v, version) if version != '1.0' else v}"
             for n, v in headers]
    return ("SEND" + eol + eol.join(lines) + eol + eol).encode() + body + b"\x00"


MALFORMED = [
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\nx:a\\tb\n\nbody\x00".encode(),
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\nx:end\\\n\nbody\x00".encode(),
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\nx\\q:v\n\nbody\x00".encode(),
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\nno colon here\n\nbody\x00".encode(),
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\nx:a\x00b\n\nbody\x00".encode(),
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\nx:".encode() + b"\xff\xfe\n\nbody\x00",
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\ncontent-length:abc\n\nbody\x00".encode(),
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\ncontent-length:2\n\nbody\x00".encode(),
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\ncontent-length:-1\n\nbody\x00".encode(),
    lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\ncontent-length:99999999999\n\nbody\x00".encode(),
    lambda d, i: f"\rSEND\ndestination:{d}\nreceipt:r{i}\n\nbody\x00".encode(),
]
MALFORMED_11 = [lambda d, i: f"SEND\ndestination:{d}\nreceipt:r{i}\nx:a\\rb\n\nbody\x00".encode()]


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """One to three random byte edits: replace, insert or delete, favouring STOMP's special bytes."""
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        if not data:
            break
        at = rng.randrange(len(data))
        byte = rng.choice(b"\x00\n\r:\\cnrt0a\xff\xc3") if rng.random() < 0.8 else rng.randrange(256)
        what = rng.random()
        if what < 0.5:
            data[at] = byte
        elif what < 0.8:
            data.insert(at, byte)
        else:
            del data[at]
    return bytes(data)


@dataclass(slots=True)
class Case:
    """One client connection's bytes and how to send them."""

    version: str
    destination: str
    connect: bytes
    stream: bytes
    """Everything after CONNECT (ends with ``DISCONNECT receipt:bye``)."""
    pipelined: bool
    """CONNECT in the same write as what follows (else: sent alone, CONNECTED awaited)."""
    frames: int

    def writes(self, rng: random.Random) -> list[bytes]:
        """The stream (with CONNECT if pipelined) cut at random points."""
        data = self.connect + self.stream if self.pipelined else self.stream
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 6)))) if len(data) > 1 else []
        return [data[start:stop] for start, stop in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def make_case(rng: random.Random, destination: str, frames: int = 8) -> Case:
    version = rng.choice(VERSIONS)
    connect = f"CONNECT\naccept-version:{version}\nhost:fuzz\n\n\x00".encode()
    parts = []
    malformed = MALFORMED + (MALFORMED_11 if version == "1.1" else [])
    for index in range(frames):
        roll = rng.random()
        if roll < 0.55:
            part = valid_send(rng, version, destination, index)
        elif roll < 0.9:
            part = mutate(rng, valid_send(rng, version, destination, index))
        else:
            part = rng.choice(malformed)(destination, index)
        parts.append(part + rng.choice([b"", b"", b"", b"", b"\n", b"\x00", b"\r\n\x00"]))
    parts.append(b"DISCONNECT\nreceipt:bye\n\n\x00")
    return Case(version, destination, connect, b"".join(parts), rng.random() < 0.5, frames)


# -- judging --------------------------------------------------------------------------------------


CODEC_ERRORS = frozenset({
    "malformed frame", "malformed header", "invalid header escape", "invalid UTF-8", "invalid content-length",
    "frame not terminated", "frame too large", "header too long", "too many headers", "command too long",
})


def judge(case: Case, replies: list[Frame], closed: bool, messages: list[Frame], *, reset: bool = False) -> list[str]:
    """What is wrong with the server's handling of ``case``; empty when nothing is.

    :param replies: the frames the server sent this client after CONNECTED.
    :param closed: whether the server closed the connection.
    :param messages: MESSAGE frames a 1.2 subscriber of ``case.destination`` received from it.
    :param reset: the connection ended with a TCP reset (a server closing while input it
        did not read waits: the kernel may then drop the ERROR it wrote last).
    """
    problems: list[str] = []
    reading = reference_frames(case.stream, case.version)
    accepted = reading.frames
    receipts = {frame.headers.get("receipt") for frame in accepted}
    errors = [frame for frame in replies if frame.command == "ERROR"]
    for frame in replies:
        if frame.command == "RECEIPT" and frame.headers.get("receipt-id") not in receipts:
            problems.append(f"RECEIPT {frame.headers.get('receipt-id')!r} for a frame the spec refuses")
        elif frame.command not in ("RECEIPT", "ERROR"):
            problems.append(f"unexpected {frame.command}")
    if len(errors) > 1 or (errors and replies[-1] is not errors[0]):
        problems.append("frames after ERROR")
    if reading.malformed is not None:
        if not errors and not reset:
            problems.append(f"malformed frame ({reading.malformed}) accepted without ERROR")
        if not closed:
            problems.append("connection left open after a malformed frame")
    elif accepted and accepted[-1].command == "DISCONNECT" and not closed:
        problems.append("stream ending with DISCONNECT, but the connection stays open")
    if errors and errors[0].headers.get("message") in CODEC_ERRORS and reading.malformed is None:
        problems.append(f"codec refused a valid stream: {errors[0].headers.get('message')}: {errors[0].body[:200]!r}")
    sends = [frame for frame in accepted if frame.command == "SEND"]
    for message in messages:
        if not any(_same_message(send, message) for send in sends):
            problems.append(f"stored message matches no accepted SEND: {message!r}")
    return problems


def _same_message(send: Frame, message: Frame) -> bool:
    if send.body != message.body:
        return False
    return all(message.headers.get(name) == value for name, value in send.headers.items() if name not in NOT_COPIED)


# -- over a socket ---------------------------------------------------------------------------------


def expects_close(case: Case) -> bool:
    """Whether the spec says the server must end the connection (malformed frame, or DISCONNECT)."""
    reading = reference_frames(case.stream, case.version)
    return reading.malformed is not None or bool(reading.frames and reading.frames[-1].command == "DISCONNECT")


def run_over_socket(address: tuple[str, int], case: Case, rng: random.Random, timeout: float = 10.0) -> list[str]:
    """Play ``case`` on a new TCP connection to ``address`` and judge the answer (no messages checked).

    A connection the spec says must end has ``timeout`` seconds to; one that ends inside an
    unfinished frame (the server rightly waits for the rest) is closed by us after a moment.
    """
    from gateway.errors import StompProtocolError
    from gateway.wire.codec import FrameDecoder

    decoder = FrameDecoder(version=case.version)
    items: list[Frame | StompProtocolError] = []
    closed = reset = False
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if not case.pipelined:
                sock.sendall(case.connect)
                while not items:
                    data = sock.recv(65536)
                    if not data:
                        return ["connection closed before CONNECTED"]
                    items.extend(decoder.feed(data))
            for chunk in case.writes(rng):
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            reset = True
        deadline = time.monotonic() + (timeout if expects_close(case) else 0.2)
        while not closed and not reset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                reset = True
                break
            if not data:
                closed = True
            items.extend(decoder.feed(data))
    replies = []
    for item in items:
        if not isinstance(item, Frame):
            return [f"the server wrote an unreadable frame: {item}"]
        replies.append(item)
    if not replies or replies[0].command != "CONNECTED":
        return [] if reset else [f"no CONNECTED: {replies[:2]}"]
    return judge(case, replies[1:], closed or reset, [], reset=reset)
