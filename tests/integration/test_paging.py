"""Queues deeper than memory (issue 27, part 1), against a real gateway process.

``[broker] memory_limit`` bounds the memory queued messages take in the whole
process; ``[broker.destinations."<pattern>"]`` tables give a destination
pattern a ``max_size`` and a ``full_policy`` with Artemis' meanings:

- PAGE (the default): keep accepting, keep a bounded window in memory, read the
  rest back in order (persistent messages from the store, non-persistent ones
  from a page file under ``data_dir`` that is discarded at restart);
- BLOCK: stop reading from the sender until a consumer makes room;
- FAIL: answer the SEND with an ERROR naming the destination and the limit;
- DROP: discard and count.

Sizes are binary ("64MB" is 64 MiB), as ActiveMQ and Artemis read them.

Every test is black-box: raw sockets pipelining SENDs (a test must take seconds,
not minutes), the gateway's resident memory from ``/proc/<pid>/status``, its
``/metrics`` and ``/status`` over HTTP, its data directory and its log file.
Memory bounds are "limit plus a fixed overhead" (:data:`OVERHEAD_MB`) above the
RSS of the same gateway before the load, so an unbounded queue (which grows by
the whole backlog) fails them.  Besides floods and the four policies: a SIGKILL
while paging, the page file's end at restart, a restart with a deep persistent
backlog, a selector, priorities, durable subscribers, NACK and the DLQ, and topic
fan-out on paged destinations; what /metrics, /status and the log say.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import sqlite3
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import StompProtocolError
from gateway.wire.frame import Frame
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.raw_stomp import RawStomp
from tests.support.waiting import wait_until

KB = 1024
MB = 1024 * 1024
OVERHEAD_MB = 40
"""What a gateway may grow by beyond its memory limit under load, whatever the backlog: the page
file's SQLite cache (8 MiB), the message store's, messages waiting for their store write (held to a
share of the limit), read and write buffers, the allocator's slack.  Measured on the paging branch:
a non-persistent flood of 10 or 20 times a 4 MB limit grows RSS by 12-13 MB, a persistent one by
25 MB.  An unbounded queue grows by the whole backlog (ten times the limit in these tests) and more."""


# -- the gateway and what it reports ------------------------------------------------------


@dataclass
class PagingGateway:
    """A gateway process with an admin port, and the readings a test takes of it."""

    process: GatewayProcess
    admin_port: int

    @property
    def address(self) -> tuple[str, int]:
        return self.process.address

    @property
    def pid(self) -> int:
        assert self.process.process is not None
        return self.process.process.pid

    def rss_mb(self) -> float:
        return rss_mb(self.pid)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=10) as response:
            return str(response.read().decode())

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of the sample ``name{labels}`` (labels matched as a subset), None if absent."""
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$", line)
            if match is None or match.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
            if all(found.get(key) == value for key, value in labels.items()):
                return float(match.group(4))
        return None

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/status", timeout=10) as response:
            document: dict[str, Any] = json.loads(response.read())
        return document

    def broker_status(self) -> dict[str, Any]:
        broker: dict[str, Any] = self.status()["connectors"]["embedded"]
        return broker

    def queue_status(self, destination: str) -> dict[str, Any]:
        queues: dict[str, Any] = self.broker_status()["queues"]
        assert destination in queues, f"{destination} not in /status: {sorted(queues)}"
        return dict(queues[destination])

    def log(self) -> str:
        return self.process.log()

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        self.process.kill()

    def start(self, timeout: float = 30.0) -> float:
        """Start the process; the seconds until it listened for STOMP (returns once the admin port is up)."""
        admin_lines = self.log().count("admin endpoint on")
        started = time.monotonic()
        self.process.start(timeout)
        listening = time.monotonic() - started
        wait_until(lambda: self.log().count("admin endpoint on") > admin_lines, 30, "the admin endpoint")
        return listening


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def broker_keys(memory_limit: str | int | None,
                destinations: dict[str, dict[str, str]] | None) -> tuple[str, str]:
    """TOML lines for the ``[broker]`` table (the default config has one) and the tables after it."""
    keys = ""
    if memory_limit is not None:
        keys = f"memory_limit = {json.dumps(memory_limit)}\n"
    tables = ""
    for pattern, settings in (destinations or {}).items():
        tables += f"\n[broker.destinations.{json.dumps(pattern)}]\n"
        tables += "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    return keys, tables


