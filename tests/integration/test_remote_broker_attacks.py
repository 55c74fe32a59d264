"""A hostile or broken STOMP broker behind the ``stomp://`` connector (black-box, real gateway processes).

The broker is :class:`tests.support.fake_stomp_broker.FakeBroker`, a script on a plain socket.
Each attack checks the promise of docs/jms.md ("When the broker goes away", "Sending: a receipt
means the broker has it") and the brief's: the gateway's memory stays bounded, its log says
what happened, the connector retries per its settings, nothing is confirmed that the broker did
not confirm, nothing is lost or copied beyond the bridge's quality of service, and a client of
the embedded broker on the same gateway is served throughout.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from gateway.wire.codec import FrameDecoder, Limits
from tests.support.fake_stomp_broker import BrokerFrame, BrokerSide, FakeBroker, fake_broker, honest
from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp
from tests.support.waiting import wait_until

MakeGateway = Callable[..., GatewayProcess]


def connector_table(name: str, broker: FakeBroker, **options: object) -> str:
    settings: dict[str, object] = {
        "transformation": '""', "failure_retry_interval": 300, "connect_timeout": 1500,
        "send_timeout": 3000, "heartbeat": "[0, 0]",
    }
    settings.update(options)
    lines = "\n".join(f"{key} = {value}" for key, value in settings.items())
    return f'[connectors.{name}]\nuri = "{broker.uri}"\n{lines}\n\n'


def connector_config(broker: FakeBroker, **options: object) -> str:
    """Connector ``amq`` to ``broker``, with the STOMP destinations ``/queue/jms.*`` routed to it."""
    return connector_table("amq", broker, **options) + (
        '[[destinations]]\npattern = "/queue/jms.*"\nconnector = "amq"\n')


def rss_kib(gateway: GatewayProcess) -> int:
    assert gateway.process is not None
    with open(f"/proc/{gateway.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def send(gateway: GatewayProcess, destination: str, body: str, receipt: str = "r1",
         timeout: float = 10.0) -> str:
    """One SEND with a receipt on a new connection: the answer's command (RECEIPT or ERROR)."""
    client = RawStomp(gateway.address)
    try:
        client.connect()
        client.send(f"SEND\ndestination:{destination}\nreceipt:{receipt}\npersistent:true\n\n{body}\x00")
        item = client.item(timeout)
        if item is None:
            return "nothing"
        return getattr(item, "command", repr(item))
    finally:
        client.close()


def embedded_serves(gateway: GatewayProcess) -> None:
    """A client of the embedded broker gets its RECEIPT at once (the attack leaves it alone)."""
    started = time.monotonic()
    assert send(gateway, "/queue/local.check", "fine", timeout=3.0) == "RECEIPT"
    assert time.monotonic() - started < 3.0


def wait_closed(side_holder: list[BrokerSide], timeout: float, what: str) -> None:
    wait_until(lambda: bool(side_holder) and side_holder[0].closed, timeout, what)


def stream(side: BrokerSide, chunk: bytes, total: int) -> int:
    """Write ``chunk`` until ``total`` bytes or the gateway closes; the bytes written."""
    written = 0
    while written < total:
        if not side.write(chunk):
            break
        written += len(chunk)
    return written


# --- sanity: the fake broker is a broker ---------------------------------------------------


def test_an_honest_fake_broker_receipts_a_send(make_gateway: MakeGateway) -> None:
    with fake_broker() as broker:
        gateway = make_gateway(connector_config(broker))
        assert send(gateway, "/queue/jms.sane", "hello") == "RECEIPT"
        assert [frame.body for frame in broker.sent] == [b"hello"]


# --- frames that never end or are too large ---------------------------------------------------

STREAM_BYTES = 96 * 1024 * 1024


