"""Bridges inside the real gateway process (``[[bridges]]`` in its config), on the
embedded broker with SQLite persistence, driven by stomp.py.

Fault injection: the gateway is SIGKILLed while a producer sends and the bridge
moves messages, restarted, SIGKILLed again while the bridge works off its
backlog, and restarted; then a consumer drains the target.  A checker counts by
the producer's ``seq`` header: a receipted seq missing at the target is lost;
a seq arriving under two target message ids is duplicated.  AT_MOST_ONCE may
lose (counted, printed), DUPLICATES_OK loses nothing, ONCE_AND_ONLY_ONCE loses
nothing and duplicates nothing.  Also: message-id header across two hops, a
durable topic subscription across gateway restarts, the selector, a bad bridge
config stopping start-up with a clear message.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

SQLITE = ["--set", 'broker.persistence="sqlite"']


def bridge_toml(name: str, source: str, target: str, **params: object) -> str:
    """One ``[[bridges]]`` entry between two embedded destinations."""
    lines = ["[[bridges]]", f'name = "{name}"', f'source = {{ connector = "embedded", destination = "{source}" }}',
             f'target = {{ connector = "embedded", destination = "{target}" }}']
    for key, value in params.items():
        rendered = ("true" if value else "false") if isinstance(value, bool) else (
            f'"{value}"' if isinstance(value, str) else str(value))
        lines.append(f"{key} = {rendered}")
    return "\n".join(lines) + "\n"


@dataclass
class Tally:
    """What the producer had confirmed and what reached the target, by seq."""

    receipted: set[str] = field(default_factory=set)
    arrivals: dict[str, set[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def arrived(self, seq: str, message_id: str) -> None:
        with self.lock:
            self.arrivals.setdefault(seq, set()).add(message_id)

    @property
    def lost(self) -> set[str]:
        return self.receipted - set(self.arrivals)

    @property
    def duplicated(self) -> dict[str, set[str]]:
        return {seq: ids for seq, ids in self.arrivals.items() if len(ids) > 1}

    def summary(self) -> str:
        return (f"receipted {len(self.receipted)}, arrived {len(self.arrivals)}, lost {len(self.lost)}, "
                f"duplicated {len(self.duplicated)}")


def send_receipted(client: Client, destination: str, body: str, timeout: float = 10.0,
                   headers: Mapping[str, str] | None = None, **more_headers: str) -> bool:
    """SEND with a receipt; True once it came, False if the connection died first."""
    receipt_id = uuid.uuid4().hex
    event = client.listener.receipt_event(receipt_id)
    try:
        client.connection.send(destination, body, headers={**(headers or {}), **more_headers, "receipt": receipt_id})
    except Exception:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if event.wait(0.05):
            return True
        if client.listener.disconnected.is_set():
            return False
    return False


class Producer(threading.Thread):
    """Sends persistent messages with a ``seq`` header, one receipt each, until stopped or cut."""

    def __init__(self, gateway: GatewayProcess, destination: str, tally: Tally, prefix: str,
                 limit: int = 100_000, **headers: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(gateway.address)
        self.destination = destination
        self.tally = tally
        self.prefix = prefix
        self.limit = limit
        self.headers = headers
        self.halt = threading.Event()

    def run(self) -> None:
        for index in range(self.limit):
            if self.halt.is_set():
                return
            seq = f"{self.prefix}-{index}"
            if not send_receipted(self.client, self.destination, f"body {seq}", seq=seq, persistent="true",
                                  headers=self.headers):
                return
            with self.tally.lock:
                self.tally.receipted.add(seq)

    def count(self) -> int:
        with self.tally.lock:
            return len(self.tally.receipted)


def drain(server: GatewayProcess | tuple[str, int], destination: str, tally: Tally, expected: set[str],
          quiet: float = 1.5, timeout: float = 60.0) -> None:
    """Consume ``destination`` (at the gateway or any STOMP broker) until every expected
    seq arrived and nothing came for ``quiet`` seconds."""
    client = Client(server.address if isinstance(server, GatewayProcess) else server)
    try:
        client.subscribe(destination, "drain", ack="auto")
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            try:
                frame = client.listener.messages.get(timeout=0.1)
            except queue.Empty:
                if expected <= set(tally.arrivals) and time.monotonic() - last > quiet:
                    return
                continue
            last = time.monotonic()
            tally.arrived(frame.headers["seq"], frame.headers["message-id"])
    finally:
        client.disconnect()


def crash_run(tmp_path: Path, qos: str, batch: int, *, may_lose: bool = False) -> tuple[Tally, GatewayProcess]:
    config = bridge_toml("crash", "/queue/bsrc", "/queue/bdst", qos=qos, max_batch_size=batch, max_batch_time=20,
                         failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    tally = Tally()
    try:
        producer = Producer(gateway, "/queue/bsrc", tally, "p1", limit=600)
        producer.start()
        wait_until(lambda: producer.count() >= 300, 60, "300 receipted sends")
        gateway.kill()  # mid-stream: the producer sends, the bridge moves
        producer.halt.set()
        producer.join(10)
        gateway.start()
        backlog = Producer(gateway, "/queue/bsrc", tally, "p2", limit=300)
        backlog.run()  # more for the bridge to work off
        time.sleep(0.05)
        gateway.kill()  # while the bridge works off the backlog
        gateway.start()
        drain(gateway, "/queue/bdst", tally, set() if may_lose else tally.receipted, quiet=3.0 if may_lose else 1.5)
    except BaseException:
        print(gateway.log()[-4000:])
        raise
    return tally, gateway


@pytest.mark.parametrize("batch", [1, 20])
def test_duplicates_ok_loses_nothing_across_gateway_crashes(tmp_path: Path, batch: int) -> None:
    tally, gateway = crash_run(tmp_path, "DUPLICATES_OK", batch)
    try:
        print(f"DUPLICATES_OK batch {batch}: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
    finally:
        gateway.stop()


@pytest.mark.parametrize("batch", [1, 20])
def test_once_and_only_once_loses_and_duplicates_nothing_across_gateway_crashes(tmp_path: Path, batch: int) -> None:
    tally, gateway = crash_run(tmp_path, "ONCE_AND_ONLY_ONCE", batch)
    try:
        print(f"ONCE_AND_ONLY_ONCE batch {batch}: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"
        assert (Path(gateway.data_dir) / "bridges.sqlite").exists()
    finally:
        gateway.stop()


def test_at_most_once_never_duplicates_and_its_losses_are_counted(tmp_path: Path) -> None:
    tally, gateway = crash_run(tmp_path, "AT_MOST_ONCE", 20, may_lose=True)
    try:
        print(f"AT_MOST_ONCE batch 20: {tally.summary()}")
        assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]}"
        assert len(tally.arrivals) + len(tally.lost) >= len(tally.receipted)
    finally:
        gateway.stop()


def test_message_id_header_across_two_hops(make_gateway: Callable[..., GatewayProcess]) -> None:
    config = (bridge_toml("hop1", "/queue/h0", "/queue/h1", add_message_id_in_header=True)
              + bridge_toml("hop2", "/queue/h1", "/queue/h2", add_message_id_in_header=True))
    gateway = make_gateway(config)
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/h2", "c")
    producer = Client(gateway.address)
    producer.send("/queue/h0", "ping", receipt=True, seq="1")
    frame = consumer.message(10)
    ids = frame.headers["AMQ_BRIDGE_MSG_ID_LIST"].split(",")
    assert len(ids) == 2 and all(i.startswith("ID:") for i in ids) and ids[0] != ids[1]
    assert frame.headers["message-id"] not in ids
    assert frame.body == b"ping"


def test_selector_and_batch_in_the_gateway(make_gateway: Callable[..., GatewayProcess]) -> None:
    config = bridge_toml("sel", "/queue/s0", "/queue/s1", selector="color = 'red'", max_batch_size=5,
                         max_batch_time=50)
    gateway = make_gateway(config)
    producer = Client(gateway.address)
    for index in range(12):
        producer.send("/queue/s0", str(index), receipt=True, color="red" if index % 2 == 0 else "blue")
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/s1", "c")
    got = [frame.body for frame in consumer.messages(6, timeout=10)]
    assert got == [str(i).encode() for i in range(0, 12, 2)]
    assert consumer.no_message(0.5)
    rest = Client(gateway.address)
    rest.subscribe("/queue/s0", "r")
    assert sorted(frame.body for frame in rest.messages(6)) == sorted(str(i).encode() for i in range(1, 12, 2))


def test_durable_subscription_across_gateway_restarts(tmp_path: Path) -> None:
    config = bridge_toml("news", "/topic/news", "/queue/news-copy", subscription_name="news-sub",
                         client_id="bridge-news", max_batch_time=10)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    try:
        producer = Client(gateway.address)
        producer.send("/topic/news", "before", receipt=True, persistent="true")
        gateway.stop()
        # The durable subscription exists while the gateway (and its bridge) is down; a new
        # gateway with the bridge disabled takes messages that the subscription must keep.
        gateway.config_path.write_text(gateway.config_path.read_text().replace("max_batch_time = 10",
                                                                               "max_batch_time = 10\nenabled = false"))
        gateway.start()
        producer = Client(gateway.address)
        for body in ("while-1", "while-2"):
            producer.send("/topic/news", body, receipt=True, persistent="true")
        gateway.stop()
        gateway.config_path.write_text(gateway.config_path.read_text().replace("\nenabled = false", ""))
        gateway.start()
        consumer = Client(gateway.address)
        consumer.subscribe("/queue/news-copy", "c")
        got = [frame.body for frame in consumer.messages(3, timeout=10)]
        assert got == [b"before", b"while-1", b"while-2"]
    finally:
        gateway.stop()


def test_a_bad_bridge_stops_start_up_with_the_key(tmp_path: Path) -> None:
    config = bridge_toml("bad", "/queue/a", "/queue/b", max_batch_time=0)
    gateway = GatewayProcess(tmp_path / "gw", config)
    with pytest.raises(RuntimeError) as caught:
        gateway.start(timeout=20)
    assert "bridges[0].max_batch_time" in str(caught.value)
    assert "-1 (wait forever) or >= 1" in str(caught.value)
