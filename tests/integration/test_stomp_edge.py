"""The STOMP edge of the real gateway process, byte by byte: frames pipelined with CONNECT and
with DISCONNECT, headers no client version may read differently, acknowledgements by message-id,
charsets.  Raw sockets (tests/support/raw_stomp.py) so every write is exactly what the test says."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import pytest

from gateway.wire.frame import Frame
from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import StompClients


def unique(prefix: str = "/queue/edge") -> str:
    return f"{prefix}.{uuid.uuid4().hex}"


def subscriber(address: tuple[str, int], destination: str, version: str = "1.2", ack: str = "auto") -> RawStomp:
    client = RawStomp(address, version)
    client.connect(version)
    client.send(f"SUBSCRIBE\nid:s1\ndestination:{destination}\nack:{ack}\nreceipt:sub\n\n\x00")
    receipt = client.frame()
    assert receipt.command == "RECEIPT" and receipt.headers["receipt-id"] == "sub", receipt
    return client


def commands(items: Sequence[object]) -> list[str]:
    return [item.command if isinstance(item, Frame) else repr(item) for item in items]


# -- issue 27 part 4: frames that arrive with CONNECT ---------------------------------------------


def test_frames_pipelined_with_connect_are_read_under_the_negotiated_version(gateway: GatewayProcess) -> None:
    queue = unique()
    consumer = subscriber(gateway.address, queue)
    producer = RawStomp(gateway.address)
    producer.send("CONNECT\naccept-version:1.2\nhost:x\n\n\x00"
                  f"SEND\ndestination:{queue}\nx-esc:a\\cb\\nc\nx\\cy:v\nreceipt:r1\n\nbody\x00")
    assert producer.frame().command == "CONNECTED"
    receipt = producer.frame()
    assert receipt.command == "RECEIPT" and receipt.headers["receipt-id"] == "r1"
    message = consumer.frame()
    assert message.headers["x-esc"] == "a:b\nc"
    assert message.headers["x:y"] == "v"
    assert message.body == b"body"


@pytest.mark.parametrize(
    ("version", "header"),
    [("1.2", "x:a\\tb"), ("1.2", "x:trailing\\"), ("1.1", "x:a\\rb"), ("1.2", "x\\q:v")],
)
def test_invalid_escapes_pipelined_with_connect_are_refused(
    gateway: GatewayProcess, stomp: StompClients, version: str, header: str
) -> None:
    queue = unique()
    bystander = stomp.connect("1.2")
    bystander.subscribe(queue, "s")
    producer = RawStomp(gateway.address)
    producer.send(f"CONNECT\naccept-version:{version}\nhost:x\n\n\x00"
                  f"SEND\ndestination:{queue}\n{header}\nreceipt:r1\n\nbody\x00")
    items = producer.until_closed()
    assert commands(items) == ["CONNECTED", "ERROR"], items
    error = items[1]
    assert isinstance(error, Frame) and error.headers["message"] == "invalid header escape"
    assert bystander.no_message(0.3)
    stomp.connect("1.2").send(queue, "unaffected", receipt=True)
    assert bystander.message().body == b"unaffected"


# -- issue 26 defect 7: DISCONNECT after SENDs ------------------------------------------------------


def fill_store(address: tuple[str, int], queue: str, body: str) -> int:
    """Persistent SENDs (with receipts, 20 a write) until the store refuses one; how many it took."""
    client = RawStomp(address)
    client.connect()
    stored = 0
    for batch in range(100):
        client.send("".join(f"SEND\ndestination:{queue}\npersistent:true\nreceipt:f{batch}-{index}\n\n{body}\x00"
                            for index in range(20)))
        for _ in range(20):
            frame = client.frame(timeout=30)
            if frame.command == "ERROR":
                assert "full" in frame.body.decode(), frame
                return stored
            stored += 1
    raise AssertionError("the store never refused a SEND")


def test_disconnect_receipt_follows_the_receipts_and_errors_of_the_sends_before_it(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway(args=["--set", 'broker.persistence="sqlite"', "--set", "broker.max_size=524288"])
    queue = unique()
    body = "x" * 4000
    # A SEND that succeeds, pipelined with DISCONNECT: its RECEIPT first, then the DISCONNECT's.
    client = RawStomp(gateway.address)
    client.send("CONNECT\naccept-version:1.2\nhost:x\n\n\x00"
                f"SEND\ndestination:{queue}\npersistent:true\nreceipt:s1\n\n{body}\x00"
                "DISCONNECT\nreceipt:bye\n\n\x00")
    items = client.until_closed()
    assert [(f.command, f.headers.get("receipt-id")) for f in items if isinstance(f, Frame)] == [
        ("CONNECTED", None), ("RECEIPT", "s1"), ("RECEIPT", "bye")], items
    # A SEND the store refuses, pipelined with DISCONNECT: ERROR for it, no RECEIPT for the DISCONNECT.
    assert fill_store(gateway.address, queue, body) > 10
    client = RawStomp(gateway.address)
    client.send("CONNECT\naccept-version:1.2\nhost:x\n\n\x00"
                f"SEND\ndestination:{queue}\npersistent:true\nreceipt:s2\n\n{body}\x00"
                "DISCONNECT\nreceipt:bye\n\n\x00")
    items = client.until_closed()
    assert commands(items) == ["CONNECTED", "ERROR"], items
    error = items[1]
    assert isinstance(error, Frame) and error.headers.get("receipt-id") == "s2"
    assert "full" in error.body.decode()


# -- issue 26 defect 8: headers no client may read differently --------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_a_header_value_cannot_forge_headers_of_a_message(gateway: GatewayProcess, version: str) -> None:
    queue = unique()
    consumer = subscriber(gateway.address, queue, version)
    producer = RawStomp(gateway.address)
    producer.connect("1.2")
    # Valid 1.2 escapes: the value holds two line breaks.
    producer.send(f"SEND\ndestination:{queue}\nx-h:a\\nsubscription:EVIL\\ncontent-length:0\nreceipt:r1\n\npayload\x00")
    assert producer.frame().command == "RECEIPT"
    message = consumer.frame()
    assert message.command == "MESSAGE"
    assert message.headers["subscription"] == "s1"
    assert message.body == b"payload"
    if version == "1.0":  # no escapes in 1.0: the header is left out (docs/stomp.md)
        assert "x-h" not in message.headers
    else:
        assert message.headers["x-h"] == "a\nsubscription:EVIL\ncontent-length:0"
    assert consumer.item(timeout=0.3) is None  # nothing else: no second (forged) frame


# -- lower priority items of issue 26 ----------------------------------------------------------------


def test_auto_deliveries_carry_no_ack_header(gateway: GatewayProcess) -> None:
    queue = unique()
    consumer = subscriber(gateway.address, queue, "1.2", ack="auto")
    producer = RawStomp(gateway.address)
    producer.connect("1.2")
    producer.send(f"SEND\ndestination:{queue}\nreceipt:r1\n\nhello\x00")
    message = consumer.frame()
    assert message.body == b"hello"
    assert "ack" not in message.headers


def test_a_text_body_is_decoded_with_its_declared_charset(gateway: GatewayProcess) -> None:
    queue = unique()
    consumer = subscriber(gateway.address, queue)
    producer = RawStomp(gateway.address)
    producer.connect("1.2")
    producer.send(f"SEND\ndestination:{queue}\ncontent-type:text/plain; charset=ISO-8859-1\nreceipt:r1\n\n".encode()
                  + "café".encode("latin-1") + b"\x00")
    receipt = producer.frame()
    assert receipt.command == "RECEIPT", receipt
    message = consumer.frame()
    assert message.body == "café".encode()  # a TextMessage: delivered as UTF-8, and says so
    assert message.headers["content-type"] == "text/plain; charset=utf-8"


def test_an_unknown_charset_is_refused_by_name(gateway: GatewayProcess) -> None:
    producer = RawStomp(gateway.address)
    producer.connect("1.2")
    producer.send(f"SEND\ndestination:{unique()}\ncontent-type:text/plain;charset=klingon\nreceipt:r1\n\nx\x00")
    items = producer.until_closed()
    assert commands(items) == ["ERROR"], items
    error = items[0]
    assert isinstance(error, Frame) and error.headers["message"] == "unknown charset"
    assert b"klingon" in error.body
