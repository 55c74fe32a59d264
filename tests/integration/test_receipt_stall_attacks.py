"""Attacks on the RECEIPT and ERROR paths with clients that stall, slow down and pipeline.

A real gateway process (``tests/support/gateway.py``) over real sockets: raw sockets
(:class:`~tests.support.raw_stomp.RawStomp`, or bare ones whose ``SO_RCVBUF`` is small and that
never ``recv()``) and the WAN-fault proxy (:class:`~tests.support.tcp_proxy.TcpProxy`: a link that
stops forwarding without a RST, or trickles a few bytes at a time).  Each test quotes the docs'
promise it checks.  Heart-beats are off on the stalled clients (``heart-beat:0,0``): a stall is not
a dead peer here.
"""

from __future__ import annotations

import itertools
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.wire.codec import FrameDecoder
from gateway.wire.frame import Frame
from tests.support.gateway import GatewayProcess, default_config
from tests.support.raw_stomp import RawStomp
from tests.support.tcp_proxy import TcpProxy
from tests.support.tls import make_tls_files

HEARTBEAT_MS = 100
"""What the gateway offers to send (``[stomp] heartbeat_send_ms``): a watched client asks for it."""


def _config(*, auth: bool = False) -> str:
    """The shipped config with heart-beats offered every :data:`HEARTBEAT_MS` (none asked of clients);
    ``auth``: login ``alice`` (password ``secret``) may read and write ``/queue/granted.*`` only."""
    text = default_config()
    text = re.sub(r"(?m)^heartbeat_send_ms\s*=.*$", f"heartbeat_send_ms = {HEARTBEAT_MS}", text)
    text = re.sub(r"(?m)^heartbeat_receive_ms\s*=.*$", "heartbeat_receive_ms = 0", text)
    if auth:
        text = re.sub(r"(?m)^\[auth\]$", '[auth]\nusers = { alice = "secret" }\nallow_weak_passwords = true', text)
        text += '\n[[authorization]]\ndestination = "/queue/granted.*"\nread = ["alice"]\nwrite = ["alice"]\n'
    return text


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    make_tls_files(directory)
    return directory


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, tls_files: Path) -> Iterator[GatewayProcess]:
    """One gateway (SQLite persistence, heart-beats every 100 ms when asked) with TCP, TLS and
    WebSocket listeners; ``gw.tls_port`` and ``gw.ws_port`` name the other two."""
    from tests.support.ports import free_port

    tls_port, ws_port = free_port(), free_port()
    key, cert = tls_files / "server-key.pem", tls_files / "server.pem"
    process = GatewayProcess(tmp_path_factory.mktemp("stall"), args=[
        "--listen", f"ssl:{tls_port}:interface=127.0.0.1:privateKey={key}:certKey={cert}",
        "--listen", f"ws:tcp:{ws_port}:interface=127.0.0.1"])
    process.config_path.write_text(_config())
    process.start()
    process.tls_port = tls_port  # type: ignore[attr-defined]
    process.ws_port = ws_port  # type: ignore[attr-defined]
    yield process
    process.stop()


# -- helpers ---------------------------------------------------------------------------------


