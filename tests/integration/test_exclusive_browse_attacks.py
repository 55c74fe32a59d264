"""Black-box attacks on exclusive consumers and queue browsing (docs/stomp.md "Destination features").

Exclusive: the first exclusive consumer gets every message, the others none; when it leaves, what it
left unacknowledged goes back flagged ``redelivered`` and the next exclusive consumer takes over.
Browsing: a snapshot of the queue when the SUBSCRIBE arrives (every pending message, paged and stored
ones included; in-flight deliveries are not pending), none consumed (ACKs are ignored), delivered a slice
per reactor turn under back-pressure, then the end marker (``browser:end``).  A real gateway process,
stomp.py clients and raw sockets that stop reading (no RST) or reset.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import websocket

from tests.support.destination_attacks import collect, drain, frame, pipelined, send_frame
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import Client

Make = Callable[..., GatewayProcess]
PERSISTENT = {"persistent": "true"}
PAGED = """
[broker.destinations."/queue/deep.>"]
max_size = "64KB"
full_policy = "PAGE"
"""


def stalled_subscriber(address: tuple[str, int], subscribe: dict[str, str]) -> socket.socket:
    """A connection with a 4 KB receive buffer that subscribes, reads its RECEIPT, then never reads again."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(address)
    sock.sendall(frame("CONNECT", {"accept-version": "1.2", "host": "x"}))
    data = b""
    while b"CONNECTED" not in data or not data.endswith(b"\x00"):
        data += sock.recv(1)
    sock.sendall(frame("SUBSCRIBE", {**subscribe, "receipt": "sub"}))
    data = b""
    while b"receipt-id:sub" not in data:  # (read a byte at a time: nothing past the RECEIPT is taken)
        data += sock.recv(1)
    return sock


def reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_stalled_exclusive_consumer_keeps_exclusivity_then_hands_over_on_reset(make_gateway: Make) -> None:
    """An exclusive consumer (client-individual) stops reading with 300 messages of 8 KB queued: the other
    consumers (one exclusive, one not) get nothing while it is there; it leaves by RST: the next exclusive
    consumer gets all 300, those the first had been handed flagged redelivered, the plain one none."""
    gateway = make_gateway()
    producer = Client(gateway.address)
    stalled = stalled_subscriber(gateway.address, {"destination": "/queue/excl.stall", "id": "x",
                                                   "ack": "client-individual", "activemq.exclusive": "true"})
    second = Client(gateway.address)
    second.subscribe("/queue/excl.stall", "x", ack="client-individual", headers={"activemq.exclusive": "true"})
    plain = Client(gateway.address)
    plain.subscribe("/queue/excl.stall", "p", ack="client-individual")
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/excl.stall", f"{index}:" + "e" * 8000, PERSISTENT) for index in range(300)],
              "end")
    assert second.no_message(1.0) and plain.no_message(0.1), "a consumer got a message the exclusive one owns"
    reset(stalled)
    got: list[int] = []
    redelivered = 0
    while len(got) < 300:
        message = second.message(timeout=10)
        second.ack(message, receipt=False)
        got.append(int(message.body.split(b":")[0]))
        redelivered += message.headers.get("redelivered") == "true"
    assert sorted(got) == list(range(300)) and got == sorted(got), got[:20]
    assert redelivered >= 1, "the messages the stalled consumer had were not flagged redelivered"
    assert plain.no_message(0.5)
    for client in (producer, second, plain):
        client.disconnect()
    raw.close()


def test_exclusive_owner_disconnects_the_rest_share_again(make_gateway: Make) -> None:
    """With the only exclusive consumer gone, the plain consumers share the queue again."""
    gateway = make_gateway()
    owner = Client(gateway.address)
    owner.subscribe("/queue/excl.share", "x", headers={"activemq.exclusive": "true"})
    plain = [Client(gateway.address) for _ in range(2)]
    for client in plain:
        client.subscribe("/queue/excl.share", "p")
    producer = Client(gateway.address)
    for index in range(10):
        producer.send("/queue/excl.share", str(index), receipt=index == 9)
    assert len(collect(owner, 0.5)) == 10 and all(client.no_message(0.1) for client in plain)
    owner.disconnect()
    for index in range(20):
        producer.send("/queue/excl.share", str(index), receipt=index == 19)
    counts = [len(collect(client, 0.5)) for client in plain]
    assert sum(counts) == 20 and min(counts) > 0, counts


