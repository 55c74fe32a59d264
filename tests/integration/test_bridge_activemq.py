"""Bridges between the embedded broker and a real ActiveMQ 5.17 (over the STOMP broker
connector) inside the real gateway process, with fault injection: the gateway
SIGKILLed mid-stream (twice) and the ActiveMQ connection cut through a TCP proxy.
Counting as in test_bridge_gateway: lost = confirmed at the source and missing at
the target; duplicated = one seq under two target message ids."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_bridge_gateway import SQLITE, Producer, Tally, drain
from tests.support.activemq import ActiveMQBroker, activemq
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.stomp_clients import Client
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

__all__ = ["activemq"]

pytestmark = pytest.mark.activemq

_counter = iter(range(1_000_000))


def unique(prefix: str) -> str:
    return f"/queue/{prefix}.{time.monotonic_ns()}.{next(_counter)}"


def amq_connector_toml(uri: str, name: str = "amq") -> str:
    return (f'[connectors.{name}]\nuri = "{uri}"\nfailure_retry_interval = 200\nsend_timeout = 20000\n'
            "heartbeat = [0, 0]\n")


def bridge_toml(name: str, source: tuple[str, str], target: tuple[str, str], **params: object) -> str:
    lines = ["[[bridges]]", f'name = "{name}"',
             f'source = {{ connector = "{source[0]}", destination = "{source[1]}" }}',
             f'target = {{ connector = "{target[0]}", destination = "{target[1]}" }}']
    for key, value in params.items():
        lines.append(f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}")
    return "\n".join(lines) + "\n"


def fill_activemq(broker: ActiveMQBroker, destination: str, tally: Tally, count: int, first: int = 0) -> None:
    """Send ``count`` persistent messages straight to ActiveMQ (``a-<first>`` on), a receipt each
    (waited for together)."""
    client = Client(("127.0.0.1", broker.stomp_port))
    try:
        events = []
        for index in range(first, first + count):
            seq = f"a-{index}"
            receipt = f"r-{index}-{time.monotonic_ns()}"
            events.append((seq, client.listener.receipt_event(receipt)))
            client.connection.send(destination, f"body {seq}", headers={"seq": seq, "persistent": "true",
                                                                         "receipt": receipt})
        for seq, event in events:
            assert event.wait(30), f"no receipt from ActiveMQ for {seq}"
            tally.receipted.add(seq)
    finally:
        client.disconnect()


@pytest.mark.parametrize(("qos", "batch"), [("AT_MOST_ONCE", 20), ("DUPLICATES_OK", 20), ("ONCE_AND_ONLY_ONCE", 1),
                                            ("ONCE_AND_ONLY_ONCE", 20)])
def test_activemq_to_embedded_across_gateway_crashes(tmp_path: Path, activemq: ActiveMQBroker, qos: str,
                                                     batch: int) -> None:
    source, tally = unique("amq2e"), Tally()
    fill_activemq(activemq, source, tally, 3000)
    config = amq_connector_toml(activemq.stomp_uri) + bridge_toml(
        "a2e", ("amq", source), ("embedded", "/queue/a2e"), qos=qos, max_batch_size=batch, max_batch_time=20,
        failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    with stopped_after(gateway):
        time.sleep(0.3)
        gateway.kill()
        gateway.start()
        time.sleep(0.3)
        gateway.kill()
        gateway.start()
        may_lose = qos == "AT_MOST_ONCE"
        drain(gateway, "/queue/a2e", tally, set() if may_lose else tally.receipted, quiet=3.0 if may_lose else 1.5)
        print(f"activemq -> embedded {qos} batch {batch}: {tally.summary()}")
        if may_lose:
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]}"
            return
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        assert len(tally.arrivals) == len(tally.receipted)
        if qos == "ONCE_AND_ONLY_ONCE":
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"


@pytest.mark.parametrize(("qos", "batch"), [("DUPLICATES_OK", 1), ("ONCE_AND_ONLY_ONCE", 20)])
def test_embedded_to_activemq_across_gateway_crashes(tmp_path: Path, activemq: ActiveMQBroker, qos: str,
                                                     batch: int) -> None:
    target, tally = unique("e2amq"), Tally()
    config = amq_connector_toml(activemq.stomp_uri) + bridge_toml(
        "e2a", ("embedded", "/queue/e2a"), ("amq", target), qos=qos, max_batch_size=batch, max_batch_time=20,
        failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    with stopped_after(gateway):
        producer = Producer(gateway, "/queue/e2a", tally, "p1", limit=600)
        producer.start()
        wait_until(lambda: producer.count() >= 300, 60, "300 receipted sends")
        gateway.kill()
        producer.halt.set()
        producer.join(10)
        gateway.start()
        Producer(gateway, "/queue/e2a", tally, "p2", limit=200).run()
        time.sleep(0.1)
        gateway.kill()
        gateway.start()
        drain(("127.0.0.1", activemq.stomp_port), target, tally, tally.receipted)
        print(f"embedded -> activemq {qos} batch {batch}: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        if qos == "ONCE_AND_ONLY_ONCE":
            # docs/bridges.md: a SIGKILL between ActiveMQ's confirmation and the duplicate store's
            # commit is resolved at the restart by browsing the target queue
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"


@pytest.fixture
def amq_proxy(activemq: ActiveMQBroker) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", activemq.stomp_port) as proxy:
        yield proxy


@pytest.mark.parametrize("qos", ["DUPLICATES_OK", "ONCE_AND_ONLY_ONCE"])
def test_activemq_source_cut_and_restored(tmp_path: Path, activemq: ActiveMQBroker, amq_proxy: TcpProxy,
                                          qos: str) -> None:
    """The source connection drops mid-stream: deliveries not acknowledged come again;
    ONCE_AND_ONLY_ONCE skips the ones the target already has."""
    source, tally = unique("cutsrc"), Tally()
    fill_activemq(activemq, source, tally, 600)
    config = amq_connector_toml(f"stomp://{amq_proxy.address}") + bridge_toml(
        "cut", ("amq", source), ("embedded", "/queue/cut"), qos=qos, max_batch_size=10, max_batch_time=20,
        failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    with stopped_after(gateway):
        for _ in range(3):
            time.sleep(0.4)
            amq_proxy.cut()
            time.sleep(0.5)
            amq_proxy.restore()
        drain(gateway, "/queue/cut", tally, tally.receipted)
        print(f"activemq -> embedded {qos} with cuts: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        if qos == "ONCE_AND_ONLY_ONCE":
            assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]}"
        assert amq_proxy.connections > 1


def test_activemq_source_lost_with_a_batch_waiting_sends_the_short_end_of_the_stream(
        tmp_path: Path, activemq: ActiveMQBroker, amq_proxy: TcpProxy) -> None:
    """The source connection drops while an acknowledgement is unanswered and two deliveries
    wait for max_batch_time: the bridge drops them and subscribes again; ActiveMQ delivers the
    five again (fewer than max_batch_size), and the two not yet sent go after max_batch_time
    (they used to wait for a batch timer that never started)."""
    source, tally = unique("cutend"), Tally()
    config = amq_connector_toml(f"stomp://{amq_proxy.address}") + bridge_toml(
        "cutend", ("amq", source), ("embedded", "/queue/cutend"), qos="ONCE_AND_ONLY_ONCE", max_batch_size=10,
        max_batch_time=1000, failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    with stopped_after(gateway):
        wait_until(lambda: "bridge cutend consuming from" in gateway.log(), 30, "the bridge consuming")
        amq_proxy.stall()  # the gateway's acknowledgements wait in the proxy, unanswered
        fill_activemq(activemq, source, tally, 3)
        time.sleep(1.6)  # a-0..a-2 sent after max_batch_time; their acknowledgement waits
        fill_activemq(activemq, source, tally, 2, first=3)
        time.sleep(0.3)  # a-3, a-4 delivered; their batch time runs
        amq_proxy.cut()
        time.sleep(1.5)  # the lost subscription's batch time passes
        amq_proxy.flow()
        amq_proxy.restore()
        drain(gateway, "/queue/cutend", tally, tally.receipted, timeout=15)
        assert not tally.lost, f"lost {sorted(tally.lost)} ({tally.summary()})"
        assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())}"


def test_embedded_to_activemq_target_cut_loses_nothing(tmp_path: Path, activemq: ActiveMQBroker,
                                                       amq_proxy: TcpProxy) -> None:
    target, tally = unique("cuttgt"), Tally()
    config = amq_connector_toml(f"stomp://{amq_proxy.address}") + bridge_toml(
        "cutt", ("embedded", "/queue/cutt"), ("amq", target), qos="DUPLICATES_OK", max_batch_size=10,
        max_batch_time=20, failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    with stopped_after(gateway):
        producer = Producer(gateway, "/queue/cutt", tally, "t", limit=500)
        producer.start()
        wait_until(lambda: producer.count() >= 100, 30, "100 receipted sends")
        amq_proxy.cut()
        time.sleep(1.0)
        amq_proxy.restore()
        producer.join(60)
        drain(("127.0.0.1", activemq.stomp_port), target, tally, tally.receipted)
        print(f"embedded -> activemq DUPLICATES_OK with a cut: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"


STANDALONE = ["-m", "gateway.cli", "bridge", "--config"]


def test_standalone_bridges_process(tmp_path: Path, activemq: ActiveMQBroker) -> None:
    """``jmsgateway bridge --config FILE``: the bridges without STOMP listeners; SIGTERM stops it cleanly."""
    import os
    import signal
    import subprocess
    import sys

    from tests.support.gateway import REPO, default_config

    source, target = unique("alone.src"), unique("alone.dst")
    config = tmp_path / "bridges.toml"
    config.write_text(default_config() + "\n" + amq_connector_toml(activemq.stomp_uri)
                      + bridge_toml("alone", ("amq", source), ("amq", target), max_batch_size=5, max_batch_time=20))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    data_dir = f'gateway.data_dir="{tmp_path}/data"'
    process = subprocess.Popen([sys.executable, *STANDALONE, str(config), "--set", data_dir],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        tally = Tally()
        fill_activemq(activemq, source, tally, 50)
        drain(("127.0.0.1", activemq.stomp_port), target, tally, tally.receipted, timeout=30)
        assert not tally.lost and not tally.duplicated, tally.summary()
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0].decode(errors="replace")
    assert process.returncode == 0, output
    assert "alone: running" in output


def test_standalone_bridges_start_only_the_connectors_they_use(tmp_path: Path, activemq: ActiveMQBroker) -> None:
    """A Kafka connector no bridge names, whose cluster is not there, does not stop ``jmsgateway
    bridge``: only the connectors the bridges use are built and started (no embedded broker either:
    its SQLite file is never created)."""
    import os
    import subprocess
    import sys

    from tests.support.gateway import REPO, default_config

    source, target = unique("only.src"), unique("only.dst")
    config = tmp_path / "bridges.toml"
    config.write_text(default_config()  # its broker keeps persistent messages in SQLite
                      + '\n[connectors.unused]\nuri = "kafka://127.0.0.1:1"\nmetadata_timeout = 1\n'
                      + amq_connector_toml(activemq.stomp_uri)
                      + bridge_toml("only", ("amq", source), ("amq", target), max_batch_size=5, max_batch_time=20))
    data = tmp_path / "data"
    process = subprocess.Popen([sys.executable, *STANDALONE, str(config), "--set", f'gateway.data_dir="{data}"'],
                               cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        tally = Tally()
        fill_activemq(activemq, source, tally, 20)
        drain(("127.0.0.1", activemq.stomp_port), target, tally, tally.receipted, timeout=30)
        assert not tally.lost and not tally.duplicated, tally.summary()
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0].decode(errors="replace")
    assert process.returncode == 0, output
    assert "only: running" in output and "cannot start the connectors" not in output, output
    assert not list(data.glob("*.sqlite")), "the embedded broker's store was opened"


def test_standalone_with_a_bad_bridge_exits_1(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.support.gateway import REPO, default_config

    config = tmp_path / "bridges.toml"
    config.write_text(default_config() + "\n" + bridge_toml("bad", ("embedded", "/queue/a"), ("embeded", "/queue/b")))
    result = subprocess.run([sys.executable, *STANDALONE, str(config)], cwd=tmp_path, capture_output=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60, text=True)
    assert result.returncode == 1
    assert "bridges[0].target.connector" in result.stderr and "did you mean 'embedded'" in result.stderr


def test_once_and_only_once_into_an_activemq_topic_is_refused_at_start(tmp_path: Path) -> None:
    """A topic cannot be browsed, so the bridge could never tell which of a batch whose
    confirmation was lost the broker took: the gateway refuses the configuration, naming
    the key and what to do instead, as the Artemis JMS bridge refuses ONCE_AND_ONLY_ONCE
    without XA (no broker needed: nothing is sent)."""
    config = amq_connector_toml("stomp://127.0.0.1:1") + bridge_toml(
        "to-topic", ("embedded", "/queue/in"), ("amq", "/topic/out"), qos="ONCE_AND_ONLY_ONCE")
    output = GatewayProcess(tmp_path / "gw", config).start_fails()
    assert "bridges[0].qos" in output and "/topic/out is not a queue" in output, output[-3000:]
    assert "DUPLICATES_OK" in output, output[-3000:]


def test_once_and_only_once_into_activemq_resends_only_what_a_lost_receipt_hid(
        tmp_path: Path, activemq: ActiveMQBroker, amq_proxy: TcpProxy) -> None:
    """The broker commits a batch but its RECEIPT is lost with the connection (the proxy drops
    what the broker answers, then the connection is cut).  The bridge browses the target queue
    before the retry and sends nothing it already holds: every message once."""
    target, tally = unique("lostrcpt"), Tally()
    config = amq_connector_toml(f"stomp://{amq_proxy.address}") + bridge_toml(
        "lost", ("embedded", "/queue/lost"), ("amq", target), qos="ONCE_AND_ONLY_ONCE", max_batch_size=50,
        max_batch_time=20, failure_retry_interval=200)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    with stopped_after(gateway):
        Producer(gateway, "/queue/lost", tally, "a", limit=20).run()
        time.sleep(1.0)  # the first 20 went through
        amq_proxy.mute()
        Producer(gateway, "/queue/lost", tally, "b", limit=30).run()
        time.sleep(1.5)  # the broker took the batch of 30; its receipt went nowhere
        amq_proxy.cut()
        amq_proxy.unmute()
        time.sleep(0.5)
        amq_proxy.restore()
        time.sleep(2.0)
        drain(("127.0.0.1", activemq.stomp_port), target, tally, tally.receipted)
        print(f"embedded -> activemq, lost receipt: {tally.summary()}")
        assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
        assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"
        assert "the target already holds" in gateway.log(), "the batch in doubt was looked for"