def rss_kb(gateway: GatewayProcess) -> int:
    """The gateway process's resident set (``VmRSS``, KiB)."""
    assert gateway.process is not None
    status = Path(f"/proc/{gateway.process.pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert match is not None
    return int(match.group(1))


def send_frame(destination: str, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"SEND\ndestination:{destination}\ncontent-length:{len(body)}"]
    lines += [f"{name.replace('_', '-')}:{value}" for name, value in headers.items()]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\x00"


def connect_frame(heart_beat: str = "0,0", login: str | None = None) -> bytes:
    """CONNECT (1.2); ``login``: with that login and the password ``secret``."""
    credentials = f"login:{login}\npasscode:secret\n" if login else ""
    return f"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:{heart_beat}\n{credentials}\n\x00".encode()


def stalled_socket(address: tuple[str, int], rcvbuf: int = 4096) -> socket.socket:
    """A TCP socket with a small receive buffer (set before connecting, so the window is small)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10.0)
    sock.connect(address)
    return sock


def read_frames(sock: socket.socket, decoder: FrameDecoder, until: Callable[[list[Frame]], bool],
                timeout: float) -> list[Frame]:
    """Frames read from ``sock`` until ``until(frames)`` is true or the peer closed (or time ran out)."""
    frames: list[Frame] = []
    deadline = time.monotonic() + timeout
    while not until(frames) and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(262144)
        except TimeoutError:
            break
        except ConnectionResetError:
            data = b""
        if not data:
            break
        for item in decoder.feed(data):
            assert isinstance(item, Frame), item
            frames.append(item)
    return frames


def connected(sock: socket.socket, heart_beat: str = "0,0") -> FrameDecoder:
    sock.sendall(connect_frame(heart_beat))
    decoder = FrameDecoder(version="1.2")
    frames = read_frames(sock, decoder, lambda got: bool(got), 10.0)
    assert frames and frames[0].command == "CONNECTED", frames
    decoder.version = "1.2"
    return decoder


class Watcher:
    """A live client (raw socket, heart-beat ``0,100``) of the same gateway: records the gaps between what
    the gateway sends it (heart-beats when idle, else frames) and the round trip of a receipted SEND to its
    own queue and its MESSAGE, every 50 ms, while the attack runs."""

    def __init__(self, address: tuple[str, int], queue: str, login: str | None = None) -> None:
        self.sock = socket.create_connection(address, timeout=10.0)
        self.sock.sendall(connect_frame(f"0,{HEARTBEAT_MS}", login))
        self.decoder = FrameDecoder(version="1.2")
        self.queue = queue
        self.gaps: list[float] = []
        self.round_trips: list[float] = []
        self.sent = 0
        self.received: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._frames: list[Frame] = []
        self._beats: list[float] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._wait(lambda: any(f.command == "CONNECTED" for f in self._frames), 10.0)
        self.sock.sendall(f"SUBSCRIBE\nid:1\ndestination:{queue}\nack:auto\nreceipt:sub\n\n\x00".encode())
        self._wait(lambda: any(f.headers.get("receipt-id") == "sub" for f in self._frames), 10.0)
        self._writer = threading.Thread(target=self._probe, daemon=True)

    def start(self) -> Watcher:
        self._beats.clear()
        self._beats.append(time.monotonic())
        self._writer.start()
        return self

    def _wait(self, test: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if test():
                    return
            time.sleep(0.005)
        raise AssertionError(f"the watcher waited {timeout}s in vain: {self._frames[-5:]}")

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, OSError):
                return
            if not data:
                return
            now = time.monotonic()
            with self._lock:
                self._beats.append(now)  # (a heart-beat or a frame: the gateway spoke)
                for item in self.decoder.feed(data):
                    if isinstance(item, Frame):
                        self._frames.append(item)
                        if item.command == "MESSAGE":
                            self.received.append(item.body.decode())
                        elif item.command == "ERROR":
                            self.errors.append(item.headers.get("message", "?"))
                    else:
                        self.errors.append(repr(item))

    def _probe(self) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            body = f"w{number}"
            started = time.monotonic()
            self.sock.sendall(send_frame(self.queue, body.encode(), receipt=f"w{number}"))
            self.sent = number

            def answered(body: str = body, receipt: str = f"w{number}") -> bool:
                return body in self.received and any(f.headers.get("receipt-id") == receipt for f in self._frames)

            try:
                self._wait(answered, 5.0)
            except AssertionError:
                self.errors.append(f"no answer to probe {number} within 5 s")
                return
            self.round_trips.append(time.monotonic() - started)
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._writer.join(10)
        with self._lock:
            beats = list(self._beats)
        self.gaps = [b - a for a, b in itertools.pairwise(beats)]
        self.sock.close()

    def check(self) -> str:
        """AssertionError unless heart-beats and probes stayed on time and every probe came back."""
        assert not self.errors, self.errors
        assert self.round_trips, "no probe came back"
        assert self.received == [f"w{n}" for n in range(1, self.sent + 1)], self.received[-5:]
        longest_gap = max(self.gaps, default=0.0)
        slowest = max(self.round_trips)
        assert longest_gap < 1.0, f"the watcher heard no heart-beat for {longest_gap:.2f}s"
        assert slowest < 1.0, f"a probe took {slowest:.2f}s"
        return f"{len(self.round_trips)} probes, slowest {slowest * 1000:.0f} ms, longest heart-beat gap " \
               f"{longest_gap * 1000:.0f} ms"


def flood(sock: socket.socket, batch: bytes, limit_bytes: int, seconds: float) -> int:
    """Write ``batch`` again and again without reading, until ``limit_bytes`` were taken, a write
    waited ``seconds`` (the gateway stopped reading) or the gateway closed; how many bytes the kernel took."""
    sock.settimeout(seconds)
    taken = 0
    view = memoryview(batch)
    while taken < limit_bytes:
        offset = 0
        try:
            while offset < len(view):
                offset += sock.send(view[offset:])
        except TimeoutError:
            return taken + offset
        except (BrokenPipeError, ConnectionResetError):  # (the gateway closed the connection)
            return taken + offset
        taken += offset
    return taken


OFFERED = 256 * 1024 * 1024
"""What a flooding client offers: far more than any bound the gateway keeps."""


def flooded(gateway: GatewayProcess, sock: socket.socket, batch: bytes, before_kb: int) -> tuple[int, float]:
    """:func:`flood` ``batch`` up to :data:`OFFERED` (2 s for a write to be taken): the bytes the kernel
    took and how many MB the gateway's RSS grew since ``before_kb``."""
    taken = flood(sock, batch, OFFERED, 2.0)
    return taken, (rss_kb(gateway) - before_kb) / 1024


def assert_bounded(taken: int, grown_mb: float) -> None:
    """The gateway stopped reading the flood before it was all taken, and its RSS grew by < 64 MB."""
    assert taken < OFFERED and grown_mb < 64, \
        f"the gateway read {taken >> 20} MB of the {OFFERED >> 20} MB a client sent while it read nothing; " \
        f"its RSS grew by {grown_mb:.0f} MB"


# -- bounded memory: a client that pipelines receipted SENDs and never reads -----------------


@pytest.mark.parametrize("transport", ["tcp", "tls"])
def test_a_pipelining_client_that_never_reads_meets_flow_control(gw: GatewayProcess, transport: str) -> None:
    """docs/stomp.md, Flow control: "The gateway neither buffers without bound nor refuses the SENDs";
    docs/performance.md (stall table): a connection that floods without reading is "held: RSS +17 MB".
    Here every SEND asks for a RECEIPT with a 16 KB id (a RECEIPT as large as its SEND) to a topic
    nobody reads, thousands of frames a write, and the client never reads: the RECEIPTs must not pile up
    in the gateway's memory.  The gateway must stop reading (the client's writes block), its RSS grow by
    less than 64 MB while 256 MB are offered, and a live client's heart-beats and messages stay on time."""
    watcher = Watcher(gw.address, f"/queue/stall.watch.{transport}").start()
    before = rss_kb(gw)
    raw = stalled_socket(gw.address if transport == "tcp" else ("127.0.0.1", gw.tls_port))  # type: ignore[attr-defined]
    sock: socket.socket = raw
    if transport == "tls":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        sock = context.wrap_socket(raw)
    try:
        connected(sock)
        pad = "x" * 16000
        batch = b"".join(send_frame(f"/topic/stall.void.{transport}", receipt=f"r{n}-{pad}") for n in range(64))
        taken, grown_mb = flooded(gw, sock, batch, before)
    finally:
        watcher.stop()
        sock.close()
    summary = watcher.check()
    assert_bounded(taken, grown_mb)
    print(f"{transport}: {taken >> 20} MB taken, RSS +{grown_mb:.1f} MB; watcher: {summary}")


def ws_socket(port: int, rcvbuf: int = 4096) -> socket.socket:
    """A WebSocket (``v12.stomp``) on a bare socket with a small receive buffer: the handshake read, then
    STOMP bytes written with :func:`ws_message` and nothing read."""
    sock = stalled_socket(("127.0.0.1", port), rcvbuf)
    sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                 b"Sec-WebSocket-Protocol: v12.stomp\r\n\r\n" % port)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(1)
        assert chunk, answer
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return sock


