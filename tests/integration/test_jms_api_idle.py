"""Idle subscriptions of the ``jms`` connector cost no thread (issue 38).

A subscription with nothing to receive parks: its thread ends and a ``MessageListener``
on its consumer waits instead (``gateway.connectors.jms_subscription``).  Forty idle
subscriptions leave the gateway's thread count where it was; a message to a parked one
is delivered, acknowledged and followed by the next; a parked one is closed cleanly.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.integration.test_jms_api import ROUTES, factory_style
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.jms_client import JmsClient
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

pytestmark = pytest.mark.activemq

COUNT = 40


def threads(gateway: GatewayProcess) -> int:
    assert gateway.process is not None
    return len(list(Path(f"/proc/{gateway.process.pid}/task").iterdir()))


def test_idle_subscriptions_cost_no_thread_and_still_deliver(tmp_path: Path,
                                                             activemq: ActiveMQBroker) -> None:  # noqa: F811
    gateway = GatewayProcess(tmp_path / "gw", factory_style(activemq) + ROUTES).start()
    with stopped_after(gateway):
        gateway.wait_for_log("connected to", 30)
        baseline = threads(gateway)
        client = Client(gateway.address)
        try:
            queues = [f"/queue/jmsapi.idle.{uuid.uuid4().hex[:8]}.{index}" for index in range(COUNT)]
            for index, queue in enumerate(queues):
                client.subscribe(queue, f"s{index}", ack="client-individual")
            # parked after a second of empty receives; the provider's pooled threads idle out in 30 s
            wait_until(lambda: threads(gateway) <= baseline + 10, 75,
                       f"{COUNT} idle subscriptions costing no thread each")
            with JmsClient(activemq.openwire_url) as jms:
                for queue in queues[:3]:
                    jms.send_text(queue, "first")
                frames = client.messages(3, timeout=20)
                assert sorted(frame.headers["destination"] for frame in frames) == sorted(queues[:3])
                for frame in frames:
                    client.ack(frame)  # receipted: committed at the provider
                jms.send_text(queues[0], "second")
                assert client.message(20).body == b"second"
                client.unsubscribe("s5")  # a parked one: closed on a thread woken for it
                for queue in queues[:3]:
                    assert jms.receive(queue, 0.5) is None  # acknowledged, not redelivered
        finally:
            client.disconnect()
