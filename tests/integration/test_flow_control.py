"""Back-pressure end to end: a target that does not keep up slows its STOMP senders down.

Real parts: the gateway process (``twistd -n jmsgateway``), stomp.py senders,
ActiveMQ and Tansu behind the fault-injecting TCP proxy.

* ActiveMQ stalls (the proxy stops reading what the gateway writes): the
  gateway stops reading from the client that sends there - the client's
  sends block in TCP, the gateway's memory stays flat - and once the broker
  reads again every message arrives, none refused.
* Kafka unreachable: librdkafka's queue (2,000 records here) would overflow
  and the sender would get ERROR frames; instead the gateway stops reading
  from the client while half the queue is in flight, and after the path is
  back every record reaches Kafka.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess
from tests.support.jms_client import JmsClient
from tests.support.kafka import TansuBroker, create_topics, proxied_kafka, read_records, unique_topic
from tests.support.stomp_clients import StompClients
from tests.support.tcp_proxy import TcpProxy

__all__ = ["proxied_kafka"]


def rss_mb(pid: int) -> float:
    """The process's resident memory in MB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


class Sender(threading.Thread):
    """Sends ``count`` SENDs without receipts from a stomp.py client; records how far it got."""

    def __init__(self, clients: StompClients, destination: str, count: int, body: bytes) -> None:
        super().__init__(daemon=True)
        self.client = clients.connect()
        self.destination, self.count, self.body = destination, count, body
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for _ in range(self.count):
                self.client.connection.send(self.destination, self.body)
                self.sent += 1
        except BaseException as error:  # reported by the test
            self.error = error


@pytest.mark.activemq
def test_a_stalled_jms_broker_holds_its_sender_back_and_loses_nothing(
    activemq: ActiveMQBroker, tmp_path: Path  # noqa: F811
) -> None:
    count, body = 10_000, b"x" * 4096  # 40 MB: far more than the TCP buffers on the way hold
    destination = f"/queue/jms.flow.{time.monotonic_ns()}"
    with TcpProxy("127.0.0.1", activemq.stomp_port, client_buffer=65536) as proxy:
        config = f"""
[connectors.amq]
uri = "stomp://127.0.0.1:{proxy.port}"
heartbeat = [0, 0]
failure_retry_interval = 200
send_timeout = 120000

[[destinations]]
pattern = "/queue/jms.*"
connector = "amq"
"""
        gateway = GatewayProcess(tmp_path / "gateway", config).start()
        clients = StompClients(gateway.address)
        jms = JmsClient(activemq.openwire_url)
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
            assert grown < 25, f"the gateway buffered {grown:.0f} MB for a stalled broker"
            bystander = clients.connect()  # the gateway serves everyone else meanwhile
            bystander.subscribe("/queue/flow.local")
            bystander.send("/queue/flow.local", b"still served", receipt=True)
            assert bystander.message().body == b"still served"
            proxy.flow()
            sender.join(120)
            assert not sender.is_alive() and sender.error is None and sender.sent == count
            sender.client.send(destination, b"last", receipt=True, timeout=60)
            assert sender.client.error(timeout=0.2) is None
            received = jms.receive_all(destination, count + 2, timeout=120)
            assert len(received) == count + 2  # the warm-up, every held SEND, the last one
            assert received[-1].body == b"last"
        finally:
            jms.close()
            clients.close()
            gateway.stop()


@pytest.mark.kafka
def test_an_unreachable_kafka_holds_its_sender_back_instead_of_refusing(
    proxied_kafka: tuple[TansuBroker, TcpProxy], tmp_path: Path
) -> None:
    broker, proxy = proxied_kafka
    topic = unique_topic("flow")
    create_topics(broker.bootstrap, topic)
    config = f"""
[connectors.kafka]
uri = "kafka://{proxy.address}"
producer = {{ "queue.buffering.max.messages" = 2000, "message.timeout.ms" = 120000, "reconnect.backoff.max.ms" = 300 }}

[[destinations]]
pattern = "/queue/kafka.*"
connector = "kafka"

[routing]
connector = "kafka"

[[routing.routes]]
name = "flow"
include = "msg.address == '/queue/kafka.flow'"
topic = "{topic}"
"""
    count = 6000  # three times what librdkafka's queue may hold here
    gateway = GatewayProcess(tmp_path / "gateway", config).start()
    clients = StompClients(gateway.address)
    try:
        first = clients.connect()
        first.send("/queue/kafka.flow", b"before the cut", receipt=True)
        proxy.cut()
        sender = Sender(clients, "/queue/kafka.flow", count, b"y" * 100)
        sender.start()
        sender.join(30)  # ~900 KB: the TCP buffers take it all, so the sender itself finishes
        assert sender.error is None and sender.sent == count
        time.sleep(2)
        assert sender.client.error(timeout=0.1) is None, "a full producer queue refused a SEND"
        proxy.restore()
        sender.client.send("/queue/kafka.flow", b"after the cut", receipt=True, timeout=120)
        assert sender.client.error(timeout=0.1) is None
        records = read_records(broker.bootstrap, topic, count + 2, timeout=60, settle=1.0)
        assert len(records) == count + 2
        assert records[-1].value() == b"after the cut"
    finally:
        clients.close()
        gateway.stop()
