"""Bridges with ``jms`` connector ends (the JMS API through ActiveMQ's OpenWire client) in the
real gateway process, and the connector across an ActiveMQ crash.

* ONCE_AND_ONLY_ONCE between two queues of one provider runs in one local transaction of a
  transacted JMS session: the gateway SIGKILLed twice mid-stream, 0 lost and 0 duplicated
  over 2,000 persistent messages;
* DUPLICATES_OK across the same kills: 0 lost; AT_MOST_ONCE: nothing duplicated;
* a ``jms`` source into the embedded broker (the duplicate store's exactly-once) and the
  embedded broker into a ``jms`` target;
* ActiveMQ SIGKILLed and restarted under a stream of receipted SENDs and a subscriber: the
  connector reconnects by itself and nothing receipted is lost.

Messages are counted by a ``seq`` property; the independent JMS client fills and drains.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.test_admin import http
from tests.integration.test_flow_control import Sender, rss_mb
from tests.integration.test_jms_api import classpath_toml
from tests.support.activemq import ActiveMQBroker, activemq, fresh_activemq  # noqa: F401
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.jms_client import JmsClient
from tests.support.ports import free_port
from tests.support.stomp_clients import Client, StompClients
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.activemq


def unique(prefix: str) -> str:
    return f"/queue/jmsapi.{prefix}.{uuid.uuid4().hex[:10]}"


def connector_toml(broker: ActiveMQBroker, name: str = "amq") -> str:
    return f"""
[connectors.{name}]
type = "jms"
classpath = {classpath_toml()}
failure_retry_interval = 300
send_timeout = 20000

