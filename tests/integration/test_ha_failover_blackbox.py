"""Black-box failover: producer and consumer clients with host lists, persistent traffic with receipts,
SIGKILL of the active gateway three times in a row (the killed one comes back as the standby), counts
by message id at the end.

The producer sends persistent SENDs with receipts and, after a disconnect, reconnects through its
host list and resends what was not receipted; the consumer acknowledges each message
(client-individual) with a receipt and subscribes again after each reconnect.  At the end a drain
takes what is left.  Every receipted message was acknowledged (an ACK written: one whose receipt
did not come before a kill may have been applied) or drained: none is lost.  An acknowledgement
that was receipted is never followed by the same message again.  A message delivered again after
a takeover is flagged ``redelivered``.  The producer marks each message with ``x-dedup-id`` (its
body), so a resend of a SEND that was stored but not receipted is acknowledged and not stored twice:
no message is delivered again except as a flagged redelivery (issue 35 #2).
"""

from __future__ import annotations

import collections
import queue
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import stomp

from tests.support.gateway import GatewayProcess
from tests.support.standby import accepts, gateway_pair, launch, role
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

QUEUE = "/queue/ha.blackbox"
KILLS = 3


class Failover(stomp.ConnectionListener):
    """Receipts, messages and disconnects of one host-list connection."""

    def __init__(self) -> None:
        self.receipts: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.messages: list[Any] = []
        self.arrived = threading.Condition(self.lock)
        self.lost = threading.Event()

    def expect(self, receipt: str) -> threading.Event:
        with self.lock:
            event = self.receipts[receipt] = threading.Event()
        return event

    def on_receipt(self, frame: Any) -> None:
        with self.lock:
            event = self.receipts.pop(frame.headers.get("receipt-id"), None)
        if event is not None:
            event.set()

    def on_message(self, frame: Any) -> None:
        with self.arrived:
            self.messages.append(frame)
            self.arrived.notify()

    def on_disconnected(self) -> None:
        self.lost.set()


def connect(addresses: list[tuple[str, int]]) -> tuple[Any, Failover]:
    connection: Any = stomp.Connection12(addresses, reconnect_sleep_initial=0.1, reconnect_sleep_increase=0.0,
                                         reconnect_sleep_max=0.3, reconnect_attempts_max=600, auto_decode=True)
    listener = Failover()
    connection.set_listener("failover", listener)
    connection.connect(wait=True)
    return connection, listener


def receipted(connection: Any, listener: Failover, send: Any, timeout: float = 10.0) -> bool:
    """Run ``send(receipt_id)``; whether its RECEIPT came before the connection was lost."""
    receipt = uuid.uuid4().hex
    event = listener.expect(receipt)
    try:
        send(receipt)
    except Exception:  # (the connection died under the send)
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if event.wait(0.05):
            return True
        if listener.lost.is_set():
            return event.is_set()
    return False


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: collections.Counter[str] = collections.Counter()
        self.receipted: set[str] = set()
        self.acked: set[str] = set()
        """Acknowledged with a receipt."""
        self.ack_sent: set[str] = set()
        """ACK written (the gateway may have applied it and died before its receipt)."""
        self.deliveries: list[tuple[str, bool, bool]] = []
        """(body, flagged redelivered, its ack was receipted before this delivery)"""
        self.stop = threading.Event()


def reconnected(connection: Any, listener: Any, then: Any = None) -> bool:
    """Connect again through the host list (the next gateway that accepts) and run ``then()`` (a SUBSCRIBE);
    False, with the connection still marked lost, when that failed (a gateway dying under the attempt, a
    loaded host): the caller tries again instead of its thread ending."""
    listener.lost.clear()
    try:
        connection.connect(wait=True)
        if then is not None:
            then()
    except (stomp.exception.ConnectFailedException, stomp.exception.NotConnectedException, OSError):
        listener.lost.set()
        time.sleep(0.2)
        return False
    return True


def produce(addresses: list[tuple[str, int]], ledger: Ledger) -> None:
    connection, listener = connect(addresses)
    pending: list[str] = []
    number = 0
    while not ledger.stop.is_set():
        if listener.lost.is_set() and not reconnected(connection, listener):
            continue
        if pending:
            body = pending.pop()
        else:
            body, number = f"m-{number}", number + 1
        with ledger.lock:
            ledger.sent[body] += 1
        ok = receipted(connection, listener, lambda receipt, b=body: connection.send(
            QUEUE, b, headers={"persistent": "true", "receipt": receipt, "x-dedup-id": b}))
        if ok:
            with ledger.lock:
                ledger.receipted.add(body)
        else:
            pending.append(body)
    connection.disconnect()