def test_browse_a_deep_paged_queue_gets_everything_consumes_nothing(make_gateway: Make) -> None:
    """5,000 persistent messages of 1 KB in a queue past its max_size (paged), kill -9 (recovered lazily):
    a browser gets all 5,000 in order, then the end marker; it ACKs them all; a consumer then gets all
    5,000 again."""
    gateway = make_gateway(PAGED)
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/deep.browse", f"{index}:" + "b" * 1000, {**PERSISTENT, "receipt": f"r{index}"})
                    for index in range(5000)], "end", timeout=60)
    raw.close()
    gateway.kill()
    gateway.start()
    browser = RawStomp(gateway.address, timeout=30)
    browser.connect()
    browser.send(frame("SUBSCRIBE", {"destination": "/queue/deep.browse", "id": "b", "browser": "true",
                                     "ack": "client-individual"}))
    numbers = []
    while True:
        message = browser.frame(timeout=30)
        assert message.command == "MESSAGE", message
        if message.headers.get("browser") == "end":
            assert message.headers["message-id"] == "0" and message.body == b""
            break
        numbers.append(int(message.body.split(b":")[0]))
        if "ack" in message.headers:
            browser.send(frame("ACK", {"id": message.headers["ack"]}))
    assert numbers == list(range(5000))
    browser.close()
    consumer = Client(gateway.address)
    assert [int(text.split(":")[0]) for text, _ in drain(consumer, "/queue/deep.browse")] == list(range(5000))
    consumer.disconnect()


def test_browse_while_the_queue_is_consumed_keeps_its_snapshot(make_gateway: Make) -> None:
    """2,000 messages; a consumer holds 10 unacknowledged (in flight); a browser subscribes, then the
    consumer drains the queue as fast as it can while the browse is delivered: the browser gets exactly
    the 1,990 that were pending at its SUBSCRIBE, in order, then the end marker; the consumer gets all."""
    gateway = make_gateway()
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/brw.live", str(index)) for index in range(2000)], "end")
    raw.close()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/brw.live", "c", ack="client", headers={"activemq.prefetchSize": "10"})
    held = consumer.messages(10)
    browser = RawStomp(gateway.address, timeout=30)
    browser.connect()
    browser.send(frame("SUBSCRIBE", {"destination": "/queue/brw.live", "id": "b", "browser": "true",
                                     "receipt": "browsing"}))
    consumer.connection.unsubscribe("c")  # (its 10 go back; it leaves: a new subscription drains what is left)
    got_consumer = [text for text, _ in drain(consumer, "/queue/brw.live", sub_id="d")]
    numbers = []
    while True:
        message = browser.frame(timeout=30)
        if message.command == "RECEIPT":
            continue
        if message.headers.get("browser") == "end":
            break
        numbers.append(int(message.body))
    assert numbers == list(range(10, 2000)), (numbers[:5], len(numbers))
    assert sorted(int(text) for text in got_consumer) == list(range(2000)), len(got_consumer)
    assert [m.body for m in held] == [str(index).encode() for index in range(10)]
    browser.close()
    consumer.disconnect()


