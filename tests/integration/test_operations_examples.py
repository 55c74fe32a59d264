"""The examples in etc/examples/ this module covers start and move a message as their header comment says:
the file as shipped, with only the addresses (listen port, data directory, broker address) given on the
command line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.config import load_config
from gateway.security.passwords import is_hashed
from tests.support.activemq import ActiveMQBroker, stock_activemq
from tests.support.gateway import REPO, GatewayProcess, stopped_after
from tests.support.kafka import TansuBroker, create_topics, produce, read_records
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

EXAMPLES = REPO / "etc" / "examples"
__all__ = ["stock_activemq"]


class ExampleGateway(GatewayProcess):
    """A gateway on an example file as shipped (GatewayProcess writes a config of its own)."""

    def __init__(self, workdir: Path, example: str, args: list[str]) -> None:
        super().__init__(workdir, args=args)
        self.config_path = EXAMPLES / example


def test_embedded_example_logins_persistence_and_admin(tmp_path: Path) -> None:
    admin = free_port()
    gateway = ExampleGateway(tmp_path, "embedded.toml", ["--set", f'admin.listen="tcp:{admin}:interface=127.0.0.1"'])
    gateway.start()
    with stopped_after(gateway):
        sender = Client(gateway.address, login="app", passcode="app-secret")
        sender.send("/queue/example", "kept across a restart", receipt=True)  # default_persistent = true
        sender.disconnect()
        with socket.create_connection(gateway.address, timeout=10) as sock:
            sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:app\npasscode:wrong\n\n\x00")
            assert sock.recv(4096).startswith(b"ERROR\n")
        gateway.restart()
        receiver = Client(gateway.address, login="app", passcode="app-secret")
        receiver.subscribe("/queue/example")
        assert receiver.message().body == b"kept across a restart"
        receiver.disconnect()
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/health", timeout=10) as reply:
            assert reply.status == 200
    assert "(login app)" in gateway.log()


def test_embedded_example_listens_on_localhost_with_hashed_passwords() -> None:
    config = load_config(str(EXAMPLES / "embedded.toml"))
    assert config.listen == ["tcp:61613:interface=127.0.0.1"]
    assert config.auth.users and all(is_hashed(password) for password in config.auth.users.values())
    assert config.auth.allow_weak_passwords is False  # plain text and low-cost hashes stop start-up


@pytest.fixture
def kafka() -> Iterator[TansuBroker]:
    broker = TansuBroker().start()  # its own broker: the example's topic names are fixed
    try:
        yield broker
    finally:
        broker.stop()


def test_kafka_routing_example_routes_keys_and_dead_letters(tmp_path: Path, kafka: TansuBroker) -> None:
    create_topics(kafka.bootstrap, "orders", "audit", "gateway-dlq")  # as the header comment says
    gateway = ExampleGateway(tmp_path, "kafka-routing.toml",
                             ["--set", f'connectors.kafka.uri="kafka://{kafka.bootstrap}"'])
    gateway.start()
    with stopped_after(gateway):
        client = Client(gateway.address)
        client.send("/queue/orders", "order 1", receipt=True, headers={"correlation-id": "c-1"})
        client.send("/queue/orders", "no key", receipt=True)  # soft failure: to the dead-letter topic
        client.send("/topic/audit.logins", "audit 1", receipt=True, kind="audit")
        client.disconnect()
    (order,) = read_records(kafka.bootstrap, "orders", 1)
    assert order.key() == b"c-1" and order.value() == b"order 1"
    (dead,) = read_records(kafka.bootstrap, "gateway-dlq", 1)
    assert dead.value() == b"no key"
    (audit,) = read_records(kafka.bootstrap, "audit", 1)
    assert audit.value() == b"audit 1"


@pytest.mark.spark
def test_pipeline_examples_ingest_then_route_on_spark(tmp_path: Path, kafka: TansuBroker) -> None:
    """pipeline-gateway.toml writes the SENDs to jms-ingest; pipeline.toml's job (its command as the header
    comment spells it, local Spark) routes them: the keyed order to orders with header-map's property, the
    unkeyed one to pipeline-dlq."""
    create_topics(kafka.bootstrap, "jms-ingest", "orders", "pipeline-dlq")  # as the header comments say
    uri = f'connectors.kafka.uri="kafka://{kafka.bootstrap}"'
    gateway = ExampleGateway(tmp_path / "gw", "pipeline-gateway.toml", ["--set", uri])
    gateway.start()
    with stopped_after(gateway):
        client = Client(gateway.address)
        client.send("/queue/orders", "order 1", receipt=True, headers={"correlation-id": "c-1"})
        client.send("/queue/orders", "no key", receipt=True)
        client.disconnect()
    ingested = read_records(kafka.bootstrap, "jms-ingest", 2)
    assert [record.value() for record in ingested] == [b"order 1", b"no key"]
    log = tmp_path / "pipeline.log"
    with log.open("wb") as sink:
        job = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "pipeline", "--config", str(EXAMPLES / "pipeline.toml"),
             "--set", uri, "--set", f'gateway.data_dir="{tmp_path / "data"}"', "--master", "local[1]"],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=sink, stderr=subprocess.STDOUT)
        try:
            (order,) = read_records(kafka.bootstrap, "orders", 1, timeout=240)
            (dead,) = read_records(kafka.bootstrap, "pipeline-dlq", 1, timeout=30)
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(120)
    assert order.key() == b"c-1" and order.value() == b"order 1", log.read_text()[-3000:]
    assert dict(order.headers())["jms.x-routed-by"] == b"pipeline"
    assert dead.value() == b"no key"
    assert job.returncode == 0, log.read_text()[-3000:]
    assert not (tmp_path / "var").exists()  # the checkpoint went under the data directory given


def test_the_pipeline_stops_with_one_line_when_its_ingest_topic_is_missing(tmp_path: Path,
                                                                           kafka: TansuBroker) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "pipeline", "run", "--config", str(EXAMPLES / "pipeline.toml"),
         "--set", f'connectors.kafka.uri="kafka://{kafka.bootstrap}"', "--set", f'gateway.data_dir="{tmp_path}"'],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"jmsgateway pipeline: Kafka topic 'jms-ingest' does not exist (bootstrap {kafka.bootstrap}): create it "
        "(docs/pipeline.md), or name another in pipeline.ingest_topics"], done.stderr


def _bridges(admin: int) -> dict[str, dict[str, object]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/bridges", timeout=10) as reply:
        return {status["name"]: status for status in json.loads(reply.read())}


@pytest.mark.activemq
def test_bridges_example_runs_its_three_bridges(tmp_path: Path, stock_activemq: ActiveMQBroker,
                                                kafka: TansuBroker) -> None:
    """bridges.toml as shipped under ``jmsgateway bridge`` (its header comment's command), a stock ActiveMQ
    and Tansu at its two addresses: an EU order from ActiveMQ reaches Kafka's orders topic (and a US one
    stays), an audit record reaches the embedded queue, a price published to the ActiveMQ topic reaches the
    durable bridge that logs in as its own user (a client id of its own: no InvalidClientIDException)."""
    create_topics(kafka.bootstrap, "orders", "audit")
    admin = free_port()
    output = tmp_path / "bridge.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "bridge", "--config", str(EXAMPLES / "bridges.toml"),
             "--set", f'connectors.activemq.uri="{stock_activemq.stomp_uri}"',
             "--set", f'connectors.kafka.uri="kafka://{kafka.bootstrap}"',
             "--set", f'gateway.data_dir="{tmp_path / "data"}"',
             "--set", f'admin.listen="tcp:{admin}:interface=127.0.0.1"'],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=sink, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: "admin endpoint on" in output.read_text(), 60, "the bridge command's admin endpoint")
            wait_until(lambda: all(status["state"] == "running" for status in _bridges(admin).values())
                       and len(_bridges(admin)) == 3, 90, "the three bridges running")
            amq = Client(("127.0.0.1", stock_activemq.stomp_port), text=True)
            amq.send("/queue/orders", "order eu", receipt=True, region="EU", persistent="true")
            amq.send("/queue/orders", "order us", receipt=True, region="US", persistent="true")
            amq.send("/topic/prices", "price 1", receipt=True)
            amq.disconnect()
            produce(kafka.bootstrap, "audit", [{"value": b"audit 1"}])
            wait_until(lambda: [_bridges(admin)[name]["forwarded"] for name in
                                ("orders-to-kafka", "audit-from-kafka", "prices-durable")] == [1, 1, 1],
                       60, "one message through each bridge")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    (order,) = read_records(kafka.bootstrap, "orders", 1, settle=1.0)
    assert order.value() == b"order eu"
    text = output.read_text()
    assert process.returncode == 0, text[-3000:]
    assert "InvalidClientID" not in text and "Traceback" not in text, text[-3000:]


def test_the_readme_snippet_shows_the_receipt_and_the_message(tmp_path: Path) -> None:
    """README.md's "Try it" snippet, its port aside, against a gateway on the shipped default config:
    the newcomer sees the RECEIPT and the MESSAGE printed."""
    readme = (REPO / "README.md").read_text()
    snippet = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert '("127.0.0.1", 61613)' in snippet
    gateway = GatewayProcess(tmp_path / "gw")
    gateway.start()
    with stopped_after(gateway):
        done = subprocess.run([sys.executable, "-c", snippet.replace("61613", str(gateway.port))], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr
    assert "on_receipt {'receipt-id': 'r1'}" in printed, printed
    assert any(line.startswith("on_message ") and line.endswith("hi there") for line in printed.splitlines()), printed