def consume(addresses: list[tuple[str, int]], ledger: Ledger) -> None:
    connection, listener = connect(addresses)
    connection.subscribe(QUEUE, "c", ack="client-individual", headers={"activemq.prefetchSize": "5"})
    while not ledger.stop.is_set():
        if listener.lost.is_set():
            with listener.lock:
                listener.messages.clear()  # (their acks would name a dead session's deliveries)
            if not reconnected(connection, listener, lambda: connection.subscribe(
                    QUEUE, "c", ack="client-individual", headers={"activemq.prefetchSize": "5"})):
                continue
        with listener.arrived:
            if not listener.messages:
                listener.arrived.wait(0.1)
                continue
            frame = listener.messages.pop(0)
        body = frame.body
        with ledger.lock:
            ledger.deliveries.append((body, frame.headers.get("redelivered") == "true", body in ledger.acked))
            ledger.ack_sent.add(body)
        ok = receipted(connection, listener, lambda receipt, f=frame: connection.ack(
            f.headers["ack"], receipt=receipt))
        if ok:
            with ledger.lock:
                ledger.acked.add(body)
    connection.disconnect()


def test_three_sigkills_in_a_row_lose_no_receipted_message(tmp_path: Path) -> None:
    first, first_admin, second, second_admin = gateway_pair(tmp_path)
    addresses = [first.address, second.address]
    ledger = Ledger()
    threads = [threading.Thread(target=work, args=(addresses, ledger), daemon=True) for work in (produce, consume)]
    active: tuple[GatewayProcess, int] = (first, first_admin)
    standby: tuple[GatewayProcess, int] = (second, second_admin)
    takeovers: list[float] = []
    try:
        for thread in threads:
            thread.start()
        for _ in range(KILLS):
            floor = len(ledger.receipted) + 100

            def receipted_past(floor: int = floor) -> bool:
                return len(ledger.receipted) >= floor

            wait_until(receipted_past, 60, "100 more receipted SENDs")
            assert active[0].process is not None
            active[0].process.kill()
            killed = time.monotonic()
            active[0].process.wait(15)
            wait_until(partial(accepts, standby[0].port), 60, "the standby's STOMP listener")
            takeovers.append(time.monotonic() - killed)
            launch(active[0])  # the killed one comes back as the standby

            def restarted_as_standby(admin_port: int = active[1]) -> bool:
                return role(admin_port) == "standby"

            wait_until(restarted_as_standby, 60, "the restarted gateway as standby")
            active, standby = standby, active
        floor = len(ledger.receipted) + 100
        wait_until(lambda: len(ledger.receipted) >= floor, 60, "100 more receipted SENDs after the last takeover")
        ledger.stop.set()
        for thread in threads:
            thread.join(30)
        drain = Client(active[0].address)
        drain.subscribe(QUEUE, "d")
        drained = [frame.body.decode() for frame in _everything(drain)]
        drain.disconnect()
    finally:
        first.kill()
        second.kill()
    print(f"\ntakeovers after SIGKILL (s): {', '.join(f'{t:.2f}' for t in takeovers)}; "
          f"sent {len(ledger.sent)}, receipted {len(ledger.receipted)}, acked {len(ledger.acked)}, "
          f"drained {len(drained)}, deliveries {len(ledger.deliveries)}")
    resent = {body for body, count in ledger.sent.items() if count > 1}
    print(f"resent (not receipted before a kill): {len(resent)}")
    lost = ledger.receipted - ledger.ack_sent - set(drained)
    assert not lost, (f"receipted and lost: {sorted(lost)[:20]}; their deliveries: "
                      f"{[d for d in ledger.deliveries if d[0] in lost]}, sends: {[ledger.sent[b] for b in lost]}")
    came_back = {body for body, _, after_ack in ledger.deliveries if after_ack} | (set(drained) & ledger.acked)
    assert not came_back, f"acknowledged (receipted) and delivered again: {sorted(came_back)[:20]}"
    seen: set[str] = set()
    unflagged = []
    for body, flagged, _ in ledger.deliveries:
        if body in seen and not flagged:
            unflagged.append(body)
        seen.add(body)
    # (docs/persistence.md: the delivery's redelivery count is written without waiting, so a SIGKILL
    # before that write commits redelivers the message unflagged: the last deliveries before a kill only)
    print(f"delivered again without redelivered:true (the documented window before a kill): {unflagged}")
    assert len(unflagged) <= 2 * KILLS, f"delivered again without redelivered:true: {unflagged[:20]}"
    assert len(drained) == len(set(drained)), "a message left twice in the queue"
    assert len(takeovers) == KILLS


def _everything(client: Client, quiet: float = 2.0) -> list[Any]:
    """Every MESSAGE until none came for ``quiet`` seconds."""
    frames = []
    while True:
        try:
            frames.append(client.listener.messages.get(timeout=quiet))
        except queue.Empty:
            return frames
