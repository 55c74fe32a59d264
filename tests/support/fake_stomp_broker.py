"""A scriptable STOMP broker on a plain socket, for tests that attack the ``stomp://`` connector.

:class:`FakeBroker` listens on 127.0.0.1 and runs, in a thread per connection,
a *script*: a function of one :class:`BrokerSide` that decides every byte the
broker writes.  :func:`honest` answers like a well-behaved broker (CONNECTED,
a RECEIPT for every ``receipt`` header, SENDs and SUBSCRIBEs recorded); attack
scripts call its pieces and then misbehave.  It parses only what the gateway's
connector writes (text frames, ``content-length`` honoured) and never decides
anything for the test: what it saw is in :attr:`FakeBroker.frames`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class BrokerFrame:
    """One frame the gateway wrote to the fake broker."""

    command: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class BrokerSide:
    """The broker's end of one gateway connection (used from the script's thread only)."""

    sock: socket.socket
    broker: FakeBroker
    number: int
    buffer: bytes = b""
    closed: bool = False
    subscriptions: dict[str, str] = field(default_factory=dict)

    def write(self, data: bytes | str) -> bool:
        """Write ``data``; False once the gateway has closed the connection (or not read for 30 s)."""
        try:
            self.sock.settimeout(30.0)  # (reading sets short timeouts: a big write may take longer)
            self.sock.sendall(data.encode() if isinstance(data, str) else data)
            return True
        except OSError:
            self.closed = True
            return False

    def frame(self, timeout: float = 10.0) -> BrokerFrame | None:
        """The next frame from the gateway (heart-beat newlines skipped); None when closed or timed out."""
        deadline = time.monotonic() + timeout
        while True:
            parsed = self._parse()
            if parsed is not None:
                self.broker.frames.append((self.number, parsed))
                return parsed
            if self.closed or time.monotonic() > deadline:
                return None
            self.sock.settimeout(max(0.01, min(0.2, deadline - time.monotonic())))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            if not data:
                self.closed = True
            self.buffer += data
            self.broker.bytes_received += len(data)

    def _parse(self) -> BrokerFrame | None:
        stripped = self.buffer.lstrip(b"\r\n")
        head_end = stripped.find(b"\n\n")
        if head_end < 0:
            return None
        lines = stripped[:head_end].decode(errors="replace").split("\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.rstrip("\r").partition(":")
            headers.setdefault(name, value)
        start = head_end + 2
        if "content-length" in headers:
            end = start + int(headers["content-length"])
            if len(stripped) < end + 1:
                return None
        else:
            end = stripped.find(b"\x00", start)
            if end < 0:
                return None
        self.buffer = stripped[end + 1:]
        return BrokerFrame(lines[0].rstrip("\r"), headers, stripped[start:end])

    def connected(self, heart_beat: str = "0,0") -> BrokerFrame | None:
        """Read the CONNECT and answer CONNECTED (1.2); the CONNECT frame, or None."""
        connect = self.frame()
        if connect is None:
            return None
        self.write(f"CONNECTED\nversion:1.2\nserver:fake/1\nheart-beat:{heart_beat}\n\n\x00")
        return connect

    def answer(self, frame: BrokerFrame) -> None:
        """What an honest broker does with ``frame``: record it, RECEIPT its receipt."""
        if frame.command == "SUBSCRIBE":
            self.subscriptions[frame.headers.get("id", "")] = frame.headers.get("destination", "")
        if frame.command == "SEND":
            self.broker.sent.append(frame)
        if frame.command == "DISCONNECT" or "receipt" in frame.headers:
            self.write(f"RECEIPT\nreceipt-id:{frame.headers.get('receipt', '')}\n\n\x00")

    def serve(self, until: Callable[[], bool] = lambda: False) -> None:
        """Answer honestly until the gateway closes or ``until()`` says stop."""
        while not self.closed and not until():
            frame = self.frame(timeout=0.2)
            if frame is not None:
                self.answer(frame)

    def connected_frames(self) -> Iterator[BrokerFrame]:
        """CONNECTED for the gateway's CONNECT, then each frame it sends until it closes (none when no
        CONNECT came): a script's loop over what the gateway asks."""
        if self.connected() is None:
            return
        while not self.closed:
            frame = self.frame(timeout=0.2)
            if frame is not None:
                yield frame

    def message(self, subscription: str, destination: str, message_id: str, body: str,
                extra: str = "") -> None:
        """Deliver a MESSAGE (ack id = message id) on ``subscription``."""
        self.write(
            f"MESSAGE\nsubscription:{subscription}\ndestination:{destination}\nmessage-id:{message_id}\n"
            f"ack:{message_id}\ncontent-length:{len(body.encode())}\n{extra}\n{body}\x00"
        )


Script = Callable[[BrokerSide], None]


def honest(side: BrokerSide) -> None:
    """A broker that does everything right."""
    if side.connected() is not None:
        side.serve()


class FakeBroker:
    """Listens on 127.0.0.1:``port``; each connection runs ``script`` (or ``scripts[n]`` for the n-th)."""

    def __init__(self, script: Script = honest, *, scripts: list[Script] | None = None) -> None:
        self.script = script
        self.scripts = list(scripts or [])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.connections = 0
        self.frames: list[tuple[int, BrokerFrame]] = []
        self.sent: list[BrokerFrame] = []
        self.bytes_received = 0
        self.sides: list[BrokerSide] = []
        self.errors: list[BaseException] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, name="fake-broker", daemon=True)
        self._thread.start()

    @property
    def uri(self) -> str:
        return f"stomp://127.0.0.1:{self.port}"

    def commands(self, command: str) -> list[BrokerFrame]:
        return [frame for _, frame in self.frames if frame.command == command]

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stopping:
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            number = self.connections
            self.connections += 1
            script = self.scripts[number] if number < len(self.scripts) else self.script
            side = BrokerSide(sock, self, number)
            self.sides.append(side)
            threading.Thread(target=self._run, args=(script, side), daemon=True).start()

    def _run(self, script: Script, side: BrokerSide) -> None:
        try:
            script(side)
        except BaseException as error:  # (the test reads it)
            self.errors.append(error)
        finally:
            if not self._stopping:
                with contextlib.suppress(OSError):
                    side.sock.close()

    def stop(self) -> None:
        self._stopping = True
        self.listener.close()
        for side in self.sides:
            with contextlib.suppress(OSError):
                side.sock.close()


@contextlib.contextmanager
def fake_broker(script: Script = honest, *, scripts: list[Script] | None = None) -> Iterator[FakeBroker]:
    broker = FakeBroker(script, scripts=scripts)
    try:
        yield broker
    finally:
        broker.stop()
