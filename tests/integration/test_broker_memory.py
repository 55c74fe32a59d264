"""The embedded broker's memory limits in a real gateway process (issue 27 part 1).

``--set broker.memory_limit='"1MB"'`` and ``[broker.destinations."PATTERN"]``
tables through the real configuration path; stomp.py clients; the admin
endpoint's ``/status`` and ``/metrics`` read what the broker holds.  A flood of
ten times the limit stays within it (the rest is in the page file) and drains
complete and in order; FAIL answers with an ERROR naming the destination and
the limit; BLOCK holds the sender until a consumer makes room.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.integration.test_admin import http
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import Client

BODY = "x" * 1000


def admin_config(port: int) -> str:
    return f'[admin]\nlisten = ["tcp:{port}:interface=127.0.0.1"]\n'


def embedded_status(admin: int) -> dict[str, Any]:
    status, document, _ = http(admin, "GET", "/status")
    assert status == 200, document
    embedded: dict[str, Any] = document["connectors"]["embedded"]
    return embedded


def test_a_flood_of_ten_times_the_limit_pages_then_drains_in_order(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    admin = free_port()
    gateway = make_gateway(admin_config(admin), args=["--set", 'broker.memory_limit="1MB"'])
    sender = Client(gateway.address)
    count = 10_000  # about 15 MB counted: ten times the limit
    for n in range(count - 1):
        sender.send("/queue/flood", f"{n:05}:{BODY}")
    sender.send("/queue/flood", f"{count - 1:05}:{BODY}", receipt=True, timeout=60)
    status = embedded_status(admin)
    memory = status["memory"]
    assert memory["limit"] == 1024 * 1024
    assert memory["used"] <= memory["limit"] + 2000  # within the limit, plus at most one message
    assert status["paging"]["/queue/flood"]["paged"] >= count - 1000
    assert memory["page_file"] and memory["page_file"].endswith("broker-pages.sqlite")
    _, metrics, _ = http(admin, "GET", "/metrics")
    assert "jmsgateway_broker_memory_limit_bytes 1.048576e+06" in metrics
    assert 'jmsgateway_broker_paged_messages{destination="/queue/flood",full_policy="PAGE"}' in metrics
    log = gateway.log()
    assert log.count("/queue/flood reached its memory limit") == 1  # once per episode, not per message
    assert log.count("embedded broker memory limit reached") == 1

    consumer = Client(gateway.address)
    consumer.subscribe("/queue/flood", ack="client-individual", headers={"activemq.prefetchSize": "100"})
    got = []
    for _ in range(count):
        frame = consumer.message(timeout=30)
        got.append(frame.body.decode()[:5])
        consumer.ack(frame, receipt=False)
    assert got == [f"{n:05}" for n in range(count)]
    assert consumer.no_message(0.3)
    gateway.wait_for_log("/queue/flood read its last paged message back")
    assert embedded_status(admin)["paging"]["/queue/flood"]["paged"] == 0


def test_fail_refuses_the_send_with_an_error_naming_destination_and_limit(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway('[broker.destinations."/queue/capped.>"]\nmax_size = "4KB"\nfull_policy = "FAIL"\n')
    client = Client(gateway.address)
    for n in range(2):
        client.send("/queue/capped.a", f"{n}:{BODY}", receipt=True)
    receipt = uuid.uuid4().hex
    client.connection.send("/queue/capped.a", f"2:{BODY}", headers={"receipt": receipt})
    error = client.error(timeout=10)
    assert error is not None, "no ERROR frame"
    assert error.headers["message"] == "destination full"
    assert "/queue/capped.a" in error.body.decode() and "max_size 4096 bytes" in error.body.decode()
    # nothing was stored: a consumer gets the first two only
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/capped.a")
    assert [frame.body.decode()[:1] for frame in consumer.messages(2)] == ["0", "1"]
    assert consumer.no_message(0.5)
    assert "/queue/capped.a reached its max_size 4096 bytes: sends are refused" in gateway.log()


def test_block_holds_the_sender_until_a_consumer_makes_room(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = make_gateway('[broker.destinations."/queue/held"]\nmax_size = "8KB"\nfull_policy = "BLOCK"\n')
    sender = Client(gateway.address)
    count = 200
    receipts: list[threading.Event] = []

    def send_all() -> None:
        for n in range(count):
            receipt = f"r{n}"
            receipts.append(sender.listener.receipt_event(receipt))
            sender.connection.send("/queue/held", f"{n:03}:{BODY}", headers={"receipt": receipt})

    thread = threading.Thread(target=send_all, daemon=True)
    thread.start()
    time.sleep(2.0)
    receipted = sum(event.is_set() for event in receipts)
    assert 0 < receipted < count, receipted  # the sender is held, not refused
    assert sender.error(timeout=0) is None
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/held")
    got = [frame.body.decode()[:3] for frame in consumer.messages(count, timeout=30)]
    assert got == [f"{n:03}" for n in range(count)]
    thread.join(10)
    assert all(event.wait(10) for event in receipts)
    assert "/queue/held reached its max_size 8192 bytes: its senders are held" in gateway.log()


def test_a_selector_searching_a_deep_page_does_not_stall_other_clients(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    """A selective consumer whose selector refuses 100,000 paged messages has them searched
    in slices: meanwhile another client's SEND/RECEIPT round trips stay short (the search
    used to hold the reactor for the whole scan, about a second, and again at each new
    message its selector might accept)."""
    gateway = make_gateway(args=["--set", 'broker.memory_limit="1MB"'])
    flood = RawStomp(gateway.address, timeout=120)
    flood.connect()
    count = 100_000
    frame = "SEND\ndestination:/queue/sel\ncolor:blue\npersistent:false\n\n{}\x00"
    for start in range(0, count, 5000):
        flood.send("".join(frame.format(f"{n:06}") for n in range(start, start + 5000)))
    flood.send("SEND\ndestination:/queue/sel\ncolor:blue\nreceipt:flooded\n\nlast\x00")
    assert flood.frame(timeout=120).headers.get("receipt-id") == "flooded"

    round_trips: list[float] = []
    halt = threading.Event()

    def probe() -> None:
        client = RawStomp(gateway.address, timeout=30)
        client.connect()
        for n in itertools.count():
            if halt.is_set():
                return
            started = time.monotonic()
            client.send(f"SEND\ndestination:/queue/probe\nreceipt:p{n}\n\nping\x00")
            reply = client.frame(timeout=30)
            round_trips.append(time.monotonic() - started)
            assert reply.command == "RECEIPT", reply
            time.sleep(0.005)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    time.sleep(0.5)
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sel", ack="client-individual", selector="color = 'red'",
                       headers={"activemq.prefetchSize": "1"})
    time.sleep(1.0)  # (the search through the page, in slices)
    sender = Client(gateway.address)
    sender.send("/queue/sel", "red one", receipt=True, timeout=30, color="red")
    assert consumer.message(timeout=60).body.decode() == "red one"
    time.sleep(0.5)
    halt.set()
    prober.join(timeout=30)
    assert len(round_trips) > 20
    slowest = sorted(round_trips)[-3:]
    # (one outlier is forgiven: the test host is shared; the unsliced search stalled twice, 0.7 s each)
    assert slowest[-2] < 0.25, f"SEND/RECEIPT round trips while the page was searched: slowest {slowest}"
