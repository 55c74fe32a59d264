"""Shared-store standby with real processes: two ``twistd`` gateways on one data directory.

The second waits as a standby (admin endpoint only, reporting ``standby``); the
active one gets SIGKILL (or SIGTERM) after stomp.py clients sent persistent
messages with receipts, left deliveries unacknowledged and a durable
subscription with a backlog; the standby takes the store's lock, recovers and
opens its STOMP listener.  Counted by message id: no receipted message lost,
the unacknowledged ones redelivered flagged, the durable backlog intact.  A
stomp.py client with a host list reconnects to the standby's address.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import stomp
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_admin import http
from tests.support.standby import accepts, gateway_pair
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until


def metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text, _ = http(port, "GET", "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_standby_reports_standby_and_takes_over_after_sigkill_with_nothing_lost(tmp_path: Path) -> None:
    active, active_admin, standby, standby_admin = gateway_pair(tmp_path)
    try:
        # the standby: admin endpoint only, not ready, role standby
        status, document, _ = http(standby_admin, "GET", "/readyz")
        assert status == 503 and document["reasons"][0].startswith("standby:"), document
        assert http(standby_admin, "GET", "/livez")[0] == 200
        status, document, _ = http(standby_admin, "GET", "/health")
        assert (status, document["status"], document["reason"]) == (503, "DOWN", "standby")
        status, document, _ = http(standby_admin, "GET", "/status")
        assert (document["role"], document["last_takeover"]) == ("standby", None)
        assert document["store_lock"].endswith("broker.sqlite")
        assert metrics(standby_admin)[("jmsgateway_role", (("role", "standby"),))] == 1
        assert http(active_admin, "GET", "/status")[1]["role"] == "active"
        assert metrics(active_admin)[("jmsgateway_role", (("role", "active"),))] == 1
        assert not accepts(standby.port), "a standby must not listen for STOMP"
        standby.wait_for_log("jmsgateway role standby")

        # traffic on the active: a durable subscription's backlog, a queue, unacknowledged deliveries
        durable = Client(active.address, headers={"client-id": "ha-app"})
        durable.subscribe("/topic/ha.events", "d", headers={"activemq.subscriptionName": "events"})
        durable.disconnect()
        producer = Client(active.address)
        queued = [f"q-{n}" for n in range(300)]
        published = [f"t-{n}" for n in range(50)]
        for body in queued:
            producer.send("/queue/ha.work", body, receipt=True, persistent="true")
        for body in published:
            producer.send("/topic/ha.events", body, receipt=True, persistent="true")
        consumer = Client(active.address)
        consumer.subscribe("/queue/ha.work", "w", ack="client-individual", headers={"activemq.prefetchSize": "10"})
        delivered = consumer.messages(10)
        acked = {frame.body.decode() for frame in delivered[:5]}
        unacked = {frame.body.decode() for frame in delivered[5:]}
        for frame in delivered[:5]:
            consumer.ack(frame)  # (receipted)

        active.process.kill()  # type: ignore[union-attr]  # SIGKILL: nothing flushed, no goodbye
        killed = time.monotonic()
        active.process.wait(15)  # type: ignore[union-attr]
        wait_until(lambda: accepts(standby.port), 30, "the standby's STOMP listener")
        takeover = time.monotonic() - killed
        print(f"\ntakeover: STOMP listener open {takeover:.2f}s after SIGKILL of the active gateway")

        status, document, _ = http(standby_admin, "GET", "/status")
        assert document["role"] == "active", document
        last = document["last_takeover"]
        assert last is not None and last["recovered_messages"] == 300 - 5 + 50, last
        assert 0 < last["duration_seconds"] < 30
        print(f"takeover in /status: {last}")
        wait_until(lambda: http(standby_admin, "GET", "/readyz")[0] == 200, 15, "ready after the takeover")
        samples = metrics(standby_admin)
        assert samples[("jmsgateway_role", (("role", "active"),))] == 1
        assert samples[("jmsgateway_takeovers_total", ())] == 1
        assert samples[("jmsgateway_last_takeover_recovered_messages", ())] == 345

        # counted by message id (the body): nothing receipted lost, the unacknowledged flagged redelivered
        drain = Client(standby.address)
        drain.subscribe("/queue/ha.work", "w", ack="auto")
        frames = drain.messages(300 - 5, timeout=30)
        bodies = [frame.body.decode() for frame in frames]
        assert sorted(bodies) == sorted(set(queued) - acked), "lost or duplicated across the takeover"
        while not consumer.listener.messages.empty():  # (the acks' credit let more out before the kill)
            unacked.add(consumer.listener.messages.get_nowait().body.decode())
        flagged = {frame.body.decode() for frame in frames if frame.headers.get("redelivered") == "true"}
        assert flagged == unacked and len(unacked) >= 5
        assert drain.no_message(0.5)
        durable = Client(standby.address, headers={"client-id": "ha-app"})
        durable.subscribe("/topic/ha.events", "d", headers={"activemq.subscriptionName": "events"})
        assert [frame.body.decode() for frame in durable.messages(50, timeout=30)] == published
        for client in (drain, durable):
            client.disconnect()
        log = standby.log()
        assert log.count("jmsgateway role standby") == 1 and log.count("jmsgateway role active") == 1, log
        assert "took over" in log
    finally:
        active.kill()
        standby.stop()


def test_a_stopped_active_hands_over_and_a_host_list_client_reconnects_to_the_standby(tmp_path: Path) -> None:
    active, _, standby, standby_admin = gateway_pair(tmp_path)
    lost = threading.Event()

    class Reconnecting(stomp.ConnectionListener):
        def on_disconnected(self) -> None:
            lost.set()

    connection: Any = stomp.Connection12([active.address, standby.address], reconnect_sleep_initial=0.2,
                                         reconnect_sleep_increase=0.0, reconnect_sleep_max=0.5,
                                         reconnect_attempts_max=200)
    connection.set_listener("reconnect", Reconnecting())
    try:
        connection.connect(wait=True)
        assert connection.transport.current_host_and_port == active.address
        active.stop()  # SIGTERM: a clean stop closes the store, which releases the lock
        assert lost.wait(15), "the client saw no disconnect"
        connection.connect(wait=True)  # stomp.py tries the host list in turn
        assert connection.transport.current_host_and_port == standby.address
        assert http(standby_admin, "GET", "/status")[1]["role"] == "active"
        received = Client(standby.address)
        received.subscribe("/queue/ha.failover", "f")
        connection.send("/queue/ha.failover", "after the failover", headers={"persistent": "true"})
        assert received.message().body == b"after the failover"
        received.disconnect()
    finally:
        if connection.is_connected():
            connection.disconnect()
        active.kill()
        standby.stop()


def test_a_standby_stops_at_once_and_the_active_gateway_goes_on(tmp_path: Path) -> None:
    active, active_admin, standby, _ = gateway_pair(tmp_path)
    try:
        standby.wait_for_log("jmsgateway role standby")
        started = time.monotonic()
        standby.stop()  # SIGTERM while its thread is blocked in flock
        assert time.monotonic() - started < 10
        assert "took over" not in standby.log()
        producer = Client(active.address)
        producer.send("/queue/ha.after", "still active", receipt=True, persistent="true")
        producer.disconnect()
        assert http(active_admin, "GET", "/status")[1]["role"] == "active"
    finally:
        active.stop()
        standby.kill()