@pytest.mark.parametrize("attack", ["header-without-end", "body-without-nul", "content-length-huge"])
def test_an_endless_frame_from_the_broker_is_cut_off_and_memory_stays_bounded(
        make_gateway: MakeGateway, attack: str) -> None:
    """96 MiB that never make a frame: the connector gives up on the connection long before,
    says so, reconnects, and the gateway's memory does not grow with what the broker wrote.
    (A MESSAGE over ``max_frame_size`` is skipped, its body discarded as it streams in, up to
    ``max_skipped_message_size``: 48 MiB here, below the stream, 128 MiB by default; past it, or
    announcing more, it ends the connection as any oversized frame.)"""
    written: list[int] = []
    attacked: list[BrokerSide] = []

    def hostile(side: BrokerSide) -> None:
        if side.connected() is None:
            return
        attacked.append(side)
        chunk = b"x" * 65536
        if attack == "header-without-end":
            side.write(b"MESSAGE\nsubscription:1\ndestination:/queue/a\nx-long:")
        elif attack == "body-without-nul":
            side.write(b"MESSAGE\nsubscription:1\ndestination:/queue/a\nmessage-id:m\n\n")
        else:
            side.write(b"MESSAGE\nsubscription:1\ndestination:/queue/a\nmessage-id:m\n"
                       b"content-length:1000000000000\n\n")
        written.append(stream(side, chunk, STREAM_BYTES))
        side.serve()

    with fake_broker(scripts=[honest, hostile]) as broker:
        gateway = make_gateway(connector_config(broker, max_skipped_message_size=48 * 1024 * 1024))
        assert send(gateway, "/queue/jms.before", "one") == "RECEIPT"
        before = rss_kib(gateway)
        # the honest first connection is dropped by the broker: the second one attacks
        broker.sides[0].sock.close()
        wait_until(lambda: bool(written), 60, "the broker's stream to end (the gateway to stop reading it)")
        growth_mib = (rss_kib(gateway) - before) / 1024
        assert written[0] < STREAM_BYTES, (
            f"the gateway read all {STREAM_BYTES} bytes of one unfinished frame (RSS +{growth_mib:.0f} MiB)")
        assert growth_mib < 48, f"RSS grew {growth_mib:.0f} MiB reading one unfinished frame"
        log = gateway.wait_for_log("amq", 5)
        assert attacked[0].closed
        wait_until(lambda: broker.connections >= 3, 10, "a reconnection")
        assert send(gateway, "/queue/jms.after", "two") == "RECEIPT"
        embedded_serves(gateway)
        assert "too large" in log or "too long" in log or "limit" in log, log[-3000:]


def test_a_content_length_that_lies_closes_the_connection_and_the_send_is_not_confirmed(
        make_gateway: MakeGateway) -> None:
    """A RECEIPT whose body is longer than its content-length (no NUL where it says): a protocol
    error, not a confirmation; the SEND it answered fails (ERROR: the client may resend), the
    connector reconnects and the next SEND goes through."""

    def lying(side: BrokerSide) -> None:
        if side.connected() is None:
            return
        frame = side.frame()
        assert frame is not None and frame.command == "SEND"
        side.write(f"RECEIPT\nreceipt-id:{frame.headers['receipt']}\ncontent-length:2\n\nabcdef\x00")
        side.serve()

    with fake_broker(scripts=[lying]) as broker:
        gateway = make_gateway(connector_config(broker))
        assert send(gateway, "/queue/jms.lied", "one") == "ERROR"
        wait_until(lambda: broker.connections >= 2, 10, "a reconnection")
        assert send(gateway, "/queue/jms.after", "two") == "RECEIPT"
        embedded_serves(gateway)


# --- ERROR frames ----------------------------------------------------------------------------


