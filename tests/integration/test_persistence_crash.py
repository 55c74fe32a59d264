"""Crash test: a gateway killed with SIGKILL loses no receipted message.

A real gateway process (``broker.persistence = "sqlite"``) takes persistent
messages from stomp.py producers (a RECEIPT per SEND; transactions with a
receipted COMMIT; windows of ten SENDs closed by one receipted SEND) while a
client-individual consumer acknowledges with receipts.  At a random moment
the process gets SIGKILL; it restarts on the same database and the round
begins again.  At the end a consumer drains the queue.

Every receipted message must have been delivered and acknowledged before a
crash or be delivered by the drain: no losses.  A message whose
acknowledgement was receipted never comes back.  Messages delivered but not
acknowledged before a crash may come again: they are counted, not failed.
The random seed is in every failure message (``CRASH_SEED`` repeats a run).
"""

from __future__ import annotations

import collections
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client

QUEUE = "/queue/crash"
SQLITE = ["--set", 'broker.persistence="sqlite"']
ROUNDS = 4


@dataclass
class Ledger:
    """What the clients know happened, shared by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: set[str] = field(default_factory=set)
    receipted: set[str] = field(default_factory=set)
    ack_sent: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)
    deliveries: collections.Counter[str] = field(default_factory=collections.Counter)
    unacked_at_crash: set[str] = field(default_factory=set)

    def add(self, name: str, bodies: list[str]) -> None:
        with self.lock:
            getattr(self, name).update(bodies)


def receipted(client: Client, send: Callable[[str], None], timeout: float = 10.0) -> bool:
    """Call ``send(receipt_id)``; True once the RECEIPT arrives, False if the connection died first."""
    receipt_id = uuid.uuid4().hex
    event = client.listener.receipt_event(receipt_id)
    send(receipt_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if event.wait(0.05):
            return True
        if client.listener.disconnected.is_set():
            return event.is_set()
    return False


class Producer(threading.Thread):
    """Sends persistent messages until its connection dies."""

    def __init__(self, address: tuple[str, int], name: str, mode: str, ledger: Ledger) -> None:
        super().__init__(name=name, daemon=True)
        self.address = address
        self.mode = mode
        self.ledger = ledger

    def run(self) -> None:
        try:
            client = Client(self.address, text=True)
        except Exception:  # the gateway died before we connected
            return
        connection = client.connection
        count = 0
        try:
            while True:
                bodies = [f"{self.name}-{count + i}" for i in range(1 if self.mode == "each" else 5)]
                count += len(bodies)
                self.ledger.add("sent", bodies)
                if not receipted(client, partial(self.send, connection, bodies)):
                    return
                self.ledger.add("receipted", bodies)
        except Exception:  # the connection died under a send: expected at the kill
            return


    def send(self, connection: Any, bodies: list[str], receipt: str) -> None:
        persistent = {"persistent": "true"}
        if self.mode == "each":
            connection.send(QUEUE, bodies[0], headers={**persistent, "receipt": receipt})
        elif self.mode == "transaction":
            tx = uuid.uuid4().hex
            connection.begin(tx)
            for body in bodies:
                connection.send(QUEUE, body, headers={**persistent, "transaction": tx})
            connection.commit(tx, headers={"receipt": receipt})
        else:  # "window": only the last SEND of five asks for a receipt
            for body in bodies[:-1]:
                connection.send(QUEUE, body, headers=persistent)
            connection.send(QUEUE, bodies[-1], headers={**persistent, "receipt": receipt})


class Consumer(threading.Thread):
    """Acknowledges every delivery with a receipt until its connection dies (or ``stop``)."""

    def __init__(self, address: tuple[str, int], ledger: Ledger, ack: str = "client-individual") -> None:
        super().__init__(name="consumer", daemon=True)
        self.address = address
        self.ledger = ledger
        self.ack = ack
        self.stop = threading.Event()
        self.last_delivery = time.monotonic()
        self.delivered: list[tuple[str, bool]] = []
        self.ready = threading.Event()
        self.subscribed = False

    def run(self) -> None:
        try:
            client = Client(self.address)
            client.subscribe(QUEUE, ack=self.ack, headers={"activemq.prefetchSize": "20"})
            self.last_delivery = time.monotonic()
            self.subscribed = True
        except Exception:
            return
        finally:
            self.ready.set()
        pending: set[str] = set()
        try:
            while not self.stop.is_set() and not client.listener.disconnected.is_set():
                try:
                    frame = client.listener.messages.get(timeout=0.05)
                except queue.Empty:
                    continue
                self.last_delivery = time.monotonic()
                body = frame.body.decode()
                self.delivered.append((body, frame.headers.get("redelivered") == "true"))
                with self.ledger.lock:
                    self.ledger.deliveries[body] += 1
                if self.ack == "auto":
                    continue
                pending.add(body)
                ack_id = frame.headers["ack"]
                self.ledger.add("ack_sent", [body])

                def ack(receipt: str, ack_id: str = ack_id) -> None:
                    client.connection.ack(ack_id, receipt=receipt)

                if not receipted(client, ack):
                    break
                pending.discard(body)
                self.ledger.add("acked", [body])
        except Exception:
            pass
        finally:
            self.ledger.add("unacked_at_crash", sorted(pending))
            if self.stop.is_set():
                client.disconnect()


def test_sigkill_at_random_moments_loses_no_receipted_message(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", str(random.SystemRandom().randrange(1, 1_000_000))))
    rng = random.Random(seed)
    ledger = Ledger()
    gateway = GatewayProcess(tmp_path / "gateway", args=SQLITE)
    kill_points = []
    delivered_before: set[str] = set()
    try:
        for round_ in range(ROUNDS):
            gateway.start()
            consumer = Consumer(gateway.address, ledger)
            consumer.start()
            consumer.ready.wait(10)
            producers = [
                Producer(gateway.address, f"r{round_}-{mode}{index}", mode, ledger)
                for index, mode in enumerate(("each", "each", "transaction", "window"))
            ]
            for producer in producers:
                producer.start()
            kill_at = rng.uniform(0.3, 1.5)
            kill_points.append(round(kill_at, 3))
            time.sleep(kill_at)
            gateway.kill()
            for thread in [*producers, consumer]:
                thread.join(15)
                assert not thread.is_alive(), f"{thread.name} hung after the kill (seed {seed})"
            delivered_before.update(body for body, _ in consumer.delivered)

        gateway.start()
        drain = Consumer(gateway.address, ledger, ack="auto")
        drain.start()
        drain.ready.wait(10)
        assert drain.subscribed, f"the draining consumer could not subscribe:\n{gateway.log()[-2000:]}"
        while time.monotonic() - drain.last_delivery < 2.0 and drain.is_alive():
            time.sleep(0.1)
        drain.stop.set()
        drain.join(15)
        gateway.stop()
    finally:
        gateway.kill()

    where = f"(seed {seed}, kill points {kill_points}s)"
    drained = [body for body, _ in drain.delivered]
    drained_set = set(drained)
    # An ACK whose RECEIPT was lost in the crash may still have been applied: the
    # consumer had the message.  Anything else receipted must come back.
    lost = ledger.receipted - ledger.ack_sent - drained_set
    assert len(ledger.receipted) > 50, f"too little traffic to prove anything {where}"
    assert not lost, f"{len(lost)} receipted messages lost {where}: {sorted(lost)[:20]}"
    came_back = ledger.acked & drained_set
    assert not came_back, f"messages whose ACK was receipted came back {where}: {sorted(came_back)[:20]}"
    invented = drained_set - ledger.sent
    assert not invented, f"the drain delivered messages never sent {where}: {sorted(invented)[:20]}"
    assert len(drained) == len(drained_set), f"the drain got duplicates without any crash {where}"
    duplicates = sum(count - 1 for count in ledger.deliveries.values() if count > 1)
    redelivered = [body for body, flag in drain.delivered if body in delivered_before]
    flagged = sum(1 for body, flag in drain.delivered if body in delivered_before and flag)
    print(
        f"crash test {where}: sent {len(ledger.sent)}, receipted {len(ledger.receipted)}, "
        f"acked {len(ledger.acked)}, drained {len(drained)}, lost 0, duplicate deliveries {duplicates} "
        f"(delivered again after a crash: {len(redelivered)}, of which flagged redelivered: {flagged})"
    )