[connectors.{name}.connection_factory]
class = "org.apache.activemq.ActiveMQConnectionFactory"
properties = {{ brokerURL = "{broker.openwire_url}", watchTopicAdvisories = false }}
"""


def bridge_toml(name: str, source: tuple[str, str], target: tuple[str, str], **params: object) -> str:
    lines = ["[[bridges]]", f'name = "{name}"',
             f'source = {{ connector = "{source[0]}", destination = "{source[1]}" }}',
             f'target = {{ connector = "{target[0]}", destination = "{target[1]}" }}']
    for key, value in params.items():
        lines.append(f"{key} = {value!r}".replace("'", "\"") if isinstance(value, str)
                     else f"{key} = {str(value).lower() if isinstance(value, bool) else value}")
    return "\n".join(lines) + "\n"


def fill(broker: ActiveMQBroker, destination: str, count: int, prefix: str = "m") -> set[str]:
    """``count`` persistent texts straight to ActiveMQ (committed JMS transactions of 100); their seqs."""
    seqs = [f"{prefix}-{index}" for index in range(count)]
    with JmsClient(broker.openwire_url) as jms:
        jms.send_texts_in_transactions(destination, [(f"body {seq}", {"seq": seq}) for seq in seqs])
    return set(seqs)


def seqs_of(messages: list) -> Counter[str]:  # type: ignore[type-arg]
    return Counter(str(message.properties.get("seq")) for message in messages)


def collect_until(jms: JmsClient, destination: str, received: list, count: int) -> None:  # type: ignore[type-arg]
    """Receive from ``destination`` into ``received`` until it holds ``count`` messages (60 s at most)."""
    deadline = time.monotonic() + 60
    while len(received) < count:
        assert time.monotonic() < deadline, f"only {len(received)} of {count} messages bridged"
        received += jms.receive_all(destination, 200, 0.2)


def connector_health(admin: int) -> tuple[bool, str]:
    """The ``amq`` connector's entry in the admin endpoint's /health: (UP?, detail)."""
    _, document, _ = http(admin, "GET", "/health")
    entry = document["components"]["connectors"]["amq"]
    return entry["status"] == "UP", entry["detail"]


SQLITE = ["--set", "broker.persistence='sqlite'"]


def copied_across_two_gateway_kills(tmp_path: Path, broker: ActiveMQBroker, qos: str, count: int,
                                    thresholds: tuple[int, int], max_batch_size: int) -> tuple[set[str], Counter[str]]:
    """A jms -> jms bridge of ``count`` messages between two queues of one provider, the gateway SIGKILLed when
    the target holds each of ``thresholds`` (what reaches the target while it is down is read too): the seqs
    sent, and how often each arrived."""
    source, target = unique(f"{qos.lower()}-src"), unique(f"{qos.lower()}-dst")
    sent = fill(broker, source, count)
    config = connector_toml(broker) + bridge_toml("q2q", ("amq", source), ("amq", target),
                                                    qos=qos, max_batch_size=max_batch_size, max_batch_time=20,
                                                    failure_retry_interval=300)
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    received: list = []  # type: ignore[type-arg]
    with stopped_after(gateway):
        with JmsClient(broker.openwire_url) as jms:
            for threshold in thresholds:
                collect_until(jms, target, received, threshold)
                gateway.kill()
                received += jms.receive_all(target, count, 0.5)
                gateway.start()
            received += jms.receive_until_quiet(target, 3.0)
        assert "local transaction" not in gateway.log() or "FAILED" not in gateway.log()
    return sent, seqs_of(received)


def test_once_and_only_once_between_two_queues_of_one_provider_survives_two_gateway_kills(
        tmp_path: Path, activemq: ActiveMQBroker) -> None:  # noqa: F811
    sent, counts = copied_across_two_gateway_kills(tmp_path, activemq, "ONCE_AND_ONLY_ONCE", 2000, (400, 1100), 50)
    lost = sent - set(counts)
    duplicated = {seq: n for seq, n in counts.items() if n > 1}
    print(f"jms -> jms ONCE_AND_ONLY_ONCE: {sum(counts.values())} received, {len(lost)} lost, {len(duplicated)} dup")
    assert not lost, f"lost {sorted(lost)[:10]}"
    assert not duplicated, f"duplicated {list(duplicated.items())[:10]}"


def test_duplicates_ok_between_two_queues_loses_nothing_across_gateway_kills(
        tmp_path: Path, activemq: ActiveMQBroker) -> None:  # noqa: F811
    sent, counts = copied_across_two_gateway_kills(tmp_path, activemq, "DUPLICATES_OK", 1000, (200, 500), 20)
    lost = sent - set(counts)
    assert not lost, f"lost {sorted(lost)[:10]}"


def test_at_most_once_between_two_queues_duplicates_nothing(tmp_path: Path,
                                                            activemq: ActiveMQBroker) -> None:  # noqa: F811
    source, target = unique("amo-src"), unique("amo-dst")
    sent = fill(activemq, source, 300)
    config = connector_toml(activemq) + bridge_toml("amo", ("amq", source), ("amq", target), qos="AT_MOST_ONCE",
                                                    max_batch_size=10, max_batch_time=20)
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    try:
        with JmsClient(activemq.openwire_url) as jms:
            received = jms.receive_all(target, 300, 60)
            received += jms.receive_until_quiet(target, 1.0)
        counts = seqs_of(received)
        assert set(counts) == sent
        assert max(counts.values()) == 1
    finally:
        gateway.stop()


def test_jms_source_to_embedded_once_and_only_once_and_embedded_to_jms_target(
        tmp_path: Path, activemq: ActiveMQBroker) -> None:  # noqa: F811
    source, target = unique("j2e-src"), unique("e2j-dst")
    sent = fill(activemq, source, 200)
    config = connector_toml(activemq) + bridge_toml(
        "j2e", ("amq", source), ("embedded", "/queue/j2e"), qos="ONCE_AND_ONLY_ONCE", max_batch_size=10,
        max_batch_time=20, add_message_id_in_header=True) + bridge_toml(
        "e2j", ("embedded", "/queue/j2e"), ("amq", target), qos="DUPLICATES_OK", max_batch_size=10,
        max_batch_time=20)
    gateway = GatewayProcess(tmp_path / "gw", config, args=SQLITE).start()
    try:
        with JmsClient(activemq.openwire_url) as jms:
            received = jms.receive_all(target, 200, 60)
            received += jms.receive_until_quiet(target, 1.0)
        counts = seqs_of(received)
        assert set(counts) == sent and max(counts.values()) == 1
        assert all(str(m.properties.get("AMQ_BRIDGE_MSG_ID_LIST", "")).startswith("ID:") for m in received)
        assert all(m.persistent and m.jms_type == "text" for m in received)
    finally:
        gateway.stop()


def test_activemq_killed_and_restarted_mid_stream(tmp_path: Path,
                                                  fresh_activemq: ActiveMQBroker) -> None:  # noqa: F811
    """Receipted SENDs through the gateway while ActiveMQ is SIGKILLed and restarted: every
    receipted one is there afterwards; the subscriber gets messages again without help."""
    queue, watched = unique("restart"), unique("restart-sub")
    admin = free_port()
    config = (connector_toml(fresh_activemq) + '[[destinations]]\npattern = "/queue/jmsapi.*"\nconnector = "amq"\n'
              + f'[admin]\nlisten = ["tcp:{admin}:interface=127.0.0.1"]\n')
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    gateway.wait_for_log("connected to", 30)
    clients = StompClients(gateway.address)
    receipted: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        client = Client(gateway.address, text=True)
        index = 0
        while not stop.is_set():
            seq = f"s-{index}"
            try:
                client.send(queue, seq, receipt=True, timeout=30, persistent="true", seq=seq)
            except AssertionError:  # an ERROR (not receipted): the client may send again
                client = Client(gateway.address, text=True)
                continue
            receipted.append(seq)
            index += 1

    try:
        subscriber = clients.connect()
        subscriber.subscribe(watched, ack="client-individual")
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        wait_until(lambda: len(receipted) >= 100, 30, "100 receipted sends")
        assert connector_health(admin) == (True, f"connected to {fresh_activemq.openwire_url}")
        fresh_activemq.kill()
        gateway.wait_for_log("lost connection to tcp://127.0.0.1", 30)
        up, detail = connector_health(admin)
        assert not up and fresh_activemq.openwire_url in detail, detail
        assert "jmsgateway_jms_broker_up{connector=\"amq\"} 0.0" in http(admin, "GET", "/metrics")[1]
        time.sleep(1.0)
        fresh_activemq.start()
        wait_until(lambda: connector_health(admin)[0], 60, "health UP again")
        count = len(receipted)
        wait_until(lambda: len(receipted) >= count + 100, 60, "sends receipted again after the restart")
        stop.set()
        producer.join(40)
        assert "reconnecting to tcp://127.0.0.1" in gateway.log()
        with JmsClient(fresh_activemq.openwire_url) as jms:
            found = jms.receive_until_quiet(queue, 3.0)
            jms.send_text(watched, "after the restart")
        missing = set(receipted) - set(seqs_of(found))
        assert not missing, f"{len(missing)} receipted messages lost: {sorted(missing)[:10]}"
        frame = subscriber.message(30)
        assert frame.body == b"after the restart"
    except BaseException:
        print(gateway.log()[-5000:])
        raise
    finally:
        stop.set()
        clients.close()
        gateway.stop()


def test_sends_wait_a_bounded_time_for_a_provider_that_is_away(tmp_path: Path,
                                                               fresh_activemq: ActiveMQBroker) -> None:  # noqa: F811
    """While ActiveMQ is down a SEND waits at most send_timeout, then gets an ERROR; a SEND made
    while it is down and answered after it is back is delivered."""
    queue = unique("away")
    config = (connector_toml(fresh_activemq).replace("send_timeout = 20000", "send_timeout = 6000")
              + '[[destinations]]\npattern = "/queue/jmsapi.*"\nconnector = "amq"\n')
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    gateway.wait_for_log("connected to", 30)
    clients = StompClients(gateway.address)
    try:
        fresh_activemq.kill()
        gateway.wait_for_log("lost connection to tcp://127.0.0.1", 30)
        client = clients.connect(text=True)
        started = time.monotonic()
        client.connection.send(queue, "lost cause", headers={"receipt": "r-away"})
        error = client.error(15)
        waited = time.monotonic() - started
        assert error is not None and error.headers.get("receipt-id") == "r-away"
        assert "within 6.0s" in error.body.decode(), error.body
        assert 5 <= waited <= 15, waited
        late = clients.connect(text=True)
        late.connection.send(queue, "made it", headers={"receipt": "r-late"})
        fresh_activemq.start()
        late.wait_receipt("r-late", timeout=30)
        with JmsClient(fresh_activemq.openwire_url) as jms:
            received = jms.receive(queue, 10)
        assert received is not None and received.body == "made it"
    except BaseException:
        print(gateway.log()[-4000:])
        raise
    finally:
        clients.close()
        gateway.stop()


def test_a_stalled_provider_holds_its_sender_back_and_loses_nothing(tmp_path: Path,
                                                                    activemq: ActiveMQBroker) -> None:  # noqa: F811
    """The OpenWire connection stalls (a proxy stops reading): the producer thread blocks, queued
    sends pass max_pending_sends, the connector's Congestion stops reading from the STOMP sender,
    the gateway's memory stays flat; once the path flows again every message arrives."""
    count, body = 6000, b"x" * 4096
    destination = unique("flow")
    with TcpProxy("127.0.0.1", activemq.openwire_port, client_buffer=65536) as proxy:
        config = (connector_toml(activemq).replace(activemq.openwire_url, f"tcp://127.0.0.1:{proxy.port}")
                  .replace("send_timeout = 20000", "send_timeout = 120000\nmax_pending_sends = 200")
                  + '[[destinations]]\npattern = "/queue/jmsapi.*"\nconnector = "amq"\n')
        gateway = GatewayProcess(tmp_path / "gw", config).start()
        gateway.wait_for_log("connected to", 30)
        clients = StompClients(gateway.address)
        try:
            assert gateway.process is not None
            clients.connect().send(destination, b"warm-up", receipt=True)
            before = rss_mb(gateway.process.pid)
            proxy.stall()
            sender = Sender(clients, destination, count, body)
            sender.start()
            time.sleep(4)
            held_at, grown = sender.sent, rss_mb(gateway.process.pid) - before
            assert sender.is_alive() and held_at < count, "the sender was never held back"
            assert grown < 25, f"the gateway buffered {grown:.0f} MB for a stalled provider"
            proxy.flow()
            sender.join(120)
            assert not sender.is_alive() and sender.error is None and sender.sent == count
            sender.client.send(destination, b"last", receipt=True, timeout=60)
            with JmsClient(activemq.openwire_url) as jms:
                received = jms.receive_all(destination, count + 2, timeout=120)
            assert len(received) == count + 2
            assert received[-1].body == b"last"
        except BaseException:
            print(gateway.log()[-4000:])
            raise
        finally:
            clients.close()
            gateway.stop()


def test_a_bridge_side_with_its_own_login_gets_a_private_connection(tmp_path: Path,
                                                                    activemq: ActiveMQBroker) -> None:  # noqa: F811
    source, target = unique("cred-src"), unique("cred-dst")
    sent = fill(activemq, source, 20)
    config = connector_toml(activemq) + bridge_toml("cred", ("amq", source), ("amq", target), qos="DUPLICATES_OK",
                                                    max_batch_size=5, max_batch_time=20)
    config = config.replace(f'target = {{ connector = "amq", destination = "{target}" }}',
                            f'target = {{ connector = "amq", destination = "{target}", user = "bridger", '
                            'password = "pw" }')
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    try:
        with JmsClient(activemq.openwire_url) as jms:
            received = jms.receive_all(target, 20, 60)
        assert set(seqs_of(received)) == sent
        log = gateway.wait_for_log("connected to", 10)
        assert log.count("connector amq: connected to") >= 2  # the gateway's and the bridge side's own
    finally:
        gateway.stop()