def test_an_error_flood_is_one_reconnection_at_a_time_and_a_bounded_log(make_gateway: MakeGateway) -> None:
    """Every connection answers CONNECTED then 20,000 ERROR frames naming nothing: the first is fatal
    (the STOMP spec), the rest unread; reconnections keep `failure_retry_interval`; the log does
    not grow with the flood."""

    def flood(side: BrokerSide) -> None:
        if side.connected() is None:
            return
        side.write(b"ERROR\nmessage:go away\n\nno\x00" * 20000)
        side.serve()

    with fake_broker(flood) as broker:
        gateway = make_gateway(connector_config(broker, failure_retry_interval=500))
        size_before = len(gateway.log())
        time.sleep(3.0)
        connections = broker.connections
        log = gateway.log()[size_before:]
        assert connections <= 10, f"{connections} connections in 3 s with failure_retry_interval = 500"
        assert "go away" in log, log[-2000:]
        assert log.count("\n") < 200, f"{log.count(chr(10))} log lines in 3 s:\n{log[-3000:]}"
        embedded_serves(gateway)


def test_a_message_for_a_subscription_never_made_is_logged_and_ignored(make_gateway: MakeGateway) -> None:
    def stray(side: BrokerSide) -> None:
        if side.connected() is None:
            return
        side.message("no-such-subscription", "/queue/elsewhere", "stray-1", "who asked?")
        side.serve()

    with fake_broker(stray) as broker:
        gateway = make_gateway(connector_config(broker))
        assert send(gateway, "/queue/jms.a", "one") == "RECEIPT"
        assert broker.connections == 1, "a stray MESSAGE should not cost the connection"
        log = gateway.wait_for_log("no-such-subscription", 5)
        assert "Traceback" not in log, log[-3000:]
        embedded_serves(gateway)


def test_receipts_for_ids_never_sent_or_twice_confirm_nothing_else(make_gateway: MakeGateway) -> None:
    """The broker receipts the first SEND twice, then answers the second with a RECEIPT for an id
    the gateway never used (and never the real one): the second client must not get a RECEIPT
    for a message the broker never confirmed; it gets an ERROR after send_timeout."""

    def confused(side: BrokerSide) -> None:
        if side.connected() is None:
            return
        first = side.frame()
        assert first is not None
        receipt = f"RECEIPT\nreceipt-id:{first.headers['receipt']}\n\n\x00"
        side.write(receipt)
        second = side.frame()
        assert second is not None and second.command == "SEND"
        side.write(receipt)  # the first one's, again, after the second was written
        side.write("RECEIPT\nreceipt-id:never-sent-9\n\n\x00")
        side.write("RECEIPT\nreceipt-id:\n\n\x00")
        side.serve(lambda: True)
        while not side.closed:
            side.frame(timeout=0.2)  # read, never answer

    with fake_broker(scripts=[confused]) as broker:
        gateway = make_gateway(connector_config(broker))
        assert send(gateway, "/queue/jms.first", "one") == "RECEIPT"
        started = time.monotonic()
        answer = send(gateway, "/queue/jms.second", "two", timeout=8.0)
        assert answer == "ERROR", f"the unconfirmed SEND got {answer}"
        assert time.monotonic() - started > 2.0, "failed before its send_timeout"
        embedded_serves(gateway)


# --- timing ----------------------------------------------------------------------------------


def test_a_broker_asking_for_1ms_heart_beats_gets_the_gateways_interval(make_gateway: MakeGateway) -> None:
    """CONNECTED with heart-beat:1,1 and a newline every millisecond from the broker: the gateway
    sends at its own interval (max(own, broker's), the spec), not every millisecond."""
    sides: list[BrokerSide] = []
    stop = threading.Event()

    def eager(side: BrokerSide) -> None:
        if side.connected(heart_beat="1,1") is None:
            return
        sides.append(side)
        frames_thread = threading.Thread(target=side.serve, args=(stop.is_set,), daemon=True)
        frames_thread.start()
        while not stop.is_set() and side.write(b"\n"):
            time.sleep(0.001)

    with fake_broker(eager) as broker:
        gateway = make_gateway(connector_config(broker, heartbeat="[1000, 1000]"))
        wait_until(lambda: bool(sides), 10, "a connection")
        received = broker.bytes_received
        time.sleep(3.0)
        beats = broker.bytes_received - received
        assert beats <= 8, f"{beats} bytes of heart-beats in 3 s from a gateway that offers 1000 ms"
        assert send(gateway, "/queue/jms.hb", "one") == "RECEIPT"
        assert broker.connections == 1
        embedded_serves(gateway)
        stop.set()


