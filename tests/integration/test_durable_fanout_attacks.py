"""Black-box attacks on the promises durable topic subscriptions make (issue 27, topic fan-out).

Written independently of the change that stores a persistent topic message once for all its
durable subscriptions (a shared body, one row per subscription): these tests know the gateway
only through STOMP, a SIGKILL and, for the leak checks, the SQLite file read after the gateway
stopped, found through ``sqlite_master`` so they hold for the old layout (one copy per
subscription) and the new one alike.  Each takes one promise of docs/stomp.md ("Durable topic
subscriptions", "What the embedded broker guarantees") or docs/persistence.md and breaks the
shared-body bookkeeping the ways a user would: subscribers that ack, NACK to the DLQ, stay away,
unsubscribe, resubscribe with another selector, select nothing; expiry; transactions; crashes
mid-flood; and the same with ``memory_limit = "1MB"`` so the backlogs are paged.

Bodies carry :data:`MARK`, so "the store keeps nothing of them" is checked by looking for it in
every row of every table once each subscriber has acknowledged everything.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from gateway.wire.frame import Frame
from tests.integration.test_paging import (  # noqa: F401  (paging_gateway is a fixture)
    Consumer,
    PagingGateway,
    Producer,
    ReceiptedSender,
    assert_numbered,
    drain,
    paging_gateway,
    send_frame,
    seqs,
)
from tests.support.waiting import wait_until

KB = 1024
MARK = b"FANOUT-ATTACK-BODY"
"""In every body these tests send: a store row holding it still holds a body."""

LIMITS = pytest.mark.parametrize("memory_limit", [None, "1MB"], ids=["in-memory", "paged"])
"""The default memory limit (nothing pages at these sizes) and one the backlogs pass several times."""

Start = Callable[..., PagingGateway]


@pytest.fixture
def gateways(paging_gateway: Start) -> Start:  # noqa: F811 - the fixture imported above
    """Starts gateways with a ``memory_limit`` (tests/integration/test_paging.py's fixture); killed afterwards."""
    return paging_gateway


# -- helpers ---------------------------------------------------------------------------------


def fan_body(seq: int, size: int) -> bytes:
    """``size`` bytes: ``<seq>:`` then :data:`MARK` (so assert_numbered and the leak check both work)."""
    return (f"{seq}:".encode() + MARK).ljust(size, b"x")


def publish(address: tuple[str, int], destination: str, numbers: Iterable[int], size: int = 256, *,
            persistent: bool = True, headers: Callable[[int], dict[str, str]] | None = None) -> None:
    """SEND each numbered message (header ``seq``) pipelined on one connection; returns on the last RECEIPT."""
    numbers = list(numbers)
    producer = Producer(address)
    try:
        frames = [send_frame(destination, fan_body(n, size), seq=str(n),
                             persistent="true" if persistent else "false",
                             **(headers(n) if headers else {}),
                             **({"receipt": "last"} if index == len(numbers) - 1 else {}))
                  for index, n in enumerate(numbers)]
        producer.write(frames)
        error = producer.await_receipt("last")
        assert error is None, f"a SEND to {destination} got an ERROR: {error!r}"
    finally:
        producer.close()


def durable(gateway: PagingGateway, topic: str, client_id: str, name: str = "sub", **kwargs: Any) -> Consumer:
    return Consumer(gateway.address, topic, client_id=client_id, durable=name, **kwargs)


def away(gateway: PagingGateway, topic: str, *client_ids: str, name: str = "sub", **kwargs: Any) -> None:
    """Create durable subscriptions and leave: their backlogs wait for them."""
    for client_id in client_ids:
        durable(gateway, topic, client_id, name, **kwargs).close()
    keys = {f"durable:{client_id}:{name}" for client_id in client_ids}  # (no ':' or '\\' in these names)

    def gone() -> bool:
        durables = gateway.broker_status()["durables"]
        return all(key in durables and not durables[key]["active"] for key in keys)

    # (until the gateway has seen the close, coming back would be a second active subscriber: an ERROR)
    wait_until(gone, 10, f"the durable subscribers {sorted(keys)} to go away")


def everything(gateway: PagingGateway, topic: str, client_id: str, count: int, name: str = "sub",
               timeout: float = 20.0, **kwargs: Any) -> list[Frame]:
    """Connect a durable subscriber (auto ack) and take its whole backlog: ``count`` messages and nothing more."""
    consumer = durable(gateway, topic, client_id, name, **kwargs)
    try:
        if count:
            consumer.take(count, timeout)
        got = consumer.quiet(0.5)
        assert len(got) == count, f"{client_id}: {len(got)} messages where {count} were due: {seqs(got)[:50]}"
        return got
    finally:
        consumer.close()


def ack_all(consumer: Consumer, frames: list[Frame], command: str = "ACK") -> None:
    """ACK (or NACK) each frame (client-individual) in one write; returns on the last one's RECEIPT."""
    assert frames
    data = "".join(f"{command}\nid:{frame.headers['ack']}\n"
                   + ("receipt:all-acked\n" if index == len(frames) - 1 else "") + "\n\x00"
                   for index, frame in enumerate(frames))
    consumer.sock.send(data)
    while True:
        item = consumer.sock.frame(30)
        if item.command == "RECEIPT" and item.headers.get("receipt-id") == "all-acked":
            return
        consumer.keep(item)


def unsubscribe(consumer: Consumer, name: str = "sub") -> None:
    """UNSUBSCRIBE with the subscription-name header: deletes the durable subscription (receipted)."""
    consumer.sock.send(f"UNSUBSCRIBE\nid:s\nactivemq.subscriptionName:{name}\nreceipt:deleted\n\n\x00")
    while True:
        item = consumer.sock.frame(30)
        if item.command == "RECEIPT" and item.headers.get("receipt-id") == "deleted":
            return
        assert item.command == "MESSAGE", f"UNSUBSCRIBE answered {item!r}"


def assert_paged(gateway: PagingGateway, memory_limit: str | None) -> None:
    """With a memory limit, the durable subscriptions' backlogs are paged out (the paged variant pages)."""
    if memory_limit:
        paging = gateway.broker_status()["paging"]
        assert any(page["paged"] for key, page in paging.items() if key.startswith("durable:")), paging


def barrier(gateway: PagingGateway) -> None:
    """A persistent SEND and its ACK, both receipted: the store applies writes in the order they were
    issued (docs/persistence.md), so once this returns it holds whatever the broker wrote before,
    such as the raised redelivery count of a message handed to a client-ack subscriber."""
    publish(gateway.address, "/queue/attack.barrier", [0])
    consumer = Consumer(gateway.address, "/queue/attack.barrier", ack="client-individual")
    consumer.ack_frame("ACK", consumer.take(1)[0])
    consumer.close()


def crash(gateway: PagingGateway) -> None:
    """SIGKILL, then start again on the same data."""
    gateway.kill()
    gateway.start()


def store_rows(gateway: PagingGateway) -> dict[str, list[bytes]]:
    """Every row of every table of the stopped gateway's message store, each row's columns joined as bytes.

    The store's files are copied first (the WAL with them), so the file the gateway will open
    again is not touched; table names come from ``sqlite_master``, whatever the layout."""
    assert gateway.process.process is None or gateway.process.process.poll() is not None, "stop it first"
    files = list(gateway.process.data_dir.glob("broker.sqlite*"))
    assert any(path.name == "broker.sqlite" for path in files), f"no message store in {gateway.process.data_dir}"
    with tempfile.TemporaryDirectory() as copy:
        for path in files:
            shutil.copy(path, Path(copy) / path.name)
        db = sqlite3.connect(Path(copy) / "broker.sqlite")
        try:
            tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {table: [b"\x00".join(value if isinstance(value, bytes) else str(value).encode() for value in row)
                            for row in db.execute(f'SELECT * FROM "{table}"')] for table in tables}
        finally:
            db.close()


def rows_holding(gateway: PagingGateway, needle: bytes = MARK) -> dict[str, int]:
    """Per table of the stopped gateway's store: how many rows hold ``needle`` (by default: a body)."""
    counts = {table: sum(needle in row for row in rows) for table, rows in store_rows(gateway).items()}
    return {table: count for table, count in counts.items() if count}


def assert_store_holds_no_body(gateway: PagingGateway, what: str, topic: str) -> None:
    """Stop the gateway; its store holds no body, and every row left names ``topic`` (a durable
    subscription's record): no row of a message (a per-subscription reference, a count) outlives it."""
    gateway.stop()
    rows = store_rows(gateway)
    leaked = {table: count for table, count in
              ((table, sum(MARK in row for row in found)) for table, found in rows.items()) if count}
    assert not leaked, f"{what}, yet the store still holds bodies: rows per table {leaked}"
    strays = {table: [row[:120] for row in found if topic.encode() not in row][:3] for table, found in rows.items()}
    strays = {table: found for table, found in strays.items() if found}
    assert not strays, f"{what}, yet the store holds rows that are no subscription of {topic}: {strays}"


def assert_in_order(frames: list[Frame], expected: list[int], who: str, size: int) -> None:
    got = seqs(frames)
    assert got == expected, f"{who}: got {got[:60]}{'…' if len(got) > 60 else ''}, expected {expected[:60]}"
    assert_numbered(frames, size)


# -- 1. a SIGKILL in the middle of a flood -----------------------------------------------------


class LiveReader(threading.Thread):
    """A connected durable subscriber (ack:client) that ACKs cumulatively every 25 messages
    while a flood goes on; ``acked`` is how many of its first messages a RECEIPT confirmed gone,
    ``ack_sent`` how many its last ACK (receipted or not) covered."""

    def __init__(self, gateway: PagingGateway, topic: str, client_id: str) -> None:
        super().__init__(daemon=True)
        self.consumer = durable(gateway, topic, client_id, ack="client", prefetch=200)
        self.acked = self.ack_sent = 0
        self.halt = threading.Event()

    def run(self) -> None:
        sock = self.consumer.sock
        try:
            while not self.halt.is_set() and not sock.closed:
                item = sock.item(0.2)
                if not isinstance(item, Frame):
                    continue
                if item.command == "RECEIPT":
                    self.acked = max(self.acked, int(item.headers["receipt-id"]))
                    continue
                self.consumer.keep(item)
                received = len(self.consumer.messages)
                if received % 25 == 0:
                    sock.send(f"ACK\nid:{item.headers['ack']}\nreceipt:{received}\n\n\x00")
                    self.ack_sent = received
        except OSError:  # the gateway died
            return


@LIMITS
def test_a_sigkill_mid_flood_loses_no_receipted_message_for_any_durable_subscriber(
        gateways: Start, memory_limit: str | None) -> None:
    """Two connected subscribers acknowledging as they go, two away, one that comes back while the
    flood goes on (its stored backlog, then the live messages); a receipted flood; SIGKILL in the
    middle. Each subscriber got its messages in order, without a gap, before the crash; after the
    restart every one has every receipted message, once, in order: the away ones all of it, the
    connected ones what their receipted ACKs did not remove."""
    gateway = gateways(memory_limit=memory_limit)
    topic, size = "/topic/attack.crash", 2 * KB
    away(gateway, topic, "away-1", "away-2", "live-2")
    readers = [LiveReader(gateway, topic, f"live-{index}") for index in range(2)]
    for reader in readers:
        reader.start()
    sender = ReceiptedSender(gateway.address, topic, size)
    sender.start()
    wait_until(lambda: sender.receipted >= 400, 60, "400 receipted messages")
    readers.append(LiveReader(gateway, topic, "live-2"))
    readers[-1].start()
    wait_until(lambda: sender.receipted >= 800, 60, "800 receipted messages")
    assert_paged(gateway, memory_limit)
    gateway.kill()
    sender.join(30)
    for reader in readers:
        reader.halt.set()
        reader.join(30)
    receipted = sender.receipted
    gateway.start()

    for client_id in ("away-1", "away-2"):
        consumer = durable(gateway, topic, client_id)
        consumer.take(receipted)
        got = consumer.quiet(0.5)
        consumer.close()
        assert_in_order(got, list(range(len(got))), client_id, size)
    for index, reader in enumerate(readers):
        before = seqs(reader.consumer.messages)
        assert before == list(range(len(before))), f"live-{index} before the crash: {before[:50]}"
        consumer = durable(gateway, topic, f"live-{index}")
        consumer.take(max(0, receipted - reader.ack_sent))
        after = consumer.quiet(0.5)
        consumer.close()
        first = seqs(after)[0] if after else len(before)
        assert reader.acked <= first <= reader.ack_sent, (
            f"live-{index}: after the restart its backlog starts at {first}; its receipted ACKs covered "
            f"{reader.acked}, its last ACK {reader.ack_sent}")
        assert_in_order(after, list(range(first, first + len(after))), f"live-{index} after the restart", size)
        assert first + len(after) >= receipted, (
            f"live-{index} lost receipted messages: it has {first + len(after)} of {receipted}")


# -- 2. one acks, one stays away, one dead-letters --------------------------------------------


@LIMITS
def test_one_subscribers_ack_or_dead_letter_does_not_take_the_others_copies(
        gateways: Start, memory_limit: str | None) -> None:
    """acker ACKs all, idle receives and leaves without an ACK, nacker NACKs messages 0 and 1 until
    they go to the DLQ (message 0 after acker ACKed it, message 1 before). After a SIGKILL idle
    still has all of them with their bodies, the DLQ holds 0 and 1 once each, and once everything
    is acknowledged the store holds no body."""
    gateway = gateways(memory_limit=memory_limit, args=["--set", "broker.max_redeliveries=2"])
    topic, count = "/topic/attack.dlq", 20
    size = 64 * KB if memory_limit else 512  # paged: 1.3 MB per subscription
    for client_id in ("acker", "idle", "nacker"):
        away(gateway, topic, client_id)
    publish(gateway.address, topic, range(count), size)
    assert_paged(gateway, memory_limit)

    acker = durable(gateway, topic, "acker", ack="client-individual")
    acker_got = acker.take(count)
    ack_all(acker, acker_got[:1])

    nacker = durable(gateway, topic, "nacker", ack="client-individual", prefetch=1)
    position = 0
    while True:
        message = nacker.take(position + 1)[position]
        position += 1
        nacker.ack_frame("NACK" if int(message.headers["seq"]) < 2 else "ACK", message)
        if message.headers["seq"] == str(count - 1):
            break
    assert seqs(nacker.quiet(0.3)) == [0, 0, 0, 1, 1, 1, *range(2, count)]
    nacker.close()
    ack_all(acker, acker_got[1:])
    acker.close()

    idle = durable(gateway, topic, "idle", ack="client-individual")
    assert_in_order(idle.take(count), list(range(count)), "idle before the crash", size)
    idle.close()
    barrier(gateway)  # (the count each delivery raised is stored after the MESSAGE left)

    crash(gateway)
    idle = durable(gateway, topic, "idle", ack="client-individual")
    kept = idle.take(count)
    assert_in_order(idle.quiet(0.5), list(range(count)), "idle after the crash", size)
    assert all(frame.headers.get("redelivered") == "true" for frame in kept), [f.headers for f in kept[:3]]
    assert everything(gateway, topic, "acker", 0) == []
    assert everything(gateway, topic, "nacker", 0) == []
    dead = drain(gateway.address, "/queue/DLQ.attack.dlq", 2, timeout=10)
    assert_in_order(dead, [0, 1], "the DLQ", size)
    assert all("dlqDeliveryFailureCause" in frame.headers for frame in dead), dead[0].headers
    ack_all(idle, kept)
    idle.close()
    assert_store_holds_no_body(gateway, "every subscriber acknowledged everything and the DLQ was drained", topic)


# -- 3. UNSUBSCRIBE while others have backlog -------------------------------------------------


@LIMITS
def test_a_deleted_durable_subscription_leaves_the_others_intact_and_comes_back_empty(
        gateways: Start, memory_limit: str | None) -> None:
    gateway = gateways(memory_limit=memory_limit)
    topic, count, size = "/topic/attack.unsub", 300, 4 * KB  # 1.2 MB per subscription
    away(gateway, topic, "stays-1", "stays-2", "leaves")
    publish(gateway.address, topic, range(count), size)
    assert_paged(gateway, memory_limit)
    leaving = durable(gateway, topic, "leaves", ack="client-individual", prefetch=1)
    leaving.take(1)  # one delivery out, unacknowledged; the rest of its backlog stored
    unsubscribe(leaving)
    leaving.close()
    publish(gateway.address, topic, range(count, count + 10), size)
    first = everything(gateway, topic, "stays-1", count + 10)
    assert_in_order(first, list(range(count + 10)), "stays-1", size)

    crash(gateway)
    assert everything(gateway, topic, "leaves", 0) == [], "the deleted subscription's backlog was resurrected"
    assert everything(gateway, topic, "stays-1", 0) == []
    second = everything(gateway, topic, "stays-2", count + 10)
    assert_in_order(second, list(range(count + 10)), "stays-2", size)
    # the name, created afresh above, gets what is sent from now on, and only that
    publish(gateway.address, topic, range(count + 10, count + 15), size)
    crash(gateway)
    for client_id in ("leaves", "stays-1", "stays-2"):
        again = everything(gateway, topic, client_id, 5)
        assert_in_order(again, list(range(count + 10, count + 15)), f"{client_id} after the second crash", size)
    assert_store_holds_no_body(gateway, "two subscriptions drained and the third was deleted", topic)


# -- 4. expiry ----------------------------------------------------------------------------------


@LIMITS
def test_expired_messages_reach_no_away_durable_subscriber_and_the_unexpired_survive_restart(
        gateways: Start, memory_limit: str | None) -> None:
    """Half the messages expire 5 s after they are sent. An active subscriber takes all at once; a
    holder takes all and ACKs them only after they expired; one away subscriber comes back after the
    expiry, another only after a SIGKILL: both get the unexpired half only, and no body is left."""
    gateway = gateways(memory_limit=memory_limit)
    topic, count, size = "/topic/attack.expiry", 300, 4 * KB
    away(gateway, topic, "before-restart", "after-restart")
    active = durable(gateway, topic, "active")
    holder = durable(gateway, topic, "holder", ack="client-individual", prefetch=count)
    expires = int(time.time() * 1000) + 5000
    started = time.monotonic()
    publish(gateway.address, topic, range(count), size,
            headers=lambda n: {"expires": str(expires)} if n % 2 == 0 else {})
    active.take(count, timeout=20)
    held = holder.take(count, timeout=20)
    assert time.monotonic() - started < 4.5, "too slow to test expiry: the active subscribers were late"
    assert_in_order(active.quiet(0.2), list(range(count)), "the active subscriber", size)
    assert_in_order(held, list(range(count)), "the holder", size)
    active.close()
    time.sleep(max(0.0, expires / 1000 - time.time()) + 0.5)
    ack_all(holder, held)  # ACKs of deliveries that expired meanwhile
    holder.close()

    live = everything(gateway, topic, "before-restart", count // 2)
    assert_in_order(live, list(range(1, count, 2)), "the away subscriber after the expiry", size)
    crash(gateway)
    assert everything(gateway, topic, "before-restart", 0) == []
    assert everything(gateway, topic, "active", 0) == []
    assert everything(gateway, topic, "holder", 0) == []
    late = everything(gateway, topic, "after-restart", count // 2)
    assert_in_order(late, list(range(1, count, 2)), "the away subscriber after the restart", size)
    assert_store_holds_no_body(gateway, "the unexpired messages were all received and the others expired", topic)


# -- 5. transactions ------------------------------------------------------------------------------


@LIMITS
def test_only_committed_topic_sends_reach_durable_subscribers_across_a_crash(
        gateways: Start, memory_limit: str | None) -> None:
    """Two transactions interleaved on one connection, one ABORTed and one COMMITted, a third left
    open at the SIGKILL, then a plain SEND: the subscribers get exactly the committed and the plain."""
    gateway = gateways(memory_limit=memory_limit)
    topic, count, size = "/topic/attack.tx", 100, 16 * KB  # 50 committed: 800 KB per subscription
    away(gateway, topic, "away")
    connected = durable(gateway, topic, "connected", ack="client-individual")
    producer = Producer(gateway.address)
    try:
        def tx_send(n: int, tx: str) -> bytes:
            return send_frame(topic, fan_body(n, size), seq=str(n), persistent="true", transaction=tx)

        producer.write([b"BEGIN\ntransaction:t1\n\n\x00", b"BEGIN\ntransaction:t2\n\n\x00",
                        b"BEGIN\ntransaction:t3\n\n\x00"])
        producer.write(tx_send(n, "t2" if n % 2 else "t1") for n in range(count))
        producer.write(tx_send(n, "t3") for n in range(count, count + 20))
        producer.write([b"ABORT\ntransaction:t1\nreceipt:aborted\n\n\x00",
                        b"COMMIT\ntransaction:t2\nreceipt:committed\n\n\x00",
                        send_frame(topic, fan_body(count + 20, size), seq=str(count + 20), persistent="true",
                                   receipt="plain")])
        for receipt in ("aborted", "committed", "plain"):
            assert producer.await_receipt(receipt) is None, producer.errors
        expected = [*range(1, count, 2), count + 20]
        connected.take(len(expected))
        assert_in_order(connected.quiet(0.3), expected, "the connected subscriber", size)
        barrier(gateway)  # (the count each delivery raised is stored after the MESSAGE left)
        gateway.kill()  # t3 still open
    finally:
        producer.close()
        connected.close()
    gateway.start()
    assert_in_order(everything(gateway, topic, "away", len(expected)), expected, "the away subscriber", size)
    again = everything(gateway, topic, "connected", len(expected))
    assert_in_order(again, expected, "the connected subscriber after the crash", size)
    assert all(frame.headers.get("redelivered") == "true" for frame in again), again[0].headers
    assert_store_holds_no_body(gateway, "both subscribers received every committed message", topic)


# -- 6. client-individual acks out of order, then a SIGKILL -------------------------------------


@LIMITS
def test_out_of_order_individual_acks_and_a_crash_redeliver_only_to_that_subscriber(
        gateways: Start, memory_limit: str | None) -> None:
    gateway = gateways(memory_limit=memory_limit)
    topic, count, size = "/topic/attack.individual", 300, 4 * KB
    away(gateway, topic, "away")
    picky = durable(gateway, topic, "picky", ack="client-individual", prefetch=count)
    thorough = durable(gateway, topic, "thorough", ack="client-individual", prefetch=count)
    plain = Consumer(gateway.address, topic, ack="client-individual", prefetch=count)  # not durable
    publish(gateway.address, topic, range(count), size)
    assert_paged(gateway, memory_limit)
    picked = picky.take(count)
    odd = [frame for frame in reversed(picked) if int(frame.headers["seq"]) % 2]
    for frame in odd[:10]:  # some one at a time, last first
        picky.ack_frame("ACK", frame)
    ack_all(picky, odd[10:])
    ack_all(thorough, thorough.take(count))
    ack_all(plain, list(reversed(plain.take(count))))
    gateway.kill()
    for consumer in (picky, thorough, plain):
        consumer.close()
    gateway.start()

    back = everything(gateway, topic, "picky", count // 2)
    assert_in_order(back, list(range(0, count, 2)), "picky after the crash", size)
    assert all(frame.headers.get("redelivered") == "true" for frame in back), back[0].headers
    assert everything(gateway, topic, "thorough", 0) == []
    untouched = everything(gateway, topic, "away", count)
    assert_in_order(untouched, list(range(count)), "the away subscriber", size)
    assert not any(frame.headers.get("redelivered") for frame in untouched), "away got redelivered messages"
    assert_store_holds_no_body(gateway, "every subscriber acknowledged everything", topic)


@LIMITS
def test_acknowledgements_split_across_two_crashes_leave_each_subscriber_exactly_its_rest(
        gateways: Start, memory_limit: str | None) -> None:
    """Three subscribers each acknowledge a different third before a SIGKILL and another third
    after it, then a second SIGKILL: each gets exactly its own last third (what is shared must be
    counted right after a recovery as well as before)."""
    gateway = gateways(memory_limit=memory_limit)
    topic, count, size = "/topic/attack.thirds", 300, 4 * KB
    readers = ["r0", "r1", "r2"]
    away(gateway, topic, *readers)
    publish(gateway.address, topic, range(count), size)
    assert_paged(gateway, memory_limit)
    third = count // 3

    acked = dict.fromkeys(readers, 0)

    def ack_third(reader: str, part: int) -> None:
        consumer = durable(gateway, topic, reader, ack="client-individual", prefetch=count)
        consumer.take(count - acked[reader])
        frames = consumer.quiet(0.3)
        assert len(frames) == count - acked[reader], f"{reader}: {len(frames)} messages after {acked[reader]} acked"
        mine = [frame for frame in frames if int(frame.headers["seq"]) // third == part]
        assert len(mine) == third, f"{reader}: {len(mine)} messages of third {part}: {seqs(frames)[:40]}"
        ack_all(consumer, mine)
        consumer.close()
        acked[reader] += third

    for index, reader in enumerate(readers):
        ack_third(reader, index)
    crash(gateway)
    for index, reader in enumerate(readers):
        ack_third(reader, (index + 1) % 3)
    crash(gateway)
    for index, reader in enumerate(readers):
        rest = (index + 2) % 3
        got = everything(gateway, topic, reader, third)
        assert_in_order(got, list(range(rest * third, (rest + 1) * third)), reader, size)
    assert_store_holds_no_body(gateway, "each subscriber acknowledged every third", topic)


def test_redelivery_counts_and_dead_lettering_are_per_subscription(gateways: Start) -> None:
    """max_redeliveries 2: one subscriber NACKs message 0 twice and is cut off by a SIGKILL during its
    third delivery (the crash counts as the third failure, docs/persistence.md), so the restart
    dead-letters it for that subscriber; the other subscriber's copy is neither dead-lettered nor
    marked redelivered."""
    gateway = gateways(args=["--set", "broker.max_redeliveries=2"])
    topic, size = "/topic/attack.counts", 512
    away(gateway, topic, "fails", "fresh")
    publish(gateway.address, topic, range(3), size)
    failing = durable(gateway, topic, "fails", ack="client-individual", prefetch=1)
    for position in range(2):
        failing.ack_frame("NACK", failing.take(position + 1)[position])
    third = failing.take(3)[2]
    assert (third.headers["seq"], third.headers.get("redelivered")) == ("0", "true"), third.headers
    barrier(gateway)  # (the count each delivery raised is stored after the MESSAGE left)
    gateway.kill()
    failing.close()
    gateway.start()
    dead = drain(gateway.address, "/queue/DLQ.attack.counts", 1, timeout=10)
    assert_in_order(dead, [0], "the DLQ", size)
    fresh = everything(gateway, topic, "fresh", 3)
    assert_in_order(fresh, [0, 1, 2], "the other subscriber", size)
    assert not any(frame.headers.get("redelivered") for frame in fresh), [frame.headers for frame in fresh]
    assert_in_order(everything(gateway, topic, "fails", 2), [1, 2], "the failing subscriber", size)
    assert_store_holds_no_body(gateway, "the DLQ and both subscribers were drained", topic)


# -- 7. the store does not leak -----------------------------------------------------------------


@LIMITS
def test_the_store_keeps_no_body_once_every_durable_subscriber_has_everything(
        gateways: Start, memory_limit: str | None) -> None:
    """Four subscriptions, a flood past the limit, a graceful restart in between: the bodies are in
    the store until the last subscriber acknowledges them (checked: the check can see them), then gone."""
    gateway = gateways(memory_limit=memory_limit)
    topic, count, size = "/topic/attack.leak", 400, 4 * KB
    readers = [f"reader-{index}" for index in range(4)]
    away(gateway, topic, *readers)
    publish(gateway.address, topic, range(count), size)
    assert_paged(gateway, memory_limit)
    gateway.stop()
    held = rows_holding(gateway)
    assert sum(held.values()) >= count, f"the store holds {held} rows with the bodies of {count} messages"
    gateway.start()
    for reader in readers[:3]:
        assert_in_order(everything(gateway, topic, reader, count), list(range(count)), reader, size)
    gateway.stop()
    held = rows_holding(gateway)
    assert sum(held.values()) >= count, f"reader-3 still waits for {count} messages; the store holds {held}"
    gateway.start()
    last = durable(gateway, topic, readers[3], ack="client")
    frames = last.take(count)
    last.ack_frame("ACK", frames[-1])  # cumulative
    last.close()
    assert_in_order(frames, list(range(count)), readers[3], size)
    assert_store_holds_no_body(gateway, "all four subscribers acknowledged every message", topic)


# -- 8. what else an ActiveMQ user does with durable subscribers --------------------------------


def test_the_same_subscription_name_under_two_client_ids_is_two_subscriptions(gateways: Start) -> None:
    gateway = gateways()
    topic, count, size = "/topic/attack.names", 30, 512
    away(gateway, topic, "client-a", "client-b", name="orders")
    publish(gateway.address, topic, range(count), size)
    assert_in_order(everything(gateway, topic, "client-a", count, name="orders"), list(range(count)), "a", size)
    crash(gateway)
    assert everything(gateway, topic, "client-a", 0, name="orders") == []
    assert_in_order(everything(gateway, topic, "client-b", count, name="orders"), list(range(count)), "b", size)
    assert_store_holds_no_body(gateway, "both subscriptions drained", topic)


@LIMITS
def test_selective_durable_subscribers_keep_only_their_matches_alive(
        gateways: Start, memory_limit: str | None) -> None:
    """A subscription selecting red, one selecting nothing that is ever sent, one taking all: the
    unselected messages must not outlive the subscriber that takes them, across a crash."""
    gateway = gateways(memory_limit=memory_limit)
    topic, count, size = "/topic/attack.selector", 400, 4 * KB
    away(gateway, topic, "all")
    away(gateway, topic, "reds", selector="color = 'red'")
    away(gateway, topic, "greens", selector="color = 'green'")
    publish(gateway.address, topic, range(count), size,
            headers=lambda n: {"color": "red" if n % 4 == 0 else "blue"})
    assert_in_order(everything(gateway, topic, "all", count), list(range(count)), "all", size)
    crash(gateway)
    reds = everything(gateway, topic, "reds", count // 4, selector="color = 'red'")
    assert_in_order(reds, list(range(0, count, 4)), "reds", size)
    assert everything(gateway, topic, "greens", 0, selector="color = 'green'") == []
    assert_store_holds_no_body(gateway, "the only subscribers that selected the messages received them", topic)


@LIMITS
def test_resubscribing_with_another_selector_drops_the_old_backlog_but_not_the_others(
        gateways: Start, memory_limit: str | None) -> None:
    """As in ActiveMQ, a durable subscriber coming back with another selector starts afresh: its old
    backlog is gone (also after a restart) while another subscriber's copies stay."""
    gateway = gateways(memory_limit=memory_limit)
    topic, count, size = "/topic/attack.reselect", 300, 4 * KB
    away(gateway, topic, "changes", "keeps")
    publish(gateway.address, topic, range(count), size, headers=lambda n: {"color": "red"})
    assert everything(gateway, topic, "changes", 0, selector="color = 'red'") == [], "the old backlog stayed"
    publish(gateway.address, topic, range(count, count + 4), size,
            headers=lambda n: {"color": "blue" if n % 2 else "red"})
    crash(gateway)
    fresh = everything(gateway, topic, "changes", 2, selector="color = 'red'")
    assert_in_order(fresh, [count, count + 2], "the resubscribed subscriber", size)
    kept = everything(gateway, topic, "keeps", count + 4)
    assert_in_order(kept, list(range(count + 4)), "the other subscriber", size)
    assert_store_holds_no_body(gateway, "the old backlog was dropped and the other subscriber drained", topic)


def test_priorities_persistence_and_a_large_body_in_durable_backlogs_across_a_crash(gateways: Start) -> None:
    """Mixed priorities and persistence to three away subscribers, one 1 MB body: after a SIGKILL
    each gets the persistent ones by priority then FIFO, the non-persistent ones are gone."""
    gateway = gateways(memory_limit="1MB")
    topic, count, size = "/topic/attack.mixed", 60, 2 * KB
    readers = ["p-1", "p-2", "p-3"]
    away(gateway, topic, *readers)
    priorities = {n: (n * 7) % 10 for n in range(count)}
    persistent = [n for n in range(count) if n % 3]
    publish(gateway.address, topic, persistent, size, headers=lambda n: {"priority": str(priorities[n])})
    publish(gateway.address, topic, [n for n in range(count) if n % 3 == 0], size, persistent=False,
            headers=lambda n: {"priority": str(priorities[n])})
    publish(gateway.address, topic, [count], 1024 * KB, headers=lambda n: {"priority": "0"})
    crash(gateway)
    expected = sorted(persistent, key=lambda n: (-priorities[n], n))
    for reader in readers:
        got = everything(gateway, topic, reader, len(expected) + 1)
        assert_in_order(got[:-1], expected, reader, size)
        assert_in_order(got[-1:], [count], f"{reader}'s large message", 1024 * KB)
    assert_store_holds_no_body(gateway, "all three subscribers received everything", topic)


def test_a_full_drop_topic_discards_only_for_the_full_subscription_and_stores_nothing_for_it(
        gateways: Start) -> None:
    """full_policy DROP on a topic judges each subscription's backlog on its own (docs/paging.md): an
    away subscriber whose backlog is full loses the later messages, a keeping-up one gets them all;
    after a SIGKILL the away one has exactly a prefix (nothing dropped comes back from the store),
    and once both have everything no body is left."""
    topic, size = "/topic/attack.drop", KB
    gateway = gateways(destinations={topic: {"max_size": "64KB", "full_policy": "DROP"}})
    away(gateway, topic, "slow")
    fast = durable(gateway, topic, "fast")
    for batch in range(20):  # receipted batches of 10 KB: the fast backlog never fills
        publish(gateway.address, topic, range(batch * 10, batch * 10 + 10), size)
        fast.take(batch * 10 + 10, timeout=20)
    assert_in_order(fast.quiet(0.3), list(range(200)), "the fast subscriber", size)
    fast.close()
    crash(gateway)
    slow = durable(gateway, topic, "slow")
    kept = list(slow.quiet(0.5))
    slow.close()
    assert 0 < len(kept) < 200, f"the slow subscriber kept {len(kept)} of 200 messages past a 64 KB max_size"
    assert_in_order(kept, list(range(len(kept))), "the slow subscriber", size)
    assert everything(gateway, topic, "fast", 0) == []
    assert_store_holds_no_body(gateway, "both subscribers took what they kept", topic)


def test_many_durable_subscribers_half_drained_before_a_crash_half_after(gateways: Start) -> None:
    """12 subscriptions share each message: the first half take their backlog, a SIGKILL, the
    other half take theirs in full and the first half get nothing again; then no body is left."""
    gateway = gateways(memory_limit="1MB")
    topic, count, size = "/topic/attack.many", 40, 2 * KB
    readers = [f"many-{index:02}" for index in range(12)]
    away(gateway, topic, *readers)
    publish(gateway.address, topic, range(count), size)
    for reader in readers[::2]:
        assert_in_order(everything(gateway, topic, reader, count), list(range(count)), reader, size)
    crash(gateway)
    for reader in readers:
        expected = [] if reader in readers[::2] else list(range(count))
        assert_in_order(everything(gateway, topic, reader, len(expected)), expected, reader, size)
    assert_store_holds_no_body(gateway, "every subscriber took every message", topic)
