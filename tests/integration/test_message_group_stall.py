"""Message groups (``JMSXGroupID``) with a consumer that stops reading, on the real gateway process.

Black box: a real ``twistd jmsgateway`` (``tests/support/gateway.py``), the producer and the reading
consumer are stomp.py clients, the consumer that stops reading is a raw socket whose ``SO_RCVBUF`` is
small and that is never read while it stalls (stomp.py reads everything it is sent in its receiver
thread).  What an ActiveMQ or Artemis user expects of groups (docs/stomp.md, "message groups"):

* a group belongs to the consumer that was *given* its first message; a consumer whose transport is
  full is given nothing, so it is assigned no group, and every group it was never given goes to the
  consumer that reads, every message of it, in send order (checked by a sentinel: the queue hands
  the reading consumer its messages in queue order, so once the sentinel sent last has come, every
  message of a group the stalled consumer does not own has come before it);
* when the stalled consumer leaves (UNSUBSCRIBE, DISCONNECT, its socket reset, the process holding it
  killed), its groups move to the reading one: what it was given and never acknowledged comes back
  first, flagged ``redelivered``, then the rest of the group, in send order; nothing is lost;
* the same with persistent messages across restarts of the gateway.

The defect these stand for (fixed in daa401c, found by the randomized model run): the first message
of a group refused by a consumer whose transport was full still made that consumer the group's
owner.  Over STOMP a consumer refuses a message only while the session cannot pause the queue's
consumer yet, during its SUBSCRIBE (``StompSession.deliver``): "full" subscribes a consumer whose
transport another queue's backlog filled already (it refuses the first message, owned that group and
was never given a message of it); "backlog" subscribes it to the groups' backlog, which fills the
transport during the SUBSCRIBE (the refused group was its own, given to it unflagged when it drained:
``JMSXGroupFirstForConsumer`` missing; the reading consumer, subscribing to what is left, is refused
one too).  A consumer that stops reading while its subscription is live ("live") is paused before it
is picked: those pass on the old code as well.  The stalled socket's MSS is small (see
:class:`Stalled`), so its transport fills after ~10 messages, as over a network, not after 2 MB.

And a stalled consumer's DISCONNECT: the gateway closes the connection once the RECEIPT is read,
not at ``close_timeout_ms`` (Twisted kept a transport with a paused producer open: fixed in
``StompServerProtocol.close``).
"""

from __future__ import annotations

import fcntl
import json
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import stomp
from stomp.utils import Frame as StompPyFrame

from gateway.wire.codec import FrameDecoder
from gateway.wire.frame import Frame
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

Address = tuple[str, int]

GROUPS = 40
"""Groups in a backlog: more than the stalled consumer's transport takes messages (~8 of these), so
the message it refuses starts a group."""
ROUNDS = 3
"""Messages of each group; a backlog is sent round by round (``g00.0 g01.0 ... g39.0 g00.1 ...``)."""
BODY = 16 * 1024
"""Body size: 4 fill the transport's 64 KB buffer, 4 more its grace (``WRITE_GRACE_FRAMES``)."""
TOTAL = GROUPS * ROUNDS
WAIT = 15.0
"""Bound of every wait (they poll)."""
CLOSED_WITHIN = 2.0
"""Seconds the gateway takes at most to close a connection after DISCONNECT's RECEIPT is read (its
abort of a peer that does not drain, ``close_timeout_ms``, comes at 5)."""


@dataclass(frozen=True)
class Got:
    """One MESSAGE of a group: its group, its round (the send order within the group), its flags
    (``redelivered``, ``JMSXGroupFirstForConsumer``)."""

    group: str
    round: int
    redelivered: bool
    first: bool


def body(group: int, round_: int) -> bytes:
    return f"g{group:02}.{round_}:".encode().ljust(BODY, b".")