def test_a_broker_stalled_mid_frame_is_given_up_by_heart_beat_and_the_send_fails(
        make_gateway: MakeGateway) -> None:
    """Half a RECEIPT, then silence without a reset: the SEND fails within send_timeout (+ the
    sweep), the connection is dropped for its silence (3 heart-beat intervals) and rebuilt."""
    stalled: list[BrokerSide] = []

    def stall(side: BrokerSide) -> None:
        if side.connected(heart_beat="500,500") is None:
            return
        stalled.append(side)
        frame = side.frame()
        assert frame is not None
        side.write(f"RECEIPT\nreceipt-id:{frame.headers.get('receipt', '')[:1]}")
        while not side.closed:
            side.frame(timeout=0.2)  # read the gateway's beats, write nothing

    with fake_broker(scripts=[stall]) as broker:
        gateway = make_gateway(connector_config(broker, heartbeat="[500, 500]"))
        started = time.monotonic()
        assert send(gateway, "/queue/jms.stall", "one", timeout=10.0) == "ERROR"
        assert time.monotonic() - started < 3.0 + 2.5
        wait_closed(stalled, 10, "the stalled connection to be dropped")
        wait_until(lambda: broker.connections >= 2, 10, "a reconnection")
        assert send(gateway, "/queue/jms.after", "two") == "RECEIPT"
        assert "amq" in gateway.log()
        embedded_serves(gateway)


def test_a_broker_trickling_one_header_byte_at_a_time_does_not_hold_a_send_past_its_timeout(
        make_gateway: MakeGateway) -> None:
    """Data keeps coming (so heart-beat silence never trips) but never completes a frame: the
    receipt sweep still fails the SEND at send_timeout."""

    def trickle(side: BrokerSide) -> None:
        if side.connected(heart_beat="500,500") is None:
            return
        side.frame()
        side.write("RECEIPT\n")
        while side.write(b"x"):
            time.sleep(0.2)

    with fake_broker(scripts=[trickle]) as broker:
        gateway = make_gateway(connector_config(broker, heartbeat="[500, 500]"))
        started = time.monotonic()
        assert send(gateway, "/queue/jms.trickle", "one", timeout=10.0) == "ERROR"
        assert time.monotonic() - started < 3.0 + 2.5
        embedded_serves(gateway)
        assert broker.connections >= 1


def test_a_broker_that_never_answers_connect_is_retried_and_sends_fail_in_time(
        make_gateway: MakeGateway) -> None:
    def mute(side: BrokerSide) -> None:
        while not side.closed:
            side.frame(timeout=0.2)

    with fake_broker(mute) as broker:
        gateway = make_gateway(connector_config(broker))
        started = time.monotonic()
        assert send(gateway, "/queue/jms.mute", "one", timeout=10.0) == "ERROR"
        assert time.monotonic() - started < 3.0 + 2.5
        wait_until(lambda: broker.connections >= 2, 10, "a second attempt")
        assert all(frame.command in ("CONNECT", "STOMP") for _, frame in broker.frames)
        log = gateway.log()
        assert "amq" in log and ("timed out" in log or "timeout" in log), log[-3000:]
        embedded_serves(gateway)


# --- a bridge whose source broker breaks the connection mid-stream ---------------------------


