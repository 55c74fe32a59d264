"""A fault-injecting TCP proxy for tests: cut a connection to a broker and restore it.

``TcpProxy(target_host, target_port)`` listens on a free port of 127.0.0.1 and
forwards every connection to the target.  :meth:`TcpProxy.cut` drops every
open connection and refuses new ones (they are accepted and closed at once,
as a broker that went away); :meth:`TcpProxy.restore` forwards again.
:meth:`TcpProxy.stall` stops reading what clients send (connections stay open,
the other direction flows: a broker that does not keep up) until
:meth:`TcpProxy.flow`; :meth:`TcpProxy.mute` drops what the target sends
(a client's requests arrive, their answers never: a confirmation lost on the
way) until :meth:`TcpProxy.unmute`; ``client_buffer`` sets the proxy's receive buffer on
the client side, so a stall backs up into the client sooner.  It runs
on plain threads (one acceptor, one pump thread per connection), needs no
Twisted reactor and no event loop, so any test (or benchmark) can use it.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target_host:target_port`` until cut."""

    def __init__(self, target_host: str, target_port: int, port: int = 0, *, client_buffer: int = 0) -> None:
        self.target = (target_host, target_port)
        self.client_buffer = client_buffer
        self._stalled = threading.Event()
        self._muted = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if client_buffer:  # inherited by accepted sockets
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, client_buffer)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._open = True
        self._closed = False
        self.connections = 0
        """How many connections were forwarded (for assertions)."""
        self._acceptor = threading.Thread(target=self._accept, name=f"tcp-proxy-{self.port}", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Drop every forwarded connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._open = False
            pairs, self._pairs = self._pairs, set()
        for client, upstream in pairs:
            _close(client)
            _close(upstream)

    def stall(self) -> None:
        """Stop reading from clients (what they send waits in TCP buffers, then in them)."""
        self._stalled.set()

    def flow(self) -> None:
        """Read from clients again after :meth:`stall`."""
        self._stalled.clear()

    def mute(self) -> None:
        """Drop what the target sends (client requests still go through) until :meth:`unmute`."""
        self._muted.set()

    def unmute(self) -> None:
        """Forward what the target sends again."""
        self._muted.clear()

    def restore(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self._open = True

    def close(self) -> None:
        """Stop listening and drop everything."""
        self._closed = True
        self.cut()
        _close(self._listener)
        self._acceptor.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refuse = not self._open
            if refuse:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            pair = (client, upstream)
            with self._lock:
                if not self._open:
                    _close(client)
                    _close(upstream)
                    continue
                self._pairs.add(pair)
                self.connections += 1
            threading.Thread(target=self._pump, args=(pair,), name=f"tcp-proxy-pump-{self.port}", daemon=True).start()

    def _pump(self, pair: tuple[socket.socket, socket.socket]) -> None:
        client, upstream = pair
        peer = {client: upstream, upstream: client}
        selector = selectors.DefaultSelector()
        try:
            selector.register(upstream, selectors.EVENT_READ)
            reading_client = False
            while True:
                if reading_client == self._stalled.is_set():
                    if reading_client:
                        selector.unregister(client)
                    else:
                        selector.register(client, selectors.EVENT_READ)
                    reading_client = not reading_client
                for key, _ in selector.select(timeout=0.1):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = source.recv(65536)
                    if not data:
                        return
                    if source is upstream and self._muted.is_set():
                        continue  # the answer is lost on the way
                    peer[source].sendall(data)
                with self._lock:
                    if pair not in self._pairs:
                        return
        except (OSError, ValueError):
            return
        finally:
            selector.close()
            with self._lock:
                self._pairs.discard(pair)
            _close(client)
            _close(upstream)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