def parse(frame_body: bytes, headers: dict[str, str]) -> Got:
    label = frame_body[: frame_body.index(b":")].decode()
    group, _, round_ = label.partition(".")
    assert headers.get("JMSXGroupID") == group, headers  # (the property comes back as a header)
    return Got(group, int(round_), headers.get("redelivered") == "true",
               headers.get("JMSXGroupFirstForConsumer") == "true")


def send_backlog(address: Address, queue: str, *, persistent: bool = False) -> None:
    """The backlog, round by round, every group in each round; the last SEND receipted (so all are in)."""
    producer = Client(address)
    try:
        for round_ in range(ROUNDS):
            for group in range(GROUPS):
                last = round_ == ROUNDS - 1 and group == GROUPS - 1
                producer.send(queue, body(group, round_), receipt=last, JMSXGroupID=f"g{group:02}",
                              JMSXGroupSeq=str(round_ + 1), persistent="true" if persistent else "false")
    finally:
        producer.disconnect()


def send_sentinel(address: Address, queue: str) -> None:
    """A message of no group, sent after everything else: the reading consumer gets it after every
    earlier message it may take."""
    producer = Client(address)
    try:
        producer.send(queue, b"end:", receipt=True)
    finally:
        producer.disconnect()


# -- the consumer that stops reading (a raw socket) ----------------------------------------------


def _unread(sock: socket.socket) -> int:
    """Bytes waiting in the socket's receive queue (``FIONREAD``)."""
    result: int = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    return result


def subscribe_frame(queue: str, ack: str, prefetch: int | None, receipt: str | None = None,
                    sub_id: str = "s") -> bytes:
    lines = [f"SUBSCRIBE\nid:{sub_id}\ndestination:{queue}\nack:{ack}"]
    if prefetch is not None:
        lines.append(f"activemq.prefetchSize:{prefetch}")
    if receipt is not None:
        lines.append(f"receipt:{receipt}")
    return ("\n".join(lines) + "\n\n\x00").encode()


def queue_status(gateway: GatewayProcess, queue: str) -> dict[str, int]:
    """The embedded broker's figures of ``queue`` (``pending``, ``consumers``, ``inflight``) on ``/status``
    of the gateway's admin listener (``gateway.admin_port``)."""
    port = gateway.admin_port  # type: ignore[attr-defined]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=WAIT) as answer:
        status = json.load(answer)
    figures: dict[str, int] = status["connectors"]["embedded"]["queues"].get(queue, {})
    return figures


def wait_stalled(gateway: GatewayProcess, queue: str) -> None:
    """Wait until the gateway stopped handing ``queue``'s messages to a consumer that stopped reading:
    its pending and in-flight counts unchanged for 0.5 s (the gateway's kernel send buffer grows while
    it takes the first ones; a loaded host makes that slower)."""
    seen: list[tuple[int, int]] = []

    def still() -> bool:
        figures = queue_status(gateway, queue)
        seen.append((figures["pending"], figures["inflight"]))
        return len(seen) >= 10 and len(set(seen[-10:])) == 1 and seen[-1][0] > 0

    wait_until(still, WAIT, f"the stalled consumer of {queue} to be given nothing more")