class Queue:
    """The fake broker's queue: messages stay until ACKed (or committed), redelivered on a new connection."""

    def __init__(self, count: int) -> None:
        self.pending = {f"m{index}": f"body-{index}" for index in range(count)}
        self.lock = threading.Lock()
        self.acked: list[str] = []
        self.transactions: dict[str, list[str]] = {}

    def record(self, frame: BrokerFrame) -> None:
        with self.lock:
            if frame.command == "ACK":
                tag = frame.headers.get("id", frame.headers.get("message-id", ""))
                if "transaction" in frame.headers:
                    self.transactions.setdefault(frame.headers["transaction"], []).append(tag)
                else:
                    self.ack(tag)
            elif frame.command == "COMMIT":
                for tag in self.transactions.pop(frame.headers.get("transaction", ""), []):
                    self.ack(tag)
            elif frame.command == "ABORT":
                self.transactions.pop(frame.headers.get("transaction", ""), None)

    def ack(self, tag: str) -> None:
        if self.pending.pop(tag, None) is not None:
            self.acked.append(tag)


def read_queue(gateway: GatewayProcess, destination: str, expected: int, timeout: float = 20.0) -> list[str]:
    client = RawStomp(gateway.address)
    try:
        client.connect()
        client.send(f"SUBSCRIBE\nid:0\ndestination:{destination}\nack:auto\n\n\x00")
        bodies: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            item = client.item(1.0 if len(bodies) >= expected else deadline - time.monotonic())
            if item is None:
                if len(bodies) >= expected:
                    break
                continue
            assert getattr(item, "command", "") == "MESSAGE", item
            bodies.append(item.body.decode())  # type: ignore[union-attr]
        return bodies
    finally:
        client.close()


@pytest.mark.parametrize("qos", ["DUPLICATES_OK", "ONCE_AND_ONLY_ONCE"])
def test_a_bridge_from_a_broker_that_breaks_mid_stream_loses_nothing(make_gateway: MakeGateway, qos: str) -> None:
    """The source broker delivers 30 messages, then writes a frame that cannot parse (a lying
    content-length) in the middle of the stream; on the next connection it redelivers what was
    not acknowledged. Every message reaches the embedded target; under ONCE_AND_ONLY_ONCE once."""
    queue = Queue(30)
    broke: list[bool] = []

    def source(side: BrokerSide) -> None:
        for frame in side.connected_frames():
            queue.record(frame)
            side.answer(frame)
            if frame.command == "SUBSCRIBE":
                with queue.lock:
                    pending = list(queue.pending.items())
                for index, (tag, body) in enumerate(pending):
                    side.message(frame.headers["id"], "/queue/in", tag, body, extra="persistent:true\n")
                    if not broke and index == 12:
                        broke.append(True)
                        time.sleep(0.3)
                        side.write(b"MESSAGE\nsubscription:x\ncontent-length:1\n\nxyz\x00")

    with fake_broker(source) as broker:
        gateway = make_gateway(connector_config(broker) + f"""
[[bridges]]
name = "from-fake"
source = {{ connector = "amq", destination = "/queue/in" }}
target = {{ connector = "embedded", destination = "/queue/bridged" }}
qos = "{qos}"
failure_retry_interval = 300
max_batch_size = 5
max_batch_time = 50
""")
        wait_until(lambda: not queue.pending, 30, f"every message acknowledged at the source ({queue.pending})")
        assert broker.connections >= 2, "the broken frame did not cost the connection"
        bodies = read_queue(gateway, "/queue/bridged", 30)
        assert set(bodies) == {f"body-{index}" for index in range(30)}, sorted(bodies)
        if qos == "ONCE_AND_ONLY_ONCE":
            assert len(bodies) == 30, f"duplicates: {sorted(bodies)}"
        embedded_serves(gateway)