@pytest.fixture
def paging_gateway(tmp_path: Path) -> Iterator[Callable[..., PagingGateway]]:
    """Start a gateway whose ``[broker]`` table has the given paging keys; killed afterwards."""
    started: list[PagingGateway] = []

    def start(memory_limit: str | int | None = None, destinations: dict[str, dict[str, str]] | None = None,
              args: list[str] | None = None) -> PagingGateway:
        admin = free_port()
        keys, tables = broker_keys(memory_limit, destinations)
        process = GatewayProcess(tmp_path / f"gw{len(started)}",
                                 f'\n[admin]\nlisten = "tcp:{admin}:interface=127.0.0.1"\n{tables}', args=args)
        config = process.config_path.read_text()
        assert config.count("\n[broker]\n") == 1, "the default config's [broker] table moved"
        process.config_path.write_text(config.replace("\n[broker]\n", f"\n[broker]\n{keys}", 1))
        gateway = PagingGateway(process, admin)
        started.append(gateway)
        gateway.start()
        return gateway

    yield start
    for gateway in started:
        gateway.kill()


class RssPeak(threading.Thread):
    """Samples a process's RSS every 20 ms until stopped; the highest reading in MB."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_mb(pid)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.02):
            try:
                self.peak = max(self.peak, rss_mb(self.pid))
            except (OSError, AssertionError):  # the process ended
                return

    def __enter__(self) -> RssPeak:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.join(5)


# -- pipelined senders and draining consumers on raw sockets --------------------------------


def send_frame(destination: str, body: bytes, **headers: str) -> bytes:
    """A SEND frame as bytes (content-length: a BytesMessage)."""
    lines = "".join(f"{name}:{value}\n" for name, value in headers.items())
    return (f"SEND\ndestination:{destination}\n{lines}content-length:{len(body)}\n\n".encode()
            + body + b"\x00")


def numbered_body(seq: int, size: int) -> bytes:
    """``size`` bytes beginning with ``seq`` (so a drain checks the body, not only a header)."""
    return f"{seq}:".encode().ljust(size, b"x")


class Producer:
    """One raw STOMP 1.2 connection that writes SENDs in large pipelined writes."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.stomp = RawStomp(address, timeout=60)
        self.stomp.connect()
        self.receipts: list[str] = []
        self.errors: list[Frame] = []

    def write(self, frames: Iterable[bytes], batch: int = 256) -> None:
        chunk: list[bytes] = []
        for frame in frames:
            chunk.append(frame)
            if len(chunk) >= batch:
                self.stomp.send(b"".join(chunk))
                chunk = []
        if chunk:
            self.stomp.send(b"".join(chunk))

    def await_receipt(self, receipt: str, timeout: float = 60.0) -> Frame | None:
        """Read until RECEIPT ``receipt``; the ERROR frame if one comes first; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while receipt not in self.receipts:
            left = deadline - time.monotonic()
            item = self.stomp.item(max(0.01, left)) if left > 0 else None
            if item is None:
                raise AssertionError(f"no RECEIPT {receipt} within {timeout}s (closed: {self.stomp.closed})")
            if isinstance(item, StompProtocolError):
                raise AssertionError(f"undecodable frame from the gateway: {item}")
            if item.command == "RECEIPT":
                self.receipts.append(item.headers["receipt-id"])
            elif item.command == "ERROR":
                self.errors.append(item)
                return item
        return None

    def close(self) -> None:
        self.stomp.close()


def flood(address: tuple[str, int], destination: str, count: int, body_size: int, *, persistent: bool,
          headers: Callable[[int], dict[str, str]] | None = None, timeout: float = 120.0, first: int = 0) -> None:
    """``count`` SENDs numbered from ``first`` (header ``seq``) pipelined on one connection; returns on the
    last one's RECEIPT."""
    producer = Producer(address)
    flag = "true" if persistent else "false"

    def frames() -> Iterator[bytes]:
        for seq in range(first, first + count):
            extra = headers(seq) if headers else {}
            if seq == first + count - 1:
                extra["receipt"] = "last"
            yield send_frame(destination, numbered_body(seq, body_size), seq=str(seq), persistent=flag, **extra)

    try:
        producer.write(frames())
        error = producer.await_receipt("last", timeout)
        assert error is None, f"the flood to {destination} got an ERROR: {error!r}"
    finally:
        producer.close()