class Stalled:
    """A STOMP 1.2 consumer on a socket that reads nothing once subscribed: a 4 KB receive buffer, and
    a 536-byte MSS (loopback's 64 KB one lets the gateway's kernel send buffer grow to 4 MB: a few
    megabytes would go before the transport filled, where over a network a slow reader stops it at a
    few hundred kilobytes)."""

    def __init__(self, address: Address) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        self.sock.settimeout(WAIT)
        self.sock.connect(address)
        self.sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\x00")
        self._read_one(b"CONNECTED\n")  # (all the gateway sends before a SUBSCRIBE)

    def _read_one(self, start: bytes) -> None:
        """Read the one frame the gateway sent, which must start with ``start``."""
        data = b""
        while b"\x00" not in data:
            chunk = self.sock.recv(4096)
            assert chunk, f"closed before {start!r}"
            data += chunk
        assert data.startswith(start), data

    def subscribe(self, queue: str, ack: str, prefetch: int | None = None, sub_id: str = "s") -> None:
        """SUBSCRIBE, then wait until the gateway has written to it: the SUBSCRIBE was handled (its
        backlog dispatched in that reactor turn)."""
        self.sock.sendall(subscribe_frame(queue, ack, prefetch, sub_id=sub_id))
        wait_until(lambda: _unread(self.sock) > 0, WAIT, "the stalled consumer's first MESSAGE bytes")

    def subscribe_receipted(self, queue: str, ack: str, prefetch: int | None = None) -> None:
        """SUBSCRIBE to a queue with nothing in it yet, and read its RECEIPT (the last thing read)."""
        self.sock.sendall(subscribe_frame(queue, ack, prefetch, receipt="sub"))
        self._read_one(b"RECEIPT\nreceipt-id:sub\n")

    def fill(self, gateway: GatewayProcess, filler: str) -> None:
        """Fill its transport with ``filler``'s backlog (auto ack, subscription ``x``) and wait until the
        gateway has stopped handing it more."""
        self.subscribe(filler, "auto", sub_id="x")
        wait_stalled(gateway, filler)

    def subscribe_when_full(self, gateway: GatewayProcess, queue: str, ack: str, prefetch: int | None) -> None:
        """SUBSCRIBE to ``queue`` while its transport is full (:meth:`fill`); wait until ``/status``
        counts the consumer (nothing it is sent can be read now)."""
        self.sock.sendall(subscribe_frame(queue, ack, prefetch))
        wait_until(lambda: queue_status(gateway, queue).get("consumers") == 1, WAIT,
                   "the stalled consumer's SUBSCRIBE to be handled")

    def given(self) -> bool:
        return _unread(self.sock) > 0

    def leave(self, how: str) -> list[Got]:
        """Leave by ``how`` (``"unsubscribe"``, ``"disconnect"``: a frame with a receipt, then read
        everything up to that RECEIPT; ``"reset"``: close with an RST, nothing read) and return what
        subscription ``s`` had been given (unknown after a reset: empty)."""
        if how == "reset":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
            return []
        command = "UNSUBSCRIBE\nid:s" if how == "unsubscribe" else "DISCONNECT"
        self.sock.sendall(f"{command}\nreceipt:bye\n\n\x00".encode())
        decoder = FrameDecoder(version="1.2")
        given: list[Got] = []
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            chunk = self.sock.recv(1 << 20)
            assert chunk, f"closed before the RECEIPT of {how}; given {len(given)}"
            for item in decoder.feed(chunk):
                assert isinstance(item, Frame), item
                if item.command == "RECEIPT" and item.headers.get("receipt-id") == "bye":
                    if how == "disconnect":
                        self._closed_after_receipt()
                    self.sock.close()
                    return given
                assert item.command == "MESSAGE", item
                if item.headers.get("subscription") == "s":  # (not the filler's)
                    given.append(parse(item.body, item.headers))
        raise AssertionError(f"no RECEIPT of {how} within {WAIT}s")

    def _closed_after_receipt(self) -> None:
        """The gateway closes the connection once DISCONNECT's RECEIPT is read (EOF, not the reset of
        ``[stomp] close_timeout_ms``, 5 s: the connection and what it holds would stay until then)."""
        self.sock.settimeout(CLOSED_WITHIN)
        try:
            rest = self.sock.recv(4096)
        except TimeoutError:
            raise AssertionError(f"the gateway did not close within {CLOSED_WITHIN}s of the RECEIPT") from None
        except ConnectionResetError:
            raise AssertionError("the gateway reset the connection instead of closing it") from None
        assert rest == b"", rest

    def close(self) -> None:
        self.sock.close()