def ws_message(data: bytes) -> bytes:
    """One masked binary WebSocket message (mask 0: the payload as it is)."""
    size = len(data)
    if size < 126:
        header = bytes([0x82, 0x80 | size])
    elif size < 65536:
        header = bytes([0x82, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([0x82, 0x80 | 127]) + size.to_bytes(8, "big")
    return header + b"\x00\x00\x00\x00" + data


def test_a_pipelining_websocket_client_that_never_reads_meets_flow_control(gw: GatewayProcess) -> None:
    """docs/stomp.md, WebSocket: "heart-beats, login, flow control: as over TCP ... a client that does
    not read pauses its deliveries"; "The gateway neither buffers without bound".  A WebSocket client
    pipelines receipted SENDs (16 KB receipt ids, 64 frames a message) and never reads: the gateway must
    stop reading it, its RSS grow by less than 64 MB of the 256 MB offered, a live client stay served."""
    watcher = Watcher(gw.address, "/queue/stall.watch.ws").start()
    before = rss_kb(gw)
    sock = ws_socket(gw.ws_port)  # type: ignore[attr-defined]
    try:
        sock.sendall(ws_message(connect_frame()))
        time.sleep(0.2)
        pad = "x" * 16000
        batch = ws_message(b"".join(send_frame("/topic/stall.void.ws", receipt=f"r{n}-{pad}") for n in range(64)))
        taken, grown_mb = flooded(gw, sock, batch, before)
    finally:
        watcher.stop()
        sock.close()
    summary = watcher.check()
    assert_bounded(taken, grown_mb)
    print(f"ws: {taken >> 20} MB taken, RSS +{grown_mb:.1f} MB; watcher: {summary}")


def test_a_client_flooding_bad_frames_without_reading_is_closed_and_costs_nothing(gw: GatewayProcess) -> None:
    """docs/stomp.md, Errors: "As STOMP 1.2 requires, the server then closes that connection; every other
    connection carries on"; Connecting: "a closing connection ... whose peer does not take what is
    still buffered is aborted after [stomp] close_timeout_ms" (5 s).  A client floods unknown commands
    (each would earn an ERROR), thousands a write, and never reads: the gateway reads no more than a
    few MB of the 256 MB offered, its RSS stays flat, a live client stays served, and the connection
    is gone (EOF or a reset; the ERROR first if it survives the reset) within close_timeout_ms and a
    margin."""
    watcher = Watcher(gw.address, "/queue/stall.watch.bad").start()
    before = rss_kb(gw)
    sock = stalled_socket(gw.address)
    try:
        decoder = connected(sock)
        batch = b"BOGUS\nreceipt:x\n\n\x00" * 4000
        started = time.monotonic()
        taken, grown_mb = flooded(gw, sock, batch, before)
        frames = read_frames(sock, decoder, lambda got: False, 10.0)  # (until the gateway closes or resets)
        gone = time.monotonic() - started
    finally:
        watcher.stop()
        sock.close()
    summary = watcher.check()
    assert_bounded(taken, grown_mb)
    assert not frames or frames[0].command == "ERROR", frames[:2]  # (a reset may discard the unread ERROR)
    assert gone < 9.0, f"the connection was still open {gone:.1f}s after the flood began"
    print(f"bad frames: {taken >> 20} MB taken, RSS +{grown_mb:.1f} MB, closed after {gone:.1f}s; {summary}")


# -- order after a stall --------------------------------------------------------------------


def _pipelined(queue: str, count: int, *, persistent_every: int = 3, disconnect: str | None = None) -> bytes:
    """``count`` SENDs to ``queue``, each with receipt ``s<n>`` and body ``m<n>``, every
    ``persistent_every``-th persistent, the rest not; then a DISCONNECT with receipt ``disconnect``."""
    frames = [send_frame(queue, f"m{n}".encode(), receipt=f"s{n}",
                         persistent="true" if n % persistent_every == 0 else "false") for n in range(count)]
    if disconnect is not None:
        frames.append(f"DISCONNECT\nreceipt:{disconnect}\n\n\x00".encode())
    return b"".join(frames)


def assert_queue_holds(gateway: GatewayProcess, queue: str, count: int) -> None:
    """``queue`` holds the bodies ``m0`` … ``m<count-1>``, in order (an auto-ack subscriber reads them)."""
    consumer = RawStomp(gateway.address)
    try:
        consumer.connect()
        consumer.send(f"SUBSCRIBE\nid:1\ndestination:{queue}\nack:auto\n\n\x00")
        assert [consumer.frame().body.decode() for _ in range(count)] == [f"m{n}" for n in range(count)]
    finally:
        consumer.close()


def _answers_in_order(frames: list[Frame], count: int, queue: str) -> None:
    """Every RECEIPT ``s0`` … ``s<count-1>`` once and in order; every MESSAGE ``m0`` … once and in order."""
    receipts = [f.headers["receipt-id"] for f in frames if f.command == "RECEIPT"]
    messages = [f.body.decode() for f in frames if f.command == "MESSAGE"]
    errors = [f for f in frames if f.command == "ERROR"]
    assert not errors, errors
    expected = [f"s{n}" for n in range(count)]
    assert receipts[:count] == expected, (len(receipts), [r for r, e in zip(receipts, expected, strict=False)
                                                          if r != e][:5])
    assert messages == [f"m{n}" for n in range(count)], (len(messages), messages[:3], messages[-3:])


@pytest.mark.parametrize(("how", "count"), [("raw", 3000), ("proxy", 3000), ("raw", 40000)])
def test_after_a_stall_every_receipt_and_message_arrives_once_in_order(gw: GatewayProcess, how: str,
                                                                        count: int) -> None:
    """docs/persistence.md: "Each connection answers its frames in their order ... a RECEIPT (or an
    ERROR) goes out only after the answers of every earlier frame of that connection"; docs/stomp.md:
    "a client that does not read pauses its deliveries".  A client subscribed to its own queue pipelines
    3,000 SENDs (a third persistent), each with a receipt, in one write, and stops reading for a second
    (``raw``: a 4 KB receive buffer that is not read; ``proxy``: the link stops forwarding both ways, no
    RST); then it reads: every RECEIPT arrives once and in order, every MESSAGE once and in order.  With
    40,000 SENDs the RECEIPTs pass ``ANSWER_GRACE`` and reading is held, then released, meanwhile."""
    queue = f"/queue/stall.order.{how}.{count}"
    proxy = TcpProxy(*gw.address) if how == "proxy" else None
    address = ("127.0.0.1", proxy.port) if proxy is not None else gw.address
    sock = stalled_socket(address)
    try:
        decoder = connected(sock)
        sock.sendall(f"SUBSCRIBE\nid:1\ndestination:{queue}\nack:auto\nreceipt:sub\n\n\x00".encode())
        assert read_frames(sock, decoder, lambda got: bool(got), 10.0)[0].headers["receipt-id"] == "sub"
        if proxy is not None:
            proxy.stall("both")
        writer = threading.Thread(target=sock.sendall, args=(_pipelined(queue, count),), daemon=True)
        writer.start()
        time.sleep(1.0)  # (nothing read meanwhile)
        if proxy is not None:
            proxy.flow()
        frames = read_frames(sock, decoder, lambda got: len(got) >= 2 * count, 30.0)  # (an ERROR: the close)
        writer.join(10)
        _answers_in_order(frames, count, queue)
    finally:
        sock.close()
        if proxy is not None:
            proxy.close()


@pytest.mark.parametrize("stalled", [False, True])
def test_disconnect_receipt_after_pipelined_sends_comes_last_then_the_close(gw: GatewayProcess,
                                                                              stalled: bool) -> None:
    """docs/stomp.md, Receipts: "DISCONNECT waits for everything sent before it, even in the same write:
    first every earlier frame gets its own RECEIPT (or its ERROR), then the DISCONNECT's RECEIPT and the
    close."  2,000 pipelined SENDs (a third persistent) with receipts and a receipted DISCONNECT in one
    write; ``stalled``: the link (a proxy) passes nothing for a second first.  Then every SEND's RECEIPT
    in order, the DISCONNECT's last, the close; and every message is in the queue."""
    count = 2000
    queue = f"/queue/stall.disconnect.{stalled}"
    proxy = TcpProxy(*gw.address)
    sock = stalled_socket(("127.0.0.1", proxy.port))
    try:
        decoder = connected(sock)
        if stalled:
            proxy.stall("both")
        writer = threading.Thread(target=sock.sendall, args=(_pipelined(queue, count, disconnect="bye"),),
                                  daemon=True)
        writer.start()
        if stalled:
            time.sleep(1.0)
            proxy.flow()
        frames = read_frames(sock, decoder, lambda got: False, 30.0)  # (until the gateway closes)
        writer.join(10)
        receipts = [f.headers.get("receipt-id") for f in frames]
        assert [f.command for f in frames] == ["RECEIPT"] * (count + 1), [f for f in frames if f.command != "RECEIPT"]
        assert receipts == [f"s{n}" for n in range(count)] + ["bye"]
    finally:
        sock.close()
        proxy.close()
    assert_queue_holds(gw, queue, count)


@pytest.mark.parametrize("how", ["raw", "proxy"])
def test_after_a_stall_the_error_comes_after_every_earlier_receipt_then_the_close(gw: GatewayProcess,
                                                                                   how: str) -> None:
    """docs/persistence.md: "An ERROR closing the connection comes after the receipts of the frames
    before it and no frame after it is handled"; docs/stomp.md, Errors: the ERROR carries "receipt-id
    when the failing frame asked for a receipt", then "the server then closes that connection".  3,000
    receipted SENDs (a third persistent), a SEND without a destination asking for receipt ``bad``, then
    10 more SENDs, in one write; the client reads nothing for a second (``raw``: a 4 KB
    receive buffer; ``proxy``: the link passes nothing), then reads: RECEIPTs ``s0`` … ``s2999`` in
    order, the ERROR with ``receipt-id:bad``, the close; nothing of the 10 SENDs after it is stored."""
    count = 3000
    queue = f"/queue/stall.error.{how}"
    proxy = TcpProxy(*gw.address) if how == "proxy" else None
    sock = stalled_socket(("127.0.0.1", proxy.port) if proxy is not None else gw.address)
    after = b"".join(send_frame(queue, f"late{n}".encode()) for n in range(10))
    data = _pipelined(queue, count) + b"SEND\nreceipt:bad\n\nno destination\x00" + after
    try:
        decoder = connected(sock)
        if proxy is not None:
            proxy.stall("both")
        writer = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
        writer.start()
        time.sleep(1.0)
        if proxy is not None:
            proxy.flow()
        frames = read_frames(sock, decoder, lambda got: False, 20.0)  # (until the gateway closes)
        writer.join(10)
        assert [f.command for f in frames] == ["RECEIPT"] * count + ["ERROR"], \
            [f for f in frames if f.command != "RECEIPT"][:3]
        assert [f.headers.get("receipt-id") for f in frames] == [f"s{n}" for n in range(count)] + ["bad"]
    finally:
        sock.close()
        if proxy is not None:
            proxy.close()
    consumer = RawStomp(gw.address)
    try:
        consumer.connect()
        consumer.send(f"SUBSCRIBE\nid:1\ndestination:{queue}\nack:auto\n\n\x00")
        bodies = []
        while (item := consumer.item(1.0)) is not None:
            assert isinstance(item, Frame), item
            bodies.append(item.body.decode())
        assert bodies == [f"m{n}" for n in range(count)], (len(bodies), bodies[-3:])
    finally:
        consumer.close()


# -- a RECEIPT never precedes the store's commit ----------------------------------------------


def test_each_receipt_read_after_a_stall_covers_stored_persistent_sends(tmp_path: Path) -> None:
    """docs/persistence.md, What a RECEIPT means: "the RECEIPT goes out after the SQLite transaction that
    holds the message has committed ... A RECEIPT is never a promise the disk has not kept", and "A
    RECEIPT covers every frame the same connection sent before it ... A SEND that needs no store write
    (non-persistent ...) still waits for the connection's earlier persistent SENDs to be stored".
    A client with a 4 KB receive buffer pipelines 1,500 SENDs to one queue, every fifth persistent, each
    receipted, and reads nothing for a second (its output fills: the gateway holds its reading); then it
    pipelines 18,500 more while it reads, and the gateway is SIGKILLed as soon as RECEIPT ``s2499`` (a
    non-persistent SEND's) is read, the later SENDs still in flight.  After the restart every persistent
    SEND up to the last RECEIPT read is in the queue."""
    first, count, cut = 1500, 20000, 2499
    gateway = GatewayProcess(tmp_path / "crash")
    gateway.config_path.write_text(_config())
    gateway.start()
    queue = "/queue/stall.crash"
    try:
        sock = stalled_socket(gateway.address)
        decoder = connected(sock)
        data = _pipelined(queue, count, persistent_every=5)
        split = data.index(b"SEND\n", data.index(f"receipt:s{first - 1}\n".encode()))

        def write() -> None:
            sock.sendall(data[:split])
            time.sleep(1.0)  # (nothing read meanwhile)
            sock.sendall(data[split:])

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        time.sleep(1.0)
        frames = read_frames(sock, decoder, lambda got: any(f.headers.get("receipt-id") == f"s{cut}"
                                                            for f in got[-100:]), 30.0)
        gateway.kill()
        sock.close()
        writer.join(10)
        receipts = [f.headers.get("receipt-id") for f in frames]
        assert receipts == [f"s{n}" for n in range(len(receipts))], receipts[-3:]
        assert f"s{cut}" in receipts, receipts[-3:]
        gateway.start()
        consumer = RawStomp(gateway.address)
        consumer.connect()
        consumer.send(f"SUBSCRIBE\nid:1\ndestination:{queue}\nack:auto\n\n\x00")
        bodies = set()
        while (item := consumer.item(2.0)) is not None:
            assert isinstance(item, Frame) and item.command == "MESSAGE", item
            bodies.add(item.body.decode())
        consumer.close()
        last = len(receipts) - 1
        missing = [n for n in range(0, last + 1, 5) if f"m{n}" not in bodies]
        assert not missing, f"persistent SENDs receipted before the kill and not stored: {missing[:10]}"
        unreceipted = [n for n in range(last + 1, count) if n % 5 == 0]
        print(f"kill after RECEIPT s{last}: {len(unreceipted)} later persistent SENDs were sent, "
              f"{sum(f'm{n}' in bodies for n in unreceipted)} of them stored")
    finally:
        gateway.kill()


# -- slow links, half-close -------------------------------------------------------------------


def test_a_trickling_link_gets_every_receipt_in_order(gw: GatewayProcess) -> None:
    """docs/persistence.md: answers "in frame order"; docs/stomp.md, Receipts: "A RECEIPT goes out only
    when the work is done".  A client that writes 500 pipelined receipted SENDs (a third persistent) 7
    bytes at a time and reads 5 bytes at a time with a 4 KB receive buffer, through a proxy that delays
    every chunk 5 ms and caps each direction at 64 KB/s: every RECEIPT arrives once, in order, and every
    message is in the queue."""
    count = 500
    queue = "/queue/stall.trickle"
    proxy = TcpProxy(*gw.address, seed=7)
    proxy.delay(0.005)
    proxy.throttle(65536)
    sock = stalled_socket(("127.0.0.1", proxy.port))
    try:
        decoder = connected(sock)
        data = _pipelined(queue, count)

        def trickle() -> None:
            for start in range(0, len(data), 7):
                sock.sendall(data[start:start + 7])
                if start % 700 == 0:
                    time.sleep(0.001)

        writer = threading.Thread(target=trickle, daemon=True)
        writer.start()
        frames: list[Frame] = []
        deadline = time.monotonic() + 30.0
        while len(frames) < count and time.monotonic() < deadline:
            chunk = sock.recv(5)
            assert chunk, f"closed after {len(frames)} frames"
            frames.extend(item for item in decoder.feed(chunk) if isinstance(item, Frame))
        writer.join(10)
        assert [f.headers.get("receipt-id") for f in frames] == [f"s{n}" for n in range(count)]
    finally:
        sock.close()
        proxy.close()
    assert_queue_holds(gw, queue, count)


@pytest.mark.parametrize("disconnect", [True, False])
def test_a_client_that_half_closes_after_pipelining_gets_every_receipt(gw: GatewayProcess, disconnect: bool) -> None:
    """docs/stomp.md, Receipts: "DISCONNECT waits for everything sent before it, even in the same write:
    first every earlier frame gets its own RECEIPT (or its ERROR), then the DISCONNECT's RECEIPT and the
    close", and (this branch) "A client that half-closes ... is answered as if it had sent a DISCONNECT
    without a receipt".  1,000 pipelined receipted SENDs (a third persistent), with or without a
    receipted DISCONNECT, then ``shutdown(SHUT_WR)`` at once: every RECEIPT arrives, in order (the
    DISCONNECT's last), then the close; all 1,000 messages are in the queue, in order.  (Before, the FIN
    ended the connection at once: the RECEIPTs still waiting for the store's commit never came, 858 of
    1,001 with the DISCONNECT, 0 of 1,000 without.)"""
    count = 1000
    queue = f"/queue/stall.halfclose.{disconnect}"
    sock = stalled_socket(gw.address, rcvbuf=65536)
    try:
        decoder = connected(sock)
        sock.sendall(_pipelined(queue, count, disconnect="bye" if disconnect else None))
        sock.shutdown(socket.SHUT_WR)
        frames = read_frames(sock, decoder, lambda got: False, 10.0)  # (until the gateway closes)
        receipts = [f.headers.get("receipt-id") for f in frames]
        assert receipts == [f"s{n}" for n in range(count)] + (["bye"] if disconnect else []), \
            (len(receipts), receipts[-3:])
    finally:
        sock.close()
    assert_queue_holds(gw, queue, count)


# -- ERRORs that leave the connection open ------------------------------------------------------


def test_a_client_flooding_refused_sends_without_reading_meets_flow_control(tmp_path: Path) -> None:
    """docs/stomp.md, Errors: "a SEND or SUBSCRIBE refused by [[authorization]] (message:not authorized to
    write /queue/x) leaves the connection open"; Flow control: "The gateway neither buffers without
    bound".  A logged-in client pipelines SENDs it may not make, each with a 16 KB receipt id (so each
    earns an ERROR carrying it), and never reads: the gateway must stop reading it (RSS +64 MB at most
    of the 256 MB offered), a granted client meanwhile stays served on time; the first ERRORs are the
    refusals, in order."""
    gateway = GatewayProcess(tmp_path / "auth")
    gateway.config_path.write_text(_config(auth=True))
    gateway.start()
    try:
        sock = stalled_socket(gateway.address)
        sock.sendall(connect_frame(login="alice"))
        decoder = FrameDecoder(version="1.2")
        assert read_frames(sock, decoder, lambda got: bool(got), 10.0)[0].command == "CONNECTED"
        watcher = Watcher(gateway.address, "/queue/granted.watch", login="alice").start()
        before = rss_kb(gateway)
        pad = "x" * 16000
        batch = b"".join(send_frame("/queue/forbidden", receipt=f"r{n}-{pad}") for n in range(64))
        try:
            taken, grown_mb = flooded(gateway, sock, batch, before)
            sock.settimeout(5.0)
            first = read_frames(sock, decoder, lambda got: len(got) >= 3, 10.0)
        finally:
            watcher.stop()
            sock.close()
        summary = watcher.check()
        assert_bounded(taken, grown_mb)
        assert [(f.command, f.headers.get("message"), f.headers["receipt-id"].split("-")[0]) for f in first[:3]] \
            == [("ERROR", "not authorized to write /queue/forbidden", f"r{n}") for n in range(3)], first[:3]
        print(f"refusals: {taken >> 20} MB taken, RSS +{grown_mb:.1f} MB; watcher: {summary}")
    finally:
        gateway.kill()

