"""Persistence of the embedded broker through the real gateway process and stomp.py.

The gateway runs with ``broker.persistence = "sqlite"`` and is killed with
SIGKILL (or stopped) between the steps: durable subscriptions keep their
identity and backlog, client-ack deliveries that were never acknowledged
come back ``redelivered:true``, priorities and expirations hold, only
persistent messages are kept.  A corrupt database stops start-up with a
message naming the file; a full disk (a real, small tmpfs) makes SENDs fail
with an ERROR frame while consumers are still served.
"""

from __future__ import annotations

import queue
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client

SQLITE = ["--set", 'broker.persistence="sqlite"']


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path / "gateway", args=SQLITE).start()
    yield process
    process.kill()


def queue_name() -> str:
    return f"/queue/p.{uuid.uuid4().hex[:8]}"


def drain(client: Client, quiet: float = 0.5) -> list[str]:
    """Bodies of the messages that arrive until none comes for ``quiet`` seconds."""
    bodies = []
    while True:
        try:
            bodies.append(client.listener.messages.get(timeout=quiet).body.decode())
        except queue.Empty:
            return bodies


def send_or_refusal(client: Client, destination: str, body: str) -> Any:
    """SEND a persistent message with a receipt: None once receipted, else the ERROR frame."""
    receipt = uuid.uuid4().hex
    event = client.listener.receipt_event(receipt)
    client.connection.send(destination, body, headers={"persistent": "true", "receipt": receipt})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if event.wait(0.05):
            return None
        error = client.error(timeout=0)
        if error is not None:
            return error
    raise AssertionError(f"neither RECEIPT nor ERROR for a SEND to {destination} within 10s")


def test_queued_messages_survive_a_kill(gateway: GatewayProcess) -> None:
    destination = queue_name()
    producer = Client(gateway.address, text=True)
    for i in range(20):
        producer.send(destination, f"m{i}", receipt=True, persistent="true")
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    consumer.subscribe(destination)
    assert drain(consumer) == [f"m{i}" for i in range(20)]
    consumer.disconnect()


def test_durable_subscription_backlog_survives_a_kill(gateway: GatewayProcess) -> None:
    durable = {"activemq.subscriptionName": "news-reader"}
    reader = Client(gateway.address, headers={"client-id": "reader-app"})
    reader.subscribe("/topic/news", ack="client-individual", headers=durable)
    reader.disconnect()
    producer = Client(gateway.address, text=True)
    for i in range(10):
        producer.send("/topic/news", f"kept-{i}", receipt=True, persistent="true")
    producer.send("/topic/news", "not-kept", receipt=True)  # non-persistent: memory only, as in ActiveMQ
    gateway.kill()
    gateway.start()
    stranger = Client(gateway.address, headers={"client-id": "someone-else"})
    stranger.subscribe("/topic/news", headers=durable)
    assert stranger.no_message(0.5), "another client's durable subscription got the backlog"
    reader = Client(gateway.address, headers={"client-id": "reader-app"})
    reader.subscribe("/topic/news", ack="client-individual", headers=durable)
    frames = [reader.message() for _ in range(10)]
    assert [f.body.decode() for f in frames] == [f"kept-{i}" for i in range(10)]
    assert all(f.headers.get("persistent") == "true" for f in frames)
    assert reader.no_message(0.5)
    for frame in frames:
        reader.ack(frame)
    reader.disconnect()
    gateway.kill()
    gateway.start()
    reader = Client(gateway.address, headers={"client-id": "reader-app"})
    reader.subscribe("/topic/news", ack="client-individual", headers=durable)
    assert reader.no_message(0.5), "acknowledged backlog came back"
    reader.disconnect()


def test_unacknowledged_client_ack_deliveries_come_back_redelivered(gateway: GatewayProcess) -> None:
    destination = queue_name()
    producer = Client(gateway.address, text=True)
    for i in range(6):
        producer.send(destination, f"m{i}", receipt=True, persistent="true")
    consumer = Client(gateway.address)
    consumer.subscribe(destination, ack="client-individual", headers={"activemq.prefetchSize": "4"})
    frames = consumer.messages(4)
    assert [f.body.decode() for f in frames] == ["m0", "m1", "m2", "m3"]
    assert not any(f.headers.get("redelivered") == "true" for f in frames)
    # Stores apply writes in order: this RECEIPT means the records of the four
    # deliveries (issued before the frames went out) are on disk too.
    producer.send(queue_name(), "barrier", receipt=True, persistent="true")
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    consumer.subscribe(destination, ack="client-individual")
    again = [(f.body.decode(), f.headers.get("redelivered")) for f in consumer.messages(6)]
    assert again == [("m0", "true"), ("m1", "true"), ("m2", "true"), ("m3", "true"), ("m4", None), ("m5", None)]
    assert consumer.no_message(0.3)
    consumer.disconnect()


def test_priorities_and_expirations_hold_across_a_restart(gateway: GatewayProcess) -> None:
    destination = queue_name()
    producer = Client(gateway.address, text=True)
    now_ms = int(time.time() * 1000)
    producer.send(destination, "low", receipt=True, persistent="true", priority="1")
    producer.send(destination, "soon-expired", receipt=True, persistent="true", expires=str(now_ms + 1500))
    producer.send(destination, "high", receipt=True, persistent="true", priority="9")
    producer.send(destination, "normal", receipt=True, persistent="true", expires=str(now_ms + 3_600_000))
    gateway.kill()
    time.sleep(max(0.0, (now_ms + 1600) / 1000 - time.time()))
    gateway.start()
    consumer = Client(gateway.address)
    consumer.subscribe(destination)
    frames = [consumer.message() for _ in range(3)]
    assert [f.body.decode() for f in frames] == ["high", "normal", "low"]
    assert frames[1].headers["expires"] == str(now_ms + 3_600_000)
    assert consumer.no_message(0.3)
    assert "1 expired messages purged" in gateway.log()
    consumer.disconnect()