STALLED_PROCESS = """
import fcntl, socket, struct, sys, termios, time
host, port, frame = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode().decode("unicode_escape").encode()
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
sock.connect((host, port))
sock.sendall(b"CONNECT\\naccept-version:1.2\\nhost:x\\nheart-beat:0,0\\n\\n\\x00")
data = b""
while b"\\x00" not in data:
    data += sock.recv(4096)
sock.sendall(frame)
while struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\\0\\0\\0\\0"))[0] == 0:
    time.sleep(0.01)
print("stalled", flush=True)
time.sleep(120)
"""
"""A process that holds a stalled consumer (as :class:`Stalled`) until it is killed."""


def stalled_process(address: Address, queue: str, ack: str, prefetch: int | None) -> subprocess.Popen[bytes]:
    frame = subscribe_frame(queue, ack, prefetch).decode().encode("unicode_escape").decode()
    process = subprocess.Popen([sys.executable, "-c", STALLED_PROCESS, address[0], str(address[1]), frame],
                               stdout=subprocess.PIPE)
    assert process.stdout is not None
    line = process.stdout.readline()  # (it prints once the gateway has written to it)
    assert line == b"stalled\n", line
    return process


# -- the consumer that reads (stomp.py) ----------------------------------------------------------


class Reader(stomp.ConnectionListener):
    """A stomp.py consumer that reads everything and acknowledges each MESSAGE (unless ``auto``)."""

    def __init__(self, address: Address, queue: str, ack: str) -> None:
        self.ack = ack
        self.got: list[Got] = []
        self.ended = threading.Event()
        self.lock = threading.Lock()
        self.client = Client(address)
        self.client.connection.set_listener("reader", self)
        self.client.subscribe(queue, "r", ack=ack, headers={"activemq.prefetchSize": "1000"})

    def on_message(self, frame: StompPyFrame) -> None:
        if self.ack != "auto":
            self.client.connection.ack(frame.headers["ack"])  # (in the receiver thread: no receipt)
        raw = frame.body if isinstance(frame.body, bytes) else frame.body.encode()
        if raw.startswith(b"end:"):
            self.ended.set()
            return
        with self.lock:
            self.got.append(parse(raw, frame.headers))

    def snapshot(self) -> list[Got]:
        with self.lock:
            return list(self.got)

    def wait_count(self, count: int) -> list[Got]:
        wait_until(lambda: len(self.snapshot()) >= count, WAIT, f"{count} messages at the reading consumer")
        return self.snapshot()

    def close(self) -> None:
        self.client.disconnect()


# -- what is checked -----------------------------------------------------------------------------


def by_group(got: list[Got]) -> dict[str, list[Got]]:
    groups: dict[str, list[Got]] = {}
    for item in got:
        groups.setdefault(item.group, []).append(item)
    return groups


ALL_GROUPS = [f"g{group:02}" for group in range(GROUPS)]


def firsts(items: list[Got]) -> list[bool]:
    return [item.first for item in items]


def check_while_stalled(reading: list[Got], stalled_groups: set[str]) -> None:
    """Before the stalled consumer left: the reader has no message of a group the stalled one owns,
    and every message of every other group, in send order, the first flagged
    ``JMSXGroupFirstForConsumer``."""
    groups = by_group(reading)
    assert not stalled_groups & groups.keys(), f"groups at both consumers: {sorted(stalled_groups & groups.keys())}"
    waiting = [group for group in ALL_GROUPS if group not in stalled_groups and group not in groups]
    assert not waiting, (
        f"groups the stalled consumer was never given waited for it: {waiting} "
        f"(it was given {sorted(stalled_groups)})")
    for group, items in groups.items():
        assert [item.round for item in items] == list(range(ROUNDS)), (group, items)
        assert not any(item.redelivered for item in items), (group, items)
        assert firsts(items) == [True] + [False] * (ROUNDS - 1), (
            f"group {group}'s first message at the reading consumer is not flagged first for it: it owned "
            f"the group before it was given a message of it (refused while it subscribed): {items}")