@pytest.mark.parametrize("qos", ["ONCE_AND_ONLY_ONCE", "AT_MOST_ONCE"])
def test_a_broker_delivering_every_message_twice_is_copied_once(make_gateway: MakeGateway, qos: str) -> None:
    """The source broker delivers each of 20 messages twice on the same subscription (same id, no
    redelivered flag): a bridge whose quality of service forbids duplicates copies each once."""
    queue = Queue(20)

    def doubled(side: BrokerSide) -> None:
        for frame in side.connected_frames():
            queue.record(frame)
            side.answer(frame)
            if frame.command == "SUBSCRIBE":
                with queue.lock:
                    pending = list(queue.pending.items())
                for tag, body in pending:
                    for _ in range(2):
                        side.message(frame.headers["id"], "/queue/in", tag, body, extra="persistent:true\n")

    with fake_broker(doubled) as broker:
        gateway = make_gateway(connector_config(broker) + f"""
[[bridges]]
name = "doubled"
source = {{ connector = "amq", destination = "/queue/in" }}
target = {{ connector = "embedded", destination = "/queue/bridged" }}
qos = "{qos}"
max_batch_size = 5
max_batch_time = 50
""")
        wait_until(lambda: not queue.pending, 30, f"every message acknowledged at the source ({queue.pending})")
        bodies = read_queue(gateway, "/queue/bridged", 20, timeout=10)
        assert sorted(bodies) == sorted(f"body-{index}" for index in range(20)), sorted(bodies)
        embedded_serves(gateway)


def test_a_clients_subscription_survives_a_frame_with_a_bad_escape(make_gateway: MakeGateway) -> None:
    r"""The broker sends the gateway a MESSAGE whose header has an escape STOMP 1.2 does not define
    (`\t`): an unreadable frame, so the connection goes; on the next one the gateway subscribes again
    for its STOMP client, whose next message arrives."""
    subscribed = threading.Event()

    def bad_escape(side: BrokerSide) -> None:
        for frame in side.connected_frames():
            side.answer(frame)
            if frame.command == "SUBSCRIBE":
                subscribed.set()
                side.write(f"MESSAGE\nsubscription:{frame.headers['id']}\ndestination:/queue/jms.sub\n"
                           "message-id:bad-1\nx-bad:tab\\there\n\nbroken\x00")

    def good(side: BrokerSide) -> None:
        for frame in side.connected_frames():
            side.answer(frame)
            if frame.command == "SUBSCRIBE":
                side.message(frame.headers["id"], "/queue/jms.sub", "good-1", "whole")

    with fake_broker(scripts=[bad_escape, good]) as broker:
        gateway = make_gateway(connector_config(broker))
        client = RawStomp(gateway.address)
        client.connect()
        client.send("SUBSCRIBE\nid:s\ndestination:/queue/jms.sub\nack:auto\nreceipt:sub\n\n\x00")
        assert client.frame().command == "RECEIPT"
        frame = client.frame(10)
        assert frame.command == "MESSAGE" and frame.body == b"whole", frame
        assert broker.connections >= 2
        assert "bad-1" not in frame.headers.get("message-id", "")
        log = gateway.log()
        assert "unreadable frame from broker" in log, log[-3000:]
        client.close()
        embedded_serves(gateway)


@pytest.mark.parametrize("when", ["at-accept", "after-connected"])
def test_a_broker_that_hangs_up_at_once_is_retried_at_the_configured_pace(make_gateway: MakeGateway,
                                                                          when: str) -> None:
    """A broker that closes every connection at once, before CONNECTED or right after it: the
    connector must not spin (one attempt per `failure_retry_interval`, 500 ms here), and the log
    must not grow by more than a few lines an attempt."""

    def hang_up(side: BrokerSide) -> None:
        if when == "after-connected":
            side.connected()
        side.sock.close()
        side.closed = True

    with fake_broker(hang_up) as broker:
        gateway = make_gateway(connector_config(broker, failure_retry_interval=500))
        size = len(gateway.log())
        start = broker.connections
        time.sleep(3.0)
        attempts = broker.connections - start
        grown = gateway.log()[size:]
        assert attempts <= 8, f"{attempts} connections in 3 s with failure_retry_interval = 500"
        assert grown.count("\n") <= 6 * max(attempts, 1), grown[-3000:]
        embedded_serves(gateway)