def test_a_stalled_browser_of_a_deep_queue_does_not_stall_the_gateway(make_gateway: Make) -> None:
    """A browser that stops reading while browsing 3,000 messages of 2 KB: other clients are still served at
    once, a consumer of the same queue gets everything, and the gateway's memory stays bounded."""
    gateway = make_gateway(PAGED)
    assert gateway.process is not None
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/deep.stall", f"{index}:" + "s" * 2000, PERSISTENT) for index in range(3000)],
              "end", timeout=60)
    raw.close()
    stalled = stalled_subscriber(gateway.address, {"destination": "/queue/deep.stall", "id": "b",
                                                   "browser": "true"})
    time.sleep(0.5)
    other = Client(gateway.address)
    started = time.monotonic()
    other.send("/queue/other", "x", receipt=True)
    assert time.monotonic() - started < 1.0
    got = drain(other, "/queue/deep.stall")
    assert sorted(int(text.split(":")[0]) for text, _ in got) == list(range(3000))
    reset(stalled)
    other.disconnect()


def test_exclusive_handover_with_acks_held_by_an_open_transaction(make_gateway: Make) -> None:
    """The exclusive consumer ACKs 5 of its 10 in a transaction, then UNSUBSCRIBEs (the transaction still
    open): the next exclusive consumer gets the 5 unacknowledged (redelivered), not the 5 held; the ABORT
    then gives those 5 to it as well (redelivered); each of the 10 reaches it once, nothing more."""
    gateway = make_gateway()
    producer = Client(gateway.address)
    for index in range(10):
        producer.send("/queue/excl.tx", str(index), receipt=index == 9, headers=PERSISTENT)
    first = Client(gateway.address)
    first.subscribe("/queue/excl.tx", "x", ack="client-individual", headers={"activemq.exclusive": "true"})
    second = Client(gateway.address)
    second.subscribe("/queue/excl.tx", "x", ack="client-individual", headers={"activemq.exclusive": "true"})
    got = first.messages(10)
    first.begin("t")
    for message in got[:5]:
        first.ack(message, transaction="t")
    first.unsubscribe("x")
    taken = []
    for _ in range(5):
        message = second.message()
        second.ack(message)
        taken.append((int(message.body), message.headers.get("redelivered")))
    assert sorted(taken) == [(index, "true") for index in range(5, 10)]
    assert second.no_message(0.5), "a message held by the open transaction was handed over"
    first.abort("t")
    for _ in range(5):
        message = second.message()
        second.ack(message)
        taken.append((int(message.body), message.headers.get("redelivered")))
    assert sorted(taken) == [(index, "true") for index in range(10)]
    assert second.no_message(0.5)
    for client in (producer, first, second):
        client.disconnect()


def test_browse_with_a_selector_of_a_paged_last_value_queue(make_gateway: Make) -> None:
    """A paged last-value queue (600 keyed 1 KB messages over 60 keys, replaced ten times each): a browser
    with a selector sees the last value of each matching key only, in order, then the end marker."""
    gateway = make_gateway("""
[broker.destinations."/queue/deep.lvq"]
last_value = true
max_size = "32KB"
full_policy = "PAGE"
""")
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/deep.lvq", f"{index}:" + "l" * 1000,
                               {**PERSISTENT, "_AMQ_LVQ_NAME": f"k{index % 60}", "parity": str(index % 2)})
                    for index in range(600)], "end")
    raw.close()
    browser = RawStomp(gateway.address, timeout=30)
    browser.connect()
    browser.send(frame("SUBSCRIBE", {"destination": "/queue/deep.lvq", "id": "b", "browser": "true",
                                     "selector": "parity = '1'"}))
    numbers = []
    while True:
        message = browser.frame(timeout=30)
        if message.headers.get("browser") == "end":
            break
        numbers.append(int(message.body.split(b":")[0]))
    assert numbers == list(range(541, 600, 2)), numbers
    browser.close()


def test_a_wildcard_consumer_of_an_exclusive_queue_is_exclusive_there(make_gateway: Make) -> None:
    """A wildcard queue subscription that matches a queue exclusive by policy is its exclusive consumer when
    first: a later plain consumer of that queue gets nothing until the wildcard one leaves."""
    gateway = make_gateway("""
[broker.destinations."/queue/solo.>"]
exclusive = true
""")
    wildcard = Client(gateway.address)
    wildcard.subscribe("/queue/solo.>", "w")
    plain = Client(gateway.address)
    plain.subscribe("/queue/solo.a", "p")
    producer = Client(gateway.address)
    for index in range(10):
        producer.send("/queue/solo.a", str(index), receipt=index == 9)
    assert len(collect(wildcard, 0.5)) == 10 and plain.no_message(0.1)
    wildcard.disconnect()
    producer.send("/queue/solo.a", "after", receipt=True)
    assert plain.message().body == b"after"
    for client in (plain, producer):
        client.disconnect()