def check_given(given: list[Got]) -> set[str]:
    """What the stalled consumer was given before it stopped: per group, its first messages in send
    order, the first flagged ``JMSXGroupFirstForConsumer`` (the group was assigned by that delivery)."""
    for group, items in by_group(given).items():
        assert [item.round for item in items] == list(range(len(items))), (group, items)
        assert firsts(items) == [True] + [False] * (len(items) - 1), (
            f"group {group}'s first message at the stalled consumer is not flagged first for it: "
            f"it owned the group before it was given a message of it: {items}")
    assert len(given) < TOTAL // 2, f"the stalled consumer took {len(given)} of {TOTAL}: it did not stall"
    return set(by_group(given))


def check_moved(after: list[Got], given: list[Got] | None, stalled_groups: set[str], *, redelivered: bool) -> None:
    """After the stalled consumer left: the reader got the rest of its groups, per group in send order,
    starting with what the stalled one was given and did not acknowledge (``redelivered``: flagged so)
    or after what it consumed (auto); ``given`` None: not known (a reset), each group then starts after
    at least one consumed message (auto) or with at least one redelivered one (client).  Each group
    is newly the reader's: its first message there is flagged ``JMSXGroupFirstForConsumer``."""
    groups = by_group(after)
    assert groups.keys() == stalled_groups, (sorted(groups), sorted(stalled_groups))
    for group, items in groups.items():
        rounds = [item.round for item in items]
        flagged = [item.redelivered for item in items]
        if given is not None:
            taken = len([item for item in given if item.group == group])
        else:
            taken = flagged.count(True) if redelivered else ROUNDS - len(items)
            assert taken >= 1, (f"group {group} moved whole: the stalled consumer owned it without "
                                f"being given a message of it", items)
        if redelivered:
            assert rounds == list(range(ROUNDS)), (group, items)
            assert flagged == [True] * taken + [False] * (ROUNDS - taken), (group, items)
        else:
            assert rounds == list(range(taken, ROUNDS)), (group, items)
            assert not any(flagged), (group, items)
        assert firsts(items) == [True] + [False] * (len(items) - 1), (group, items)


Stall = Callable[[GatewayProcess, str, str, "int | None"], tuple[Stalled, "Reader"]]


def stall_live(gateway: GatewayProcess, queue: str, ack: str, prefetch: int | None) -> tuple[Stalled, Reader]:
    """Both consumers subscribed, then the backlog sent: the stalled one stops reading as it comes."""
    stalled = Stalled(gateway.address)
    stalled.subscribe_receipted(queue, ack, prefetch)
    reader = Reader(gateway.address, queue, ack)
    send_backlog(gateway.address, queue)
    return stalled, reader


def stall_backlog(gateway: GatewayProcess, queue: str, ack: str, prefetch: int | None) -> tuple[Stalled, Reader]:
    """The backlog sent first; the stalled consumer subscribes (its transport fills with the backlog
    while the SUBSCRIBE is handled), then the reading one."""
    send_backlog(gateway.address, queue)
    stalled = Stalled(gateway.address)
    stalled.subscribe(queue, ack, prefetch)
    wait_stalled(gateway, queue)
    return stalled, Reader(gateway.address, queue, ack)


def stall_full(gateway: GatewayProcess, queue: str, ack: str, prefetch: int | None) -> tuple[Stalled, Reader]:
    """The backlog sent first; the stalled consumer's transport is full already (another queue's
    backlog) when it subscribes to the groups' queue, so it is given none of them; then the reading one."""
    send_backlog(gateway.address, queue)
    filler = fresh_queue()
    producer = Client(gateway.address)
    try:
        for number in range(FILLER):
            producer.send(filler, b"f" * 65536, receipt=number == FILLER - 1)
    finally:
        producer.disconnect()
    stalled = Stalled(gateway.address)
    stalled.fill(gateway, filler)
    stalled.subscribe_when_full(gateway, queue, ack, prefetch)
    return stalled, Reader(gateway.address, queue, ack)


FILLER = 24
"""64 KB messages of the queue that fills a transport before the stalled consumer subscribes to the groups."""


