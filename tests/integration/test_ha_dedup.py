"""Resent SENDs across a takeover (issue 35 #2): a stomp.py client with both gateways' addresses
loses the RECEIPTs of SENDs the active gateway stored, the active gateway gets SIGKILL, and the
client resends them to the standby: those marked with ``x-dedup-id`` are acknowledged and stored
once, those without are stored twice (what the header is for).  Counted by id at the end.

The RECEIPTs are lost on the way (a TCP proxy between the client and the active gateway drops
what the gateway sends: :meth:`TcpProxy.mute`) while the gateway stores the messages, so the kill
falls between the store's commit and the RECEIPT reaching the client, every time.
"""

from __future__ import annotations

import collections
import queue
import threading
import uuid
from pathlib import Path
from typing import Any

import stomp

from tests.integration.test_ha_standby import metrics
from tests.support.standby import accepts, gateway_pair
from tests.support.stomp_clients import Client
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

QUEUE = "/queue/ha.dedup"
WARM, MARKED, PLAIN = 20, 10, 5


class Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: set[str] = set()
        self.lost = threading.Event()

    def on_receipt(self, frame: Any) -> None:
        with self.lock:
            self.got.add(frame.headers["receipt-id"])

    def on_disconnected(self) -> None:
        self.lost.set()


def send(connection: Any, body: str, dedup: bool) -> str:
    receipt = uuid.uuid4().hex
    headers = {"persistent": "true", "receipt": receipt}
    if dedup:
        headers["x-dedup-id"] = body
    connection.send(QUEUE, body, headers=headers)
    return receipt


def test_a_send_whose_receipt_died_with_the_gateway_is_stored_once_when_resent_with_its_key(tmp_path: Path) -> None:
    active, active_admin, standby, standby_admin = gateway_pair(tmp_path)
    proxy = TcpProxy(*active.address)
    try:
        connection: Any = stomp.Connection12([("127.0.0.1", proxy.port), standby.address],
                                             reconnect_sleep_initial=0.1, reconnect_sleep_increase=0.0,
                                             reconnect_sleep_max=0.3, reconnect_attempts_max=300, auto_decode=True)
        listener = Receipts()
        connection.set_listener("receipts", listener)
        connection.connect(wait=True)
        warm = {send(connection, f"warm-{n}", True) for n in range(WARM)}
        wait_until(lambda: warm <= listener.got, 30, "the first RECEIPTs")
        proxy.mute()  # (the gateway's answers are dropped from here on: RECEIPTs never arrive)
        unreceipted = [(f"marked-{n}", True) for n in range(MARKED)] + [(f"plain-{n}", False) for n in range(PLAIN)]
        lost = {send(connection, body, dedup) for body, dedup in unreceipted}
        total = WARM + MARKED + PLAIN
        wait_until(lambda: metrics(active_admin).get(("jmsgateway_broker_enqueued_total", ())) == total, 30,
                   "the active gateway storing every message")
        assert not lost & listener.got
        assert active.process is not None
        active.process.kill()  # between the store's commit and the RECEIPT reaching the client
        active.process.wait(15)
        proxy.close()  # (the dead gateway's address refuses connections)
        wait_until(lambda: accepts(standby.port), 60, "the standby's STOMP listener")
        wait_until(listener.lost.is_set, 30, "the client seeing its connection lost")
        connection.connect(wait=True)  # the host list: the standby's address accepts now
        resent = {send(connection, body, dedup) for body, dedup in unreceipted}
        wait_until(lambda: resent <= listener.got, 30, "the RECEIPTs of the resent messages")
        connection.disconnect()
        duplicates = metrics(standby_admin)[("jmsgateway_broker_duplicate_sends_total", ())]
        drain = Client(standby.address)
        drain.subscribe(QUEUE, "d")
        bodies = collections.Counter(frame.body.decode() for frame in _everything(drain))
        drain.disconnect()
    finally:
        proxy.close()
        active.kill()
        standby.kill()
    assert duplicates == MARKED
    assert {body: count for body, count in bodies.items() if body.startswith(("warm-", "marked-"))} == \
        {**{f"warm-{n}": 1 for n in range(WARM)}, **{f"marked-{n}": 1 for n in range(MARKED)}}
    # without a key the gateway cannot tell: the resent copies are stored again
    assert {body: count for body, count in bodies.items() if body.startswith("plain-")} == \
        {f"plain-{n}": 2 for n in range(PLAIN)}


def _everything(client: Client, quiet: float = 2.0) -> list[Any]:
    frames = []
    while True:
        try:
            frames.append(client.listener.messages.get(timeout=quiet))
        except queue.Empty:
            return frames