def test_an_exclusive_consumer_of_a_paged_queue_gets_everything_in_order(make_gateway: Make) -> None:
    """3,000 messages of 1 KB in a paged queue; an exclusive consumer with prefetch 10 that acknowledges
    slowly and a plain consumer with room: the plain one gets nothing, the exclusive one all, in order."""
    gateway = make_gateway(PAGED)
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/deep.excl", f"{index}:" + "x" * 1000, PERSISTENT) for index in range(3000)],
              "end", timeout=60)
    raw.close()
    owner = Client(gateway.address)
    owner.subscribe("/queue/deep.excl", "x", ack="client-individual",
                    headers={"activemq.exclusive": "true", "activemq.prefetchSize": "10"})
    plain = Client(gateway.address)
    plain.subscribe("/queue/deep.excl", "p")
    got = []
    for _ in range(3000):
        message = owner.message()
        owner.ack(message, receipt=False)
        got.append(int(message.body.split(b":")[0]))
    assert got == list(range(3000))
    assert plain.no_message(0.5)
    owner.disconnect()
    plain.disconnect()


def test_over_websocket_a_browse_and_an_exclusive_handover(make_gateway: Make) -> None:
    """STOMP over WebSocket: a browse of 1,000 paged messages (stomp.py) ends with the end marker and consumes
    nothing; an exclusive consumer over WebSocket reset by its peer hands its 5 unacknowledged messages to
    the next exclusive one, flagged redelivered, then the rest in order."""
    ws_port = free_port()
    gateway = make_gateway(PAGED, args=["--listen", f"ws:tcp:{ws_port}:interface=127.0.0.1"])
    gateway.wait_for_log(f"ws:tcp:{ws_port}")
    ws = ("127.0.0.1", ws_port)
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/deep.ws", f"{index}:" + "w" * 1000, PERSISTENT) for index in range(1000)],
              "end")
    raw.close()
    browser = Client(ws, ws_path="/")
    browser.subscribe("/queue/deep.ws", "b", headers={"browser": "true"})
    seen = browser.messages(1001, timeout=15)
    assert seen[-1].headers.get("browser") == "end"
    assert [int(m.body.split(b":")[0]) for m in seen[:-1]] == list(range(1000))
    browser.disconnect()
    # (the first is websocket-client's own socket: stomp.py's WebSocket transport leaves the TCP connection
    # open when told to drop it, so the gateway would rightly wait for it)
    first = websocket.create_connection(f"ws://127.0.0.1:{ws_port}/", subprotocols=["v12.stomp"], timeout=10)
    first.send("CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
    assert str(first.recv()).startswith("CONNECTED")
    first.send("SUBSCRIBE\ndestination:/queue/deep.ws\nid:x\nack:client-individual\nactivemq.exclusive:true\n"
               "activemq.prefetchSize:5\n\n\x00")
    assert all(str(first.recv()).startswith("MESSAGE") for _ in range(5))
    second = Client(ws, ws_path="/")
    second.subscribe("/queue/deep.ws", "x", ack="client-individual", headers={"activemq.exclusive": "true"})
    assert second.no_message(0.5)
    assert first.sock is not None
    reset(first.sock)
    got = []
    for _ in range(1000):
        message = second.message()
        second.ack(message, receipt=False)
        got.append((int(message.body.split(b":")[0]), message.headers.get("redelivered")))
    assert [number for number, _ in got] == list(range(1000))
    assert [flag for _, flag in got[:5]] == ["true"] * 5
    second.disconnect()
