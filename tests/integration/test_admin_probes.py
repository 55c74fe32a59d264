"""Probes and operators' metrics of a real ``twistd`` gateway, with real HTTP, a real ActiveMQ reached
through a TCP proxy that cuts and restores it, and stomp.py traffic: /livez stays 200 while ActiveMQ is
away and /readyz says 503 naming the connector, both without a login while the rest needs one; the
access log has no probe lines; /metrics has the per-destination depth, build_info and process metrics."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_admin import http
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

ALICE = ("alice", "secret")


def test_livez_stays_up_while_activemq_is_away_and_readyz_says_why(
        make_gateway: Callable[..., GatewayProcess], activemq: ActiveMQBroker) -> None:  # noqa: F811
    admin = free_port()
    with TcpProxy("127.0.0.1", activemq.stomp_port) as proxy:
        gateway = make_gateway(f"""
[admin]
listen = "tcp:{admin}:interface=127.0.0.1"

[connectors.amq]
uri = "stomp://127.0.0.1:{proxy.port}"
failure_retry_interval = 200
""", args=['--set=auth.users={alice = "secret"}', '--set=auth.allow_weak_passwords=true'])
        gateway.wait_for_log("admin endpoint on tcp:")
        wait_until(lambda: http(admin, "GET", "/readyz")[0] == 200, what="ready")
        assert http(admin, "GET", "/readyz")[1]["reasons"] == []
        assert http(admin, "GET", "/status")[0] == 401  # the rest needs a login
        proxy.cut()
        wait_until(lambda: http(admin, "GET", "/readyz")[0] == 503, what="not ready after the cut")
        status, document, _ = http(admin, "GET", "/readyz")
        assert document["status"] == "DOWN"
        assert [reason.split(":")[0] for reason in document["reasons"]] == ["connector amq"]
        assert f"stomp://127.0.0.1:{proxy.port}" in document["reasons"][0]
        status, document, _ = http(admin, "GET", "/livez")
        assert (status, document["status"]) == (200, "UP")
        assert document["uptime_seconds"] > 0
        assert http(admin, "GET", "/health")[0] == 503  # as before
        proxy.restore()
        wait_until(lambda: http(admin, "GET", "/readyz")[0] == 200, what="ready again after the restore")
        assert http(admin, "GET", "/status", ALICE)[0] == 200
        for _ in range(3):
            http(admin, "GET", "/livez")
        log = gateway.wait_for_log('"GET /status HTTP/1.1" 200')
        for probe in ("/livez", "/readyz", "/health"):
            assert f'"GET {probe} ' not in log, probe


def test_metrics_of_a_real_gateway_have_depth_build_info_and_process(
        make_gateway: Callable[..., GatewayProcess]) -> None:
    admin = free_port()
    gateway = make_gateway(f'[admin]\nlisten = "tcp:{admin}:interface=127.0.0.1"\n')
    gateway.wait_for_log("admin endpoint on tcp:")
    client = Client(gateway.address, "1.2", text=True)
    try:
        for index in range(3):
            client.send("/queue/probe.depth", f"m{index}", receipt=True)
    finally:
        client.disconnect()
    status, text, _ = http(admin, "GET", "/metrics")
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    depth = (("destination", "/queue/probe.depth"),)
    assert samples[("jmsgateway_broker_destination_messages", depth)] == 3
    assert samples[("jmsgateway_broker_destination_enqueued_total", depth)] == 3
    assert samples[("jmsgateway_broker_destination_consumers", depth)] == 0
    assert any(name == "jmsgateway_build_info" and value == 1 for (name, _), value in samples.items())
    assert samples[("process_resident_memory_bytes", ())] > 10_000_000
    assert samples[("process_open_fds", ())] > 0