def test_a_bridge_into_a_broker_that_first_never_answers_connect_delivers_everything_later(
        make_gateway: MakeGateway) -> None:
    """The target broker swallows two CONNECTs (no answer, no reset), then behaves: the bridge waits
    and retries per its settings, the messages stay at the embedded source meanwhile, and then all
    of them reach the broker, none lost."""

    def mute(side: BrokerSide) -> None:
        while not side.closed:
            side.frame(timeout=0.2)

    with fake_broker(scripts=[mute, mute]) as broker:
        gateway = make_gateway(connector_config(broker) + """
[[bridges]]
name = "to-fake"
source = { connector = "embedded", destination = "/queue/src" }
target = { connector = "amq", destination = "/queue/out" }
qos = "DUPLICATES_OK"
failure_retry_interval = 300
""")
        for index in range(10):
            assert send(gateway, "/queue/src", f"m{index}", receipt=f"r{index}") == "RECEIPT"
        wait_until(lambda: {f"m{index}".encode() for index in range(10)} <= {f.body for f in broker.sent}, 30,
                   "every message at the target broker")
        assert broker.connections >= 3
        embedded_serves(gateway)


def test_a_broker_ignoring_prefetch_does_not_fill_the_gateways_memory(make_gateway: MakeGateway) -> None:
    """A client subscribes with prefetch 5 and stops reading; the broker ignores the prefetch and
    writes 160 MESSAGEs of 1 MiB. The gateway may hold what the prefetch allows (and what its
    socket buffers take), not everything the broker writes."""
    written: list[int] = []
    body = "x" * (1024 * 1024)

    def flood(side: BrokerSide) -> None:
        for frame in side.connected_frames():
            side.answer(frame)
            if frame.command == "SUBSCRIBE" and frame.headers.get("destination") == "/queue/jms.flood":
                side.sock.settimeout(5.0)
                count = 0
                for index in range(160):
                    try:
                        side.sock.sendall(
                            f"MESSAGE\nsubscription:{frame.headers['id']}\ndestination:/queue/jms.flood\n"
                            f"message-id:f{index}\nack:f{index}\ncontent-length:{len(body)}\n\n{body}\x00".encode())
                    except OSError:
                        break
                    count += 1
                written.append(count)
                side.serve()

    with fake_broker(flood) as broker:
        gateway = make_gateway(connector_config(broker))
        before = rss_kib(gateway)
        client = RawStomp(gateway.address)
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        client.connect()
        client.send("SUBSCRIBE\nid:s\ndestination:/queue/jms.flood\nack:client-individual\n"
                    "activemq.prefetchSize:5\n\n\x00")
        wait_until(lambda: bool(written), 60, "the broker's flood to end or block")
        time.sleep(1.0)
        growth_mib = (rss_kib(gateway) - before) / 1024
        assert growth_mib < 64, f"RSS grew {growth_mib:.0f} MiB: the broker wrote {written[0]} MiB past prefetch 5"
        assert send(gateway, "/queue/local.check", "fine", timeout=5.0) == "RECEIPT"
        assert "ignores the prefetch" in gateway.log(), gateway.log()[-3000:]
        client.close()