class Consumer:
    """A raw STOMP 1.2 subscriber that reads MESSAGE frames in bulk."""

    def __init__(self, address: tuple[str, int], destination: str, *, ack: str = "auto", prefetch: int = 1000,
                 client_id: str = "", durable: str = "", **headers: str) -> None:
        if durable:
            headers["activemq.subscriptionName"] = durable
        self.sock = RawStomp(address, timeout=60)
        self.sock.connect(extra=f"client-id:{client_id}\n" if client_id else "")
        extra = "".join(f"{name}:{value}\n" for name, value in headers.items())
        self.sock.send(f"SUBSCRIBE\nid:s\ndestination:{destination}\nack:{ack}\n"
                       f"activemq.prefetchSize:{prefetch}\nreceipt:subscribed\n{extra}\n\x00")
        self.messages: list[Frame] = []
        while True:
            frame = self.sock.frame(30)
            if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == "subscribed":
                break
            self.keep(frame)

    def keep(self, frame: Frame) -> None:
        assert frame.command == "MESSAGE", f"expected a MESSAGE, got {frame!r}"
        self.messages.append(frame)

    def take(self, count: int, timeout: float = 60.0) -> list[Frame]:
        """Read until ``count`` messages have arrived in all (AssertionError naming how many after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while len(self.messages) < count:
            left = deadline - time.monotonic()
            item = self.sock.item(left) if left > 0 else None
            if item is None:
                raise AssertionError(f"{len(self.messages)} of {count} messages within {timeout}s "
                                     f"(closed: {self.sock.closed})")
            assert isinstance(item, Frame), f"undecodable frame from the gateway: {item}"
            self.keep(item)
        return self.messages[:count]

    def quiet(self, wait: float = 0.5) -> list[Frame]:
        """Whatever else arrives until nothing has come for ``wait`` seconds."""
        while (item := self.sock.item(wait)) is not None:
            assert isinstance(item, Frame), item
            self.keep(item)
        return self.messages

    def ack_frame(self, command: str, frame: Frame) -> None:
        """ACK or NACK ``frame`` (client-individual), waiting for the receipt."""
        self.sock.send(f"{command}\nid:{frame.headers['ack']}\nreceipt:{command}-{frame.headers['ack']}\n\n\x00")
        while True:
            item = self.sock.frame(30)
            if item.command == "RECEIPT":
                return
            self.keep(item)

    def close(self) -> None:
        self.sock.close()


def drain(address: tuple[str, int], destination: str, count: int, timeout: float = 60.0) -> list[Frame]:
    consumer = Consumer(address, destination)
    try:
        messages = consumer.take(count, timeout)
        extra = consumer.quiet(0.3)[count:]
        assert not extra, f"{len(extra)} messages more than the {count} sent to {destination}"
        return messages
    finally:
        consumer.close()


def seqs(frames: list[Frame]) -> list[int]:
    return [int(frame.headers["seq"]) for frame in frames]


def assert_numbered(frames: list[Frame], body_size: int) -> None:
    """Each message's body is the one sent with its ``seq``."""
    for frame in frames:
        seq = int(frame.headers["seq"])
        assert len(frame.body) == body_size and frame.body.startswith(f"{seq}:".encode()), (
            f"message seq {seq}: body {frame.body[:40]!r}… of {len(frame.body)} bytes")


def data_files_mb(data_dir: Path, excluding: str = "broker.sqlite") -> float:
    """MB of files under ``data_dir`` other than the SQLite store (and its journal files)."""
    total = sum(path.stat().st_size for path in data_dir.rglob("*")
                if path.is_file() and not path.name.startswith(excluding))
    return total / MB


# -- a flood of ten times the limit ----------------------------------------------------------


FLOODS = {
    # ten times the limit into four queues, four senders at once, 16 KB bodies: non-persistent
    # messages go to the page file
    "non-persistent": (16, 10, 16 * KB, {f"/queue/flood.{index}": False for index in range(4)}),
    # twenty times the limit from one pipelined sender of persistent 64 KB messages: each is written
    # to the SQLite store before it is queued, so the sender must not outrun the store without bound
    # (twenty times: what such a sender holds in the gateway grows with the flood, 10x does not show it)
    "persistent": (8, 20, 64 * KB, {"/queue/flood.persistent": True}),
}


@pytest.mark.parametrize("flood_kind", FLOODS)
def test_a_flood_of_many_times_the_limit_stays_bounded_and_drains_complete_and_in_order(
        paging_gateway: Callable[..., PagingGateway], flood_kind: str) -> None:
    limit_mb, times, body_size, queues = FLOODS[flood_kind]
    gateway = paging_gateway(memory_limit=f"{limit_mb}MB")
    per_queue = times * limit_mb * MB // body_size // len(queues)
    flood(gateway.address, "/queue/warm-up", 10, 1024, persistent=False)
    drain(gateway.address, "/queue/warm-up", 10)
    before = gateway.rss_mb()

    with RssPeak(gateway.pid) as rss:
        senders = [threading.Thread(target=flood, args=(gateway.address, queue, per_queue, body_size),
                                    kwargs={"persistent": persistent}, daemon=True)
                   for queue, persistent in queues.items()]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(180)
        assert not any(sender.is_alive() for sender in senders), "a flood did not finish"
        flooded = rss.peak
        for queue in queues:
            assert gateway.queue_status(queue)["pending"] == per_queue
        paged = sum(gateway.broker_status()["paging"][queue]["paged_bytes"] for queue in queues)
        assert paged >= (times - 1) * limit_mb * MB, f"only {paged / MB:.0f} MB paged of {times * limit_mb} MB"
        for queue in queues:
            frames = drain(gateway.address, queue, per_queue)
            assert seqs(frames) == list(range(per_queue)), f"{queue} drained out of order"
            assert_numbered(frames, body_size)
    grown = flooded - before
    assert grown < limit_mb + OVERHEAD_MB, (
        f"RSS grew by {grown:.0f} MB ({before:.0f} → {flooded:.0f}) for a backlog of {times * limit_mb} MB "
        f"with memory_limit {limit_mb}MB")
    assert rss.peak - before < limit_mb + OVERHEAD_MB, f"RSS reached {rss.peak:.0f} MB while draining"