def admin_listener(port: int) -> str:
    """Config for an admin listener on ``port`` (no ``[auth]`` users: ``/status`` asks no login)."""
    return f'[admin]\nlisten = ["tcp:{port}:interface=127.0.0.1"]\n'


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """The module's gateway (shipped config), with an admin listener for ``/status`` (``gw.admin_port``)."""
    admin_port = free_port()
    process = GatewayProcess(tmp_path_factory.mktemp("groupstall"), admin_listener(admin_port))
    process.admin_port = admin_port  # type: ignore[attr-defined]
    process.start()
    yield process
    process.stop()


def fresh_queue() -> str:
    return f"/queue/groups.{uuid.uuid4().hex[:12]}"


# -- 1. one consumer stops reading -----------------------------------------------------------------

MODES = [
    pytest.param("auto", None, id="auto"),
    pytest.param("client", 1000, id="client-transport-bound"),
    pytest.param("client-individual", 3, id="client-individual-prefetch-3"),
]


@pytest.mark.parametrize("stall", [stall_full, stall_backlog, stall_live], ids=["full", "backlog", "live"])
@pytest.mark.parametrize(("ack", "prefetch"), MODES)
def test_groups_the_stalled_consumer_never_got_go_to_the_reading_one(
    gw: GatewayProcess, stall: Stall, ack: str, prefetch: int | None,
) -> None:
    """Two consumers, many groups, 16 KB bodies; one stops reading (its transport fills, or its
    prefetch of 3 does, or its transport was full when it subscribed).  No group is assigned to it
    past what it was given; the other gets every message of every other group, in send order, while
    it stalls; when it leaves (UNSUBSCRIBE: what it was given is read then), its groups follow,
    nothing lost or doubled."""
    queue = fresh_queue()
    stalled, reader = stall(gw, queue, ack, prefetch)
    try:
        send_sentinel(gw.address, queue)
        assert reader.ended.wait(WAIT), f"no sentinel at the reading consumer; it has {len(reader.snapshot())}"
        before = reader.snapshot()
        assert stalled.given()
        given = stalled.leave("unsubscribe")
        stalled_groups = check_given(given)
        if stall is stall_full:
            assert not given, f"given {len(given)} messages with its transport full"
        else:
            assert given, "the stalled consumer was given nothing: the test did not stall it"
            if prefetch is not None and prefetch < 10:
                assert len(given) == prefetch, given
        check_while_stalled(before, stalled_groups)
        rest = TOTAL - len(before) - (len(given) if ack == "auto" else 0)
        after = reader.wait_count(len(before) + rest)[len(before):]
        check_moved(after, given, stalled_groups, redelivered=ack != "auto")
        time.sleep(0.2)
        assert len(reader.snapshot()) == len(before) + rest, "messages after the last expected one"
    finally:
        stalled.close()
        reader.close()


