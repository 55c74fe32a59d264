"""A STOMP client on a raw socket, for tests that control every byte.

:class:`RawStomp` writes bytes exactly as given (several frames in one
write, broken frames) and reads the server's frames back with the project's
decoder set to the version the test expects, the way a client of that
version would parse them: the first of repeated headers wins, and a frame
that does not parse comes back as the decoder's error.
"""

from __future__ import annotations

import socket
import time

from gateway.errors import StompProtocolError
from gateway.wire.codec import FrameDecoder
from gateway.wire.frame import Frame


class RawStomp:
    """One TCP connection to a STOMP server; nothing is sent unless the test says so."""

    def __init__(self, address: tuple[str, int], version: str = "1.2", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.decoder = FrameDecoder(version=version)
        self.pending: list[Frame | StompProtocolError] = []
        self.closed = False

    def send(self, data: bytes | str) -> None:
        self.sock.sendall(data.encode() if isinstance(data, str) else data)

    def connect(self, version: str = "1.2", extra: str = "") -> Frame:
        """CONNECT (then wait for CONNECTED)."""
        self.send(f"CONNECT\naccept-version:{version}\nhost:x\n{extra}\n\x00")
        frame = self.frame()
        assert frame.command == "CONNECTED", frame
        return frame

    def _read(self, deadline: float) -> bool:
        """Read once; False when the server closed or nothing came before ``deadline``."""
        if self.closed:
            return False
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.pending.extend(self.decoder.feed(data))
        return True

    def item(self, timeout: float = 10.0) -> Frame | StompProtocolError | None:
        """The next frame (or decoding error); None if the connection closed or time ran out."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            if not self._read(deadline) and (self.closed or time.monotonic() >= deadline):
                return None
        return self.pending.pop(0)

    def frame(self, timeout: float = 10.0) -> Frame:
        """The next frame; AssertionError if none (or an unreadable one) arrives."""
        item = self.item(timeout)
        assert isinstance(item, Frame), f"expected a frame, got {item!r}"
        return item

    def until_closed(self, timeout: float = 10.0) -> list[Frame | StompProtocolError]:
        """Everything the server sends until it closes (AssertionError if it does not close in time)."""
        deadline = time.monotonic() + timeout
        items: list[Frame | StompProtocolError] = []
        while True:
            item = self.item(max(0.0, deadline - time.monotonic()))
            if item is None:
                assert self.closed, f"the server did not close the connection within {timeout}s: {items}"
                return items
            items.append(item)

    def close(self) -> None:
        self.sock.close()