# -- each full_policy -------------------------------------------------------------------------


def test_page_policy_on_a_destination_accepts_everything_and_drains_in_order(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    gateway = paging_gateway(destinations={"/queue/paged.>": {"max_size": "256KB", "full_policy": "PAGE"}})
    destination, count, size = "/queue/paged.orders", 400, 4 * KB  # 1.6 MB: over six times max_size
    flood(gateway.address, destination, count, size, persistent=False)
    frames = drain(gateway.address, destination, count)
    assert seqs(frames) == list(range(count))
    assert_numbered(frames, size)


def test_block_policy_stops_the_sender_until_a_consumer_makes_room(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    gateway = paging_gateway(destinations={"/queue/blocked.>": {"max_size": "256KB", "full_policy": "BLOCK"}})
    destination, count, size = "/queue/blocked.orders", 64, 16 * KB  # 1 MB: four times max_size
    producer = Producer(gateway.address)
    writer = threading.Thread(target=producer.write, args=(
        [send_frame(destination, numbered_body(seq, size), seq=str(seq),
                    **({"receipt": "last"} if seq == count - 1 else {})) for seq in range(count)],), daemon=True)
    writer.start()
    try:
        with pytest.raises(AssertionError, match="no RECEIPT last"):
            producer.await_receipt("last", timeout=2.0)  # held back: the gateway stopped reading it
        # everyone else is served meanwhile, the blocked destination's subscribers too
        flood(gateway.address, "/queue/elsewhere", 5, 100, persistent=False)
        assert seqs(drain(gateway.address, "/queue/elsewhere", 5)) == list(range(5))
        consumer = Consumer(gateway.address, destination, ack="auto", prefetch=4)
        frames = consumer.take(count, timeout=30)
        assert producer.await_receipt("last", timeout=30) is None
        writer.join(10)
        assert seqs(frames) == list(range(count))
        assert_numbered(frames, size)
        assert not producer.errors
        consumer.close()
    finally:
        producer.close()


def test_block_policy_holds_the_queue_near_its_max_size(paging_gateway: Callable[..., PagingGateway]) -> None:
    """What BLOCK keeps is bounded by max_size (plus the message that crossed it), not paged to disk."""
    gateway = paging_gateway(destinations={"/queue/blocked.>": {"max_size": "256KB", "full_policy": "BLOCK"}})
    destination, size = "/queue/blocked.depth", 16 * KB
    producer = Producer(gateway.address)
    writer = threading.Thread(target=producer.write, args=(
        [send_frame(destination, numbered_body(seq, size), seq=str(seq)) for seq in range(128)],), daemon=True)
    writer.start()  # 2 MB: eight times max_size
    try:
        time.sleep(2.0)
        pending = gateway.queue_status(destination)["pending"]
        # what one read brought in after the limit was reached may still be taken (up to 64 KB)
        assert 0 < pending * size <= 256 * KB + 64 * KB + size, f"{pending} messages of {size} B held under BLOCK"
        assert data_files_mb(gateway.process.data_dir) < 0.5, "BLOCK paged messages to disk"
    finally:
        producer.close()


def send_each_with_receipt(producer: Producer, destination: str, count: int, size: int,
                           **headers: str) -> tuple[list[int], Frame]:
    """SEND one at a time with a receipt until an ERROR; the receipted seqs and the ERROR."""
    accepted: list[int] = []
    for seq in range(count):
        producer.stomp.send(send_frame(destination, numbered_body(seq, size), seq=str(seq), receipt=str(seq),
                                       **headers))
        error = producer.await_receipt(str(seq), timeout=10)
        if error is not None:
            return accepted, error
        accepted.append(seq)
    raise AssertionError(f"{count} SENDs of {size} B to {destination} were all accepted")


def test_fail_policy_answers_an_error_naming_the_destination_and_the_limit_and_stores_nothing(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    gateway = paging_gateway(destinations={"/queue/strict.>": {"max_size": "64KB", "full_policy": "FAIL"}})
    destination, size = "/queue/strict.orders", 8 * KB
    producer = Producer(gateway.address)
    accepted, error = send_each_with_receipt(producer, destination, 100, size, persistent="true")
    producer.close()
    assert 0 < len(accepted) * size <= 64 * KB, f"{len(accepted)} messages of {size} B accepted"
    text = error.headers.get("message", "") + "\n" + error.body.decode(errors="replace")
    assert destination in text, f"the ERROR does not name {destination}: {text!r}"
    assert re.search(r"64\s?KB|64\s?KiB|65536|65,536", text), f"the ERROR does not name the limit: {text!r}"
    assert error.headers.get("receipt-id") == str(len(accepted)), error.headers  # which SEND was refused
    assert gateway.metric("jmsgateway_broker_refused_full_total") == 1, gateway.metrics()

    # nothing of the refused SEND was stored: the queue holds exactly what was receipted, also
    # after a restart (the refused message was persistent: it is not in the store either)
    gateway.kill()
    gateway.start()
    consumer = Consumer(gateway.address, destination)
    frames = consumer.take(len(accepted))
    assert seqs(consumer.quiet(0.5)) == accepted
    assert_numbered(frames, size)
    consumer.close()
    # and with room again, SENDs are accepted again
    producer = Producer(gateway.address)
    producer.stomp.send(send_frame(destination, numbered_body(0, size), seq="0", receipt="again"))
    assert producer.await_receipt("again", timeout=10) is None
    producer.close()


def test_drop_policy_discards_and_counts_in_metrics(paging_gateway: Callable[..., PagingGateway]) -> None:
    gateway = paging_gateway(destinations={"/queue/lossy.>": {"max_size": "64KB", "full_policy": "DROP"}})
    destination, count, size = "/queue/lossy.ticks", 40, 8 * KB  # 320 KB: five times max_size
    producer = Producer(gateway.address)
    producer.write(send_frame(destination, numbered_body(seq, size), seq=str(seq)) for seq in range(count))
    producer.stomp.send("DISCONNECT\nreceipt:bye\n\n\x00")  # every SEND before it has been handled
    assert producer.await_receipt("bye", timeout=10) is None, "DROP answered with an ERROR"
    producer.close()

    consumer = Consumer(gateway.address, destination)
    consumer.take(1, timeout=10)
    kept = seqs(consumer.quiet(0.5))
    consumer.close()
    assert kept == list(range(len(kept))), f"DROP kept {kept}: not the first messages, in order"
    assert 0 < len(kept) * size <= 64 * KB + size, f"DROP kept {len(kept)} messages of {size} B"
    assert gateway.metric("jmsgateway_broker_dropped_total") == count - len(kept), gateway.metrics()
    log = gateway.process.wait_for_log(f"{destination} reached its")
    assert log.count(f"{destination} reached its") == 1, log  # once for the episode, not per dropped message


# -- crash and restart -------------------------------------------------------------------------


class ReceiptedSender(threading.Thread):
    """Sends numbered persistent messages in windows of 20 (the last with a receipt) until the
    connection dies; ``receipted`` is how many the gateway has confirmed."""

    def __init__(self, address: tuple[str, int], destination: str, size: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(address)
        self.destination, self.size = destination, size
        self.receipted = 0

    def run(self) -> None:
        seq = 0
        try:
            while True:
                window = [send_frame(self.destination, numbered_body(seq + i, self.size), seq=str(seq + i),
                                     persistent="true", **({"receipt": str(seq + i)} if i == 19 else {}))
                          for i in range(20)]
                self.producer.stomp.send(b"".join(window))
                seq += 20
                if self.producer.await_receipt(str(seq - 1), timeout=30) is not None:
                    return
                self.receipted = seq
        except (AssertionError, OSError):  # the connection died with the gateway
            return


def test_sigkill_while_paging_loses_no_receipted_persistent_message(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    limit_mb, size = 8, 8 * KB
    gateway = paging_gateway(memory_limit=f"{limit_mb}MB")
    destination = "/queue/crash.persistent"
    sender = ReceiptedSender(gateway.address, destination, size)
    sender.start()
    wait_until(lambda: sender.receipted * size > 4 * limit_mb * MB, 60, "4 x memory_limit receipted")
    assert gateway.broker_status()["paging"][destination]["paged"] > 0, "the queue is not paging"
    gateway.kill()  # while the sender is mid-window
    sender.join(30)
    receipted = sender.receipted

    gateway.start()
    consumer = Consumer(gateway.address, destination)
    frames = consumer.take(receipted, timeout=60)
    delivered = seqs(consumer.quiet(0.5))
    consumer.close()
    assert delivered[:receipted] == list(range(receipted)), "a receipted persistent message was lost or reordered"
    assert delivered == list(range(len(delivered))), "messages after the receipted ones came out of order"
    assert_numbered(frames, size)


def test_sigkill_while_fanning_out_loses_no_receipted_message_for_any_durable_subscriber(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    """A topic's persistent messages are stored once for all its durable subscribers: a SIGKILL
    mid-flood leaves each subscriber every receipted message, in order, and once each has taken its
    backlog the store holds no message and no body (no shared body outlives its rows)."""
    limit_mb, size = 4, 8 * KB
    gateway = paging_gateway(memory_limit=f"{limit_mb}MB")
    topic = "/topic/crash.fanout"
    readers = [f"reader-{index}" for index in range(3)]
    for reader in readers:
        Consumer(gateway.address, topic, client_id=reader, durable="all").close()
    wait_until(lambda: len(gateway.broker_status()["durables"]) == 3, 10, "three durable subscriptions")
    sender = ReceiptedSender(gateway.address, topic, size)
    sender.start()
    wait_until(lambda: sender.receipted * size > 2 * limit_mb * MB, 60, "2 x memory_limit receipted")
    gateway.kill()  # while the sender is mid-window
    sender.join(30)
    receipted = sender.receipted

    gateway.start()
    for reader in readers:
        consumer = Consumer(gateway.address, topic, client_id=reader, durable="all")
        frames = consumer.take(receipted, timeout=60)
        delivered = seqs(consumer.quiet(0.5))
        consumer.close()
        assert delivered[:receipted] == list(range(receipted)), f"{reader}: a receipted message was lost or reordered"
        assert delivered == list(range(len(delivered))), f"{reader}: messages after the receipted ones out of order"
        assert_numbered(frames, size)
    gateway.stop()
    with contextlib.closing(sqlite3.connect(gateway.process.data_dir / "broker.sqlite")) as db:
        left = db.execute("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM bodies)").fetchone()
    assert left == (0, 0), f"(messages, bodies) left in the store after every subscriber took its backlog: {left}"


def test_the_non_persistent_page_file_is_discarded_at_restart(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    limit_mb, size = 4, 8 * KB
    gateway = paging_gateway(memory_limit=f"{limit_mb}MB")
    destination = "/queue/crash.transient"
    flood(gateway.address, destination, 8 * limit_mb * MB // size, size, persistent=False)
    paged = data_files_mb(gateway.process.data_dir)
    assert paged > 4 * limit_mb, f"{paged:.1f} MB of page file for {8 * limit_mb} MB of non-persistent messages"
    gateway.kill()
    gateway.start()
    assert data_files_mb(gateway.process.data_dir) < 1, "the non-persistent page file was kept across the restart"
    leftover = Consumer(gateway.address, destination)
    assert leftover.quiet(0.5) == [], "a non-persistent message survived the restart"
    leftover.close()


def test_restart_with_a_deep_persistent_backlog_listens_quickly_at_bounded_memory(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    """Restarts with 100,000 and then 200,000 small persistent messages queued: both listen within
    seconds, and the second takes no more memory than the first (bounded: not by the backlog)."""
    limit_mb, count, size = 8, 100_000, 100
    gateway = paging_gateway(memory_limit=f"{limit_mb}MB")
    empty = gateway.rss_mb()
    destination = "/queue/deep"
    after: list[float] = []
    for backlog in (count, 2 * count):
        flood(gateway.address, destination, count, size, persistent=True, timeout=180, first=backlog - count)
        gateway.stop()
        listening = gateway.start(timeout=60)
        assert listening < 10, f"{listening:.1f}s to listen with {backlog} persistent messages queued"
        assert gateway.queue_status(destination)["pending"] == backlog
        after.append(gateway.rss_mb())
    assert after[1] - after[0] < 8, (
        f"RSS after a restart grows with the backlog: {after[0]:.0f} MB with {count} messages queued, "
        f"{after[1]:.0f} MB with {2 * count} (empty: {empty:.0f} MB)")
    assert after[1] - empty < limit_mb + OVERHEAD_MB, (
        f"RSS {after[1]:.0f} MB after the restart with {2 * count} messages queued (empty: {empty:.0f} MB)")
    consumer = Consumer(gateway.address, destination)
    frames = consumer.take(2_000)
    consumer.close()
    assert seqs(frames) == list(range(2_000))
    assert_numbered(frames, size)


# -- selectors, priorities, FIFO past the window ------------------------------------------------


def test_a_selective_consumer_finds_a_match_behind_100000_non_matching_messages(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    gateway = paging_gateway(memory_limit="4MB")
    destination, count = "/queue/haystack", 100_000

    def color(seq: int) -> dict[str, str]:
        return {"color": "red" if seq == count else "blue"}

    flood(gateway.address, destination, count + 101, 64, persistent=False, headers=color)
    before = gateway.rss_mb()
    selective = Consumer(gateway.address, destination, selector="color = 'red'")
    started = time.monotonic()
    needle = selective.take(1, timeout=30)
    found = time.monotonic() - started
    assert seqs(needle) == [count] and needle[0].headers["color"] == "red"
    assert selective.quiet(0.3) == needle
    selective.close()
    assert found < 10, f"{found:.1f}s to find the match"
    assert gateway.rss_mb() - before < OVERHEAD_MB, "looking for the match loaded the backlog into memory"
    # the rest is still there, in order, past the window
    frames = drain(gateway.address, destination, count + 100)
    assert seqs(frames) == [*range(count), *range(count + 1, count + 101)]


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "non-persistent"])
def test_priority_order_and_fifo_hold_across_the_window_boundary(
        paging_gateway: Callable[..., PagingGateway], persistent: bool) -> None:
    gateway = paging_gateway(memory_limit="2MB")
    destination, count, size = "/queue/prioritised", 1_200, 8 * KB  # 9.6 MB: about five times the limit
    rng = random.Random(27)
    priorities = [rng.choice([0, 4, 4, 4, 7, 9]) for _ in range(count)]
    flood(gateway.address, destination, count, size, persistent=persistent,
          headers=lambda seq: {"priority": str(priorities[seq])})
    frames = drain(gateway.address, destination, count)
    expected = sorted(range(count), key=lambda seq: (-priorities[seq], seq))
    got = seqs(frames)
    first_wrong = next((index for index, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b), None)
    assert first_wrong is None, (
        f"delivery {first_wrong}: seq {got[first_wrong]} (priority {priorities[got[first_wrong]]}) "
        f"where seq {expected[first_wrong]} (priority {priorities[expected[first_wrong]]}) was due")
    assert_numbered(frames, size)


def test_durable_subscribers_of_a_topic_each_get_a_backlog_past_the_limit_in_order(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    limit_mb, count, size = 4, 2_000, 8 * KB  # 16 MB to each of two subscribers: four times the limit
    gateway = paging_gateway(memory_limit=f"{limit_mb}MB")
    topic = "/topic/prices"
    readers = [f"reader-{index}" for index in range(2)]
    for reader in readers:  # subscribe, then go away: the backlog waits for them
        Consumer(gateway.address, topic, client_id=reader, durable="prices").close()
    wait_until(lambda: len(gateway.broker_status()["durables"]) == 2 and not any(
        durable["active"] for durable in gateway.broker_status()["durables"].values()), 10, "two idle durables")
    before = gateway.rss_mb()
    with RssPeak(gateway.pid) as rss:
        flood(gateway.address, topic, count, size, persistent=True)
    assert rss.peak - before < limit_mb + OVERHEAD_MB, f"RSS grew by {rss.peak - before:.0f} MB"
    paging = gateway.broker_status()["paging"]
    durables = [page for key, page in paging.items() if key.startswith("durable:")]
    assert len(durables) == 2 and all(page["paged"] > 0 for page in durables), paging
    for reader in readers:
        consumer = Consumer(gateway.address, topic, client_id=reader, durable="prices")
        frames = consumer.take(count)
        assert seqs(consumer.quiet(0.3)) == list(range(count)), f"{reader} got its backlog out of order"
        assert_numbered(frames, size)
        consumer.close()


def test_a_topic_message_is_stored_once_for_all_its_durable_subscribers(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    """Topic fan-out keeps one stored copy, not one per subscriber (issue 27: "where the store allows";
    the SQLite store is ours), so four idle durable subscribers do not take four times the disk; after a
    restart each still gets every message, and once all four have acknowledged them nothing is left."""
    count, size = 1_000, 16 * KB  # 16 MB
    gateway = paging_gateway(memory_limit="4MB")
    topic = "/topic/fanout"
    for index in range(4):
        Consumer(gateway.address, topic, client_id=f"reader-{index}", durable="all").close()
    wait_until(lambda: len(gateway.broker_status()["durables"]) == 4, 10, "four durable subscriptions")
    empty = sum(path.stat().st_size for path in gateway.process.data_dir.glob("broker.sqlite*")) / MB
    flood(gateway.address, topic, count, size, persistent=True)
    stored = sum(path.stat().st_size for path in gateway.process.data_dir.glob("broker.sqlite*")) / MB - empty
    assert stored < 2 * count * size / MB, f"{stored:.0f} MB stored for {count * size / MB:.0f} MB to 4 subscribers"
    gateway.stop()
    gateway.start()
    for index in range(4):
        consumer = Consumer(gateway.address, topic, client_id=f"reader-{index}", durable="all")
        frames = consumer.take(count)
        assert seqs(consumer.quiet(0.3)) == list(range(count)), f"reader-{index} got its backlog out of order"
        assert_numbered(frames, size)
        consumer.close()
    gateway.stop()
    with contextlib.closing(sqlite3.connect(gateway.process.data_dir / "broker.sqlite")) as db:
        left = db.execute("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM bodies)").fetchone()
    assert left == (0, 0), f"(messages, bodies) left in the store after every subscriber acknowledged: {left}"


def test_nacked_messages_of_a_paged_queue_are_redelivered_then_dead_lettered(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    gateway = paging_gateway(memory_limit="1MB")
    destination, count, size = "/queue/nacked", 600, 8 * KB  # 4.8 MB: about five times the limit
    flood(gateway.address, destination, count, size, persistent=True)
    consumer = Consumer(gateway.address, destination, ack="client-individual", prefetch=1)
    deliveries: dict[int, int] = {}
    acked: list[int] = []
    while len(acked) < count - 1:
        frame = consumer.take(sum(deliveries.values()) + 1)[-1]  # the next one (it may have come with a RECEIPT)
        seq = int(frame.headers["seq"])
        deliveries[seq] = deliveries.get(seq, 0) + 1
        if deliveries[seq] > 1:
            assert frame.headers.get("redelivered") == "true", frame.headers
        if seq == 0:  # refused every time: after max_redeliveries (6) it goes to the DLQ
            consumer.ack_frame("NACK", frame)
        else:
            consumer.ack_frame("ACK", frame)
            acked.append(seq)
    assert acked == list(range(1, count)), "the other messages were not delivered once each, in order"
    assert deliveries[0] == 7, deliveries[0]
    assert consumer.quiet(0.5)[-1].headers["seq"] == str(count - 1), "a message came again"
    consumer.close()
    dead = drain(gateway.address, "/queue/DLQ.nacked", 1)
    assert seqs(dead) == [0]
    assert_numbered(dead, size)


# -- what an operator sees ----------------------------------------------------------------------


def test_metrics_and_status_show_memory_against_the_limit_paged_bytes_and_the_policy(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    gateway = paging_gateway(memory_limit="4MB",
                             destinations={"/queue/audit.>": {"max_size": "1MB", "full_policy": "PAGE"},
                                           "/queue/ticks.>": {"max_size": "1MB", "full_policy": "DROP"}})
    audit, ticks = "/queue/audit.trail", "/queue/ticks.eu"
    flood(gateway.address, audit, 1_000, 8 * KB, persistent=False)  # 8 MB
    flood(gateway.address, ticks, 10, 1 * KB, persistent=False)
    limit = gateway.metric("jmsgateway_broker_memory_limit_bytes")
    used = gateway.metric("jmsgateway_broker_memory_used_bytes")
    assert limit == 4 * MB, gateway.metrics()
    assert used is not None and 0 < used <= limit, gateway.metrics()
    paged = gateway.metric("jmsgateway_broker_paged_bytes", destination=audit, full_policy="PAGE")
    in_memory = gateway.metric("jmsgateway_broker_destination_memory_bytes", destination=audit)
    assert paged is not None and in_memory is not None, gateway.metrics()
    assert in_memory <= 1 * MB and paged + in_memory >= 8 * MB, f"{paged} paged, {in_memory} in memory"
    assert gateway.metric("jmsgateway_broker_destination_max_size_bytes", destination=audit) == 1 * MB
    assert gateway.metric("jmsgateway_broker_paged_bytes", destination=ticks, full_policy="DROP") == 0

    broker = gateway.broker_status()
    memory = broker["memory"]
    assert memory["limit"] == 4 * MB and 0 < memory["used"] <= memory["limit"], memory
    assert broker["queues"][audit]["pending"] == 1_000
    page = broker["paging"][audit]
    assert page["paged_bytes"] == paged and page["paged"] > 0 and page["full_policy"] == "PAGE", page
    assert page["max_size"] == 1 * MB, page
    assert broker["paging"][ticks]["full_policy"] == "DROP", broker["paging"]

    drain(gateway.address, audit, 1_000)
    assert gateway.metric("jmsgateway_broker_paged_bytes", destination=audit) == 0
    assert gateway.broker_status()["paging"][audit]["paged"] == 0


def test_reaching_a_limit_is_logged_once_per_episode_not_per_message(
        paging_gateway: Callable[..., PagingGateway]) -> None:
    gateway = paging_gateway(memory_limit="2MB")
    before = len(gateway.log().splitlines())
    destination = "/queue/episodes"
    for episode in (1, 2):
        flood(gateway.address, destination, 1_000, 8 * KB, persistent=False)  # 8 MB: four times the limit
        lines = gateway.log().splitlines()[before:]
        reached = [line for line in lines if "memory limit reached" in line]  # the process's memory_limit
        paging = [line for line in lines if f"{destination} reached its memory limit" in line]  # the queue's
        assert len(reached) == episode and len(paging) == episode, "\n".join(lines)
        assert len(lines) < 10 * episode, f"{len(lines)} log lines for {1_000 * episode} SENDs:\n" + "\n".join(lines)
        drain(gateway.address, destination, 1_000)  # the episode ends


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [('"64MB"', 64 * MB), ("67108864", 64 * MB), ('"512KB"', 512 * KB)],
                         ids=["size-string", "integer", "kilobytes"])
def test_memory_limit_can_be_set_on_the_twistd_command_line(
        paging_gateway: Callable[..., PagingGateway], value: str, expected: int) -> None:
    gateway = paging_gateway(args=["--set", f"broker.memory_limit={value}"])
    assert gateway.metric("jmsgateway_broker_memory_limit_bytes") == expected
    assert gateway.broker_status()["memory"]["limit"] == expected


def test_a_bad_memory_limit_stops_startup_naming_the_key(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path / "gw", args=["--set", 'broker.memory_limit="lots"'])
    output = process.start_fails()
    assert "memory_limit" in output and "lots" in output, output
    assert "Traceback" not in output, output