def test_only_persistent_messages_are_kept_by_default(gateway: GatewayProcess) -> None:
    destination = queue_name()
    producer = Client(gateway.address, text=True)
    producer.send(destination, "persistent", receipt=True, persistent="true")
    producer.send(destination, "no-header", receipt=True)
    producer.send(destination, "explicitly-not", receipt=True, persistent="false")
    gateway.stop()
    gateway.start()
    consumer = Client(gateway.address)
    consumer.subscribe(destination)
    assert drain(consumer) == ["persistent"]
    consumer.disconnect()


def test_the_default_configuration_keeps_receipted_persistent_messages_across_kill(tmp_path: Path) -> None:
    """No ``persistence`` key anywhere: ``kill -9`` loses no receipted persistent SEND (issue 24)."""
    gateway = GatewayProcess(tmp_path / "gateway")
    shipped = [line.split("#")[0] for line in gateway.config_path.read_text().splitlines()]
    assert not any(line.strip().startswith("persistence") for line in shipped), "the test needs the default"
    destination = queue_name()
    try:
        gateway.start()
        producers = [Client(gateway.address, text=True) for _ in range(3)]
        for i in range(60):
            producers[i % 3].send(destination, f"m{i}", receipt=True, persistent="true")
        producers[0].send(destination, "not-persistent", receipt=True)  # stays in memory, as on ActiveMQ
        gateway.kill()
        gateway.start()
        consumer = Client(gateway.address)
        consumer.subscribe(destination)
        assert sorted(drain(consumer)) == sorted(f"m{i}" for i in range(60))
        consumer.disconnect()
        assert (gateway.data_dir / "broker.sqlite").exists()
    finally:
        gateway.kill()


def test_default_persistence_can_be_switched_on(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gateway", args=[*SQLITE, "--set", "broker.default_persistent=true"])
    try:
        gateway.start()
        destination = queue_name()
        producer = Client(gateway.address, text=True)
        producer.send(destination, "no-header", receipt=True)
        producer.send(destination, "explicitly-not", receipt=True, persistent="false")
        gateway.kill()
        gateway.start()
        consumer = Client(gateway.address)
        consumer.subscribe(destination)
        assert drain(consumer) == ["no-header"]
        consumer.disconnect()
    finally:
        gateway.kill()


def test_a_corrupt_database_stops_startup_naming_the_file(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gateway", args=SQLITE)
    database = gateway.data_dir / "broker.sqlite"
    database.parent.mkdir(parents=True)
    database.write_bytes(b"this is not an SQLite database, it is a crash survivor\n" * 100)
    with pytest.raises(RuntimeError) as failed:
        gateway.start(timeout=30)
    assert gateway.process is not None and gateway.process.returncode not in (0, None)
    output = str(failed.value)
    assert f"jmsgateway cannot start: message store {database} is corrupt" in output
    assert "Traceback" not in output.split("jmsgateway cannot start")[-1]
    assert database.read_bytes().startswith(b"this is not an SQLite database"), "the evidence was overwritten"


# -- a full disk --------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 24 MiB tmpfs (mounting needs root, which the test machines have)."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mountpoint)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs for the full-disk test (root needed): {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def test_a_full_disk_refuses_sends_and_keeps_serving_consumers(tmp_path: Path, small_disk: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gateway", args=[*SQLITE, "--data-dir", str(small_disk)])
    body = "x" * 65_536
    try:
        gateway.start()
        destination = queue_name()
        consumer = Client(gateway.address)
        consumer.subscribe(destination, ack="client-individual", headers={"activemq.prefetchSize": "1000"})
        accepted: list[str] = []
        producer = Client(gateway.address, text=True)
        for index in range(1_000):
            refusal = send_or_refusal(producer, destination, f"{index}:{body}")
            if refusal is not None:
                break
            accepted.append(str(index))
        assert refusal is not None, "the disk never filled up"
        assert refusal.headers["message"] == "message store failure"
        assert str(small_disk / "broker.sqlite") in refusal.body.decode() and "full" in refusal.body.decode()
        assert len(accepted) > 10
        # Consumers are still served, and their acknowledgements go through.
        frames = consumer.messages(len(accepted))
        assert [f.body.decode().split(":")[0] for f in frames] == accepted
        for frame in frames[:-5]:
            consumer.ack(frame)
        # The space acknowledged messages took is reused: sends are accepted again.
        producer = Client(gateway.address, text=True)
        assert send_or_refusal(producer, destination, f"after:{body}") is None
        assert consumer.message().body.decode().startswith("after:")
        gateway.kill()
        gateway.start()
        consumer = Client(gateway.address)
        consumer.subscribe(destination)
        kept = [f.body.decode().split(":")[0] for f in consumer.messages(6)]
        assert kept == [*accepted[-5:], "after"]
        assert consumer.no_message(0.3)
        consumer.disconnect()
    finally:
        gateway.kill()