# -- 2. the stalled consumer leaves ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["disconnect", "reset", "killed"])
@pytest.mark.parametrize("ack", ["auto", "client-individual"])
def test_the_groups_of_a_stalled_consumer_that_leaves_move_in_order(gw: GatewayProcess, how: str, ack: str) -> None:
    """The stalled consumer (backlog stall) leaves by DISCONNECT, by a reset socket, or by the death
    of the process that held its socket: its groups move to the reading consumer; in client mode
    what it was given comes back first, redelivered, in send order, and nothing is lost."""
    queue = fresh_queue()
    send_backlog(gw.address, queue)
    process: subprocess.Popen[bytes] | None = None
    stalled: Stalled | None = None
    if how == "killed":
        process = stalled_process(gw.address, queue, ack, 1000)
    else:
        stalled = Stalled(gw.address)
        stalled.subscribe(queue, ack, 1000)
    wait_stalled(gw, queue)
    reader = Reader(gw.address, queue, ack)
    try:
        send_sentinel(gw.address, queue)
        assert reader.ended.wait(WAIT), f"no sentinel at the reading consumer; it has {len(reader.snapshot())}"
        before = reader.snapshot()
        given: list[Got] | None = None
        if stalled is not None:
            got = stalled.leave(how)
            given = got if how == "disconnect" else None
        else:
            assert process is not None
            process.kill()
            process.wait(WAIT)
        if given is not None:
            assert given, "the stalled consumer was given nothing: the test did not stall it"
            stalled_groups = check_given(given)
            check_while_stalled(before, stalled_groups)
            rest = TOTAL - len(before) - (len(given) if ack == "auto" else 0)
            after = reader.wait_count(len(before) + rest)[len(before):]
        elif ack == "auto":  # (what it consumed is unknown: wait until every group it held has moved)
            held = set(ALL_GROUPS) - by_group(before).keys()

            def moved() -> bool:
                groups = by_group(reader.snapshot()[len(before):])
                return groups.keys() == held and all(items[-1].round == ROUNDS - 1 for items in groups.values())

            try:
                wait_until(moved, WAIT, "the stalled consumer's groups at the reading consumer")
            except AssertionError as error:
                groups = by_group(reader.snapshot()[len(before):])
                raise AssertionError(f"{error}: held {sorted(held)}, moved {groups}") from None
            after = reader.snapshot()[len(before):]
            stalled_groups = set(by_group(after))
            check_while_stalled(before, stalled_groups)
        else:  # (client ack: nothing is lost, everything comes to the reader)
            after = reader.wait_count(TOTAL)[len(before):]
            stalled_groups = {item.group for item in after if item.redelivered}
            check_while_stalled(before, stalled_groups)
        check_moved(after, given, stalled_groups, redelivered=ack != "auto")
        if ack != "auto":
            assert len(before) + len(after) == TOTAL
    finally:
        if stalled is not None:
            stalled.close()
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(WAIT)
        reader.close()


# -- 3. persistent messages and restarts -----------------------------------------------------------


def test_persistent_groups_across_restarts(make_gateway: Callable[..., GatewayProcess], tmp_path: Path) -> None:
    """Persistent messages (SQLite store): the backlog is recovered by a restart before anyone
    consumes (left in the store until consumers reach it); a consumer stalls on it (client ack)
    beside a reading one; the gateway restarts again under them; afterwards a new consumer gets the
    stalled one's groups whole, in send order, each newly flagged first for it, and nothing of the
    groups the reader acknowledged."""
    admin_port = free_port()
    gateway = make_gateway(admin_listener(admin_port))
    gateway.admin_port = admin_port  # type: ignore[attr-defined]
    queue = fresh_queue()
    send_backlog(gateway.address, queue, persistent=True)
    gateway.restart()
    stalled = Stalled(gateway.address)
    stalled.subscribe(queue, "client-individual", 1000)
    wait_stalled(gateway, queue)
    reader = Reader(gateway.address, queue, "client-individual")
    try:
        send_sentinel(gateway.address, queue)
        assert reader.ended.wait(WAIT), f"no sentinel at the reading consumer; it has {len(reader.snapshot())}"
        before = reader.snapshot()
        held = set(ALL_GROUPS) - by_group(before).keys()
        assert held, "the stalled consumer holds no group: it did not stall"
        check_while_stalled(before, held)
        reader.client.send("/queue/none", b"", receipt=True)  # (its ACKs, sent before, are handled)
    finally:
        reader.close()
    gateway.restart()  # (the stalled consumer's connection is gone with the process)
    stalled.close()
    after = Reader(gateway.address, queue, "client-individual")
    try:
        got = after.wait_count(len(held) * ROUNDS)
        groups = by_group(got)
        assert groups.keys() == held, (sorted(groups), sorted(held))
        for group, items in groups.items():
            assert [item.round for item in items] == list(range(ROUNDS)), (group, items)
            assert firsts(items) == [True] + [False] * (ROUNDS - 1), (group, items)
        time.sleep(0.2)
        assert len(after.snapshot()) == len(held) * ROUNDS, "messages the reader had acknowledged came back"
    finally:
        after.close()