def test_a_bridge_source_ignoring_prefetch_while_the_target_stalls_keeps_memory_bounded(
        make_gateway: MakeGateway) -> None:
    """The target broker never confirms a SEND (the bridge's window fills) while the source broker
    ignores the bridge's prefetch (100) and writes 3,000 messages of 64 KiB: the gateway must not
    take them all in."""
    written: list[int] = []
    body = "y" * 65536

    def flood(side: BrokerSide) -> None:
        for frame in side.connected_frames():
            side.answer(frame)
            if frame.command == "SUBSCRIBE":
                side.sock.settimeout(5.0)
                count = 0
                for index in range(3000):
                    try:
                        side.sock.sendall(
                            f"MESSAGE\nsubscription:{frame.headers['id']}\ndestination:/queue/in\n"
                            f"message-id:f{index}\nack:f{index}\npersistent:true\n"
                            f"content-length:{len(body)}\n\n{body}\x00".encode())
                    except OSError:
                        break
                    count += 1
                written.append(count)
                side.serve()

    def stalled_target(side: BrokerSide) -> None:
        if side.connected() is None:
            return
        while not side.closed:
            frame = side.frame(timeout=0.2)
            if frame is not None and frame.command not in ("SEND", "COMMIT") and "receipt" in frame.headers:
                side.answer(frame)  # SUBSCRIBEs and the like, never a SEND nor a batch's COMMIT

    with fake_broker(flood) as source, fake_broker(stalled_target) as target:
        config = connector_table("amq", source, send_timeout=60000) + connector_table("amq2", target,
                                                                                      send_timeout=60000)
        gateway = make_gateway(config + """
[[bridges]]
name = "stalled"
source = { connector = "amq", destination = "/queue/in" }
target = { connector = "amq2", destination = "/queue/out" }
qos = "DUPLICATES_OK"
max_batch_size = 5
max_batch_time = 50
""")
        before = rss_kib(gateway)
        wait_until(lambda: bool(written), 60, "the source's flood to end or block")
        time.sleep(1.0)
        growth_mib = (rss_kib(gateway) - before) / 1024
        assert growth_mib < 64, (f"RSS grew {growth_mib:.0f} MiB: the source wrote {written[0]} x 64 KiB "
                                 "past prefetch 100 while the target stalled")
        assert "ignores the prefetch" in gateway.log(), gateway.log()[-3000:]  # (bounded by design, not by chance)
        embedded_serves(gateway)


def test_a_message_the_gateway_took_comes_back_from_the_broker_whatever_headers_it_adds(
        make_gateway: MakeGateway) -> None:
    """A client SENDs a body just under [stomp] max_frame_size (32 MiB); the broker delivers it back
    with the headers brokers add (ids, timestamps, here 4 KiB of them). The broker connection's limit
    must leave room for them: else the MESSAGE kills the connection, comes again after the
    reconnection, kills it again, and the subscriber never gets it (a poison message)."""
    body = b"z" * (32 * 1024 * 1024 - 1024)
    stored: list[bytes] = []

    def echo(side: BrokerSide) -> None:
        for frame in side.connected_frames():
            side.answer(frame)
            if frame.command == "SEND":
                stored.append(frame.body)
            if frame.command == "SUBSCRIBE" and stored:
                side.write(f"MESSAGE\nsubscription:{frame.headers['id']}\ndestination:/queue/jms.big\n"
                           f"message-id:big-1\nack:big-1\nx-broker-trace:{'t' * 4096}\n"
                           f"content-length:{len(stored[0])}\n\n".encode() + stored[0] + b"\x00")

    with fake_broker(echo) as broker:
        gateway = make_gateway(connector_config(broker, send_timeout=20000))
        client = RawStomp(gateway.address, timeout=30)
        client.decoder = FrameDecoder(Limits(max_frame_size=64 * 1024 * 1024), version="1.2")  # (the headers)
        client.connect()
        client.send(b"SEND\ndestination:/queue/jms.big\nreceipt:r\ncontent-length:%d\n\n" % len(body) + body + b"\x00")
        assert client.frame(30).command == "RECEIPT"
        client.send("SUBSCRIBE\nid:s\ndestination:/queue/jms.big\nack:auto\n\n\x00")
        frame = client.frame(30)
        assert frame.command == "MESSAGE" and len(frame.body) == len(body), (frame.command, frame.headers)
        client.close()
        assert broker.connections == 1, broker.errors
