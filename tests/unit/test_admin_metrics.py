"""The operators' metrics of /metrics: per-destination gauges and totals read from the embedded broker
at scrape time, jmsgateway_build_info, the process metrics; the exposition parsed back by
prometheus_client's own parsers (text and OpenMetrics); and the Grafana dashboard in contrib/grafana
names only metrics the gateway exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from unittest.mock import Mock

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.testing import MemoryReactorClock

from gateway import __version__
from gateway.admin.metrics import register_operator_metrics
from gateway.admin.site import admin_resource
from gateway.app import build_gateway
from gateway.config import parse_config
from gateway.connectors.kafka_subscription import ConsumerLagCollector
from gateway.interfaces import SubscriptionSpec
from gateway.message.model import TextMessage
from tests.unit.test_admin import BRIDGES, call
from tests.unit.test_broker import Sink

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "contrib" / "grafana" / "jmsgateway.json"


def busy_gateway() -> Any:
    """A gateway whose /queue/orders took 5 messages: 1 expired there, 1 consumed, 1 dead-lettered,
    1 in flight at its one consumer, 1 pending."""
    reactor = MemoryReactorClock()
    reactor.advance(1_000_000)
    gateway = build_gateway(parse_config({**BRIDGES, "broker": {"max_redeliveries": 0}}, "gw.toml"), reactor)
    gateway.started_at = reactor.seconds()
    broker = gateway.broker
    now = broker.now_ms()
    broker.send(TextMessage(destination="/queue/orders", message_id="ID:soon", text="soon", expiration=now + 500))
    for index in range(4):
        broker.send(TextMessage(destination="/queue/orders", message_id=f"ID:{index}", text=str(index)))
    reactor.advance(1.5)
    assert broker.purge_expired() == 1  # (what the broker's expiry loop does every second)
    sink = Sink()
    subscribed: list[Any] = []
    broker.subscribe(SubscriptionSpec(destination="/queue/orders", ack_mode="client-individual", prefetch=1),
                     sink).addCallback(subscribed.append)
    subscription = subscribed[0]
    subscription.ack([sink.got[0][1]])   # 0 consumed
    subscription.nack([sink.got[1][1]])  # 1 dead-lettered (max_redeliveries 0)
    return gateway


def scrape(gateway: Any, accept: str | None = None) -> str:
    site = admin_resource(gateway, gateway.admin)
    code, body = call(site, "GET", "/metrics")
    assert code == 200
    return body.decode("utf-8") if isinstance(body, bytes) else str(body)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_per_destination_gauges_and_totals_follow_the_broker() -> None:
    gateway = busy_gateway()
    got = samples(scrape(gateway))
    orders = (("destination", "/queue/orders"),)
    assert got[("jmsgateway_broker_destination_messages", orders)] == 1
    assert got[("jmsgateway_broker_destination_consumers", orders)] == 1
    assert got[("jmsgateway_broker_destination_inflight_messages", orders)] == 1
    assert got[("jmsgateway_broker_destination_enqueued_total", orders)] == 5
    assert got[("jmsgateway_broker_destination_dequeued_total", orders)] == 1
    assert got[("jmsgateway_broker_destination_expired_total", orders)] == 1
    assert got[("jmsgateway_broker_destination_dead_lettered_total", orders)] == 1
    dlq = (("destination", "/queue/DLQ.orders"),)
    assert got[("jmsgateway_broker_destination_messages", dlq)] == 1
    assert got[("jmsgateway_broker_destination_enqueued_total", dlq)] == 1
    # the bytes in memory and paged out are the broker's own gauges, per destination too
    memory = {k: v for k, v in got.items() if k[0] == "jmsgateway_broker_destination_memory_bytes"}
    assert any(dict(labels)["destination"] == "/queue/orders" and value > 0 for (_, labels), value in memory.items())
    assert any(k[0] == "jmsgateway_broker_paged_bytes" for k in got)


def test_the_gauges_are_read_at_scrape_time() -> None:
    gateway = busy_gateway()
    orders = (("destination", "/queue/orders"),)
    before = samples(scrape(gateway))[("jmsgateway_broker_destination_enqueued_total", orders)]
    gateway.broker.send(TextMessage(destination="/queue/orders", message_id="ID:late", text="late"))
    after = samples(scrape(gateway))
    assert after[("jmsgateway_broker_destination_enqueued_total", orders)] == before + 1


def test_build_info_and_process_metrics_once_however_often_the_site_is_built() -> None:
    gateway = busy_gateway()
    register_operator_metrics(gateway)
    text = scrape(gateway)
    scrape(gateway)  # a second site on the same gateway registers nothing twice
    got = samples(text)
    info = [dict(labels) for (name, labels), value in got.items() if name == "jmsgateway_build_info" and value == 1]
    assert len(info) == 1 and info[0]["version"] == __version__
    assert got[("process_start_time_seconds", ())] > 0
    assert got[("process_resident_memory_bytes", ())] > 0
    assert text.count("# TYPE jmsgateway_build_info") == 1
    assert text.count("# TYPE process_cpu_seconds_total") == 1


def test_the_exposition_parses_as_text_and_as_openmetrics() -> None:
    from prometheus_client.openmetrics.exposition import generate_latest

    gateway = busy_gateway()
    names = {family.name for family in text_string_to_metric_families(scrape(gateway))}
    assert {"jmsgateway_broker_destination_messages", "jmsgateway_build_info", "process_cpu_seconds"} <= names
    register_operator_metrics(gateway)
    families = list(openmetrics_families(generate_latest(gateway.registry).decode("utf-8")))
    assert any(family.name == "jmsgateway_build" and family.type == "info" for family in families)


# -- the Grafana dashboard --------------------------------------------------------

METRIC = re.compile(r"\b((?:jmsgateway|process)_[a-z0-9_]+)")


def dashboard_expressions(document: Any) -> list[str]:
    found: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key in ("expr", "query") and isinstance(value, str):
                found.append(value)
            else:
                found.extend(dashboard_expressions(value))
    elif isinstance(document, list):
        for item in document:
            found.extend(dashboard_expressions(item))
    return found


def test_the_grafana_dashboard_names_only_exported_metrics() -> None:
    document = json.loads(DASHBOARD.read_text())
    expressions = dashboard_expressions(document)
    assert len(expressions) >= 10
    gateway = busy_gateway()
    register_operator_metrics(gateway)
    lag = ConsumerLagCollector.for_registry(gateway.registry)  # (what a Kafka connector adds)
    lag.add("kafka", {Mock(topic="orders", group="g", lag={0: 3})})
    exported = {sample.name for family in gateway.registry.collect() for sample in family.samples}
    used = {name for expression in expressions for name in METRIC.findall(expression)}
    assert used, "no metric in the dashboard"
    assert used - exported == set(), "the dashboard names metrics the gateway does not export"
    for needed in ("jmsgateway_broker_destination_messages", "jmsgateway_broker_destination_consumers",
                   "jmsgateway_build_info", "process_resident_memory_bytes", "jmsgateway_kafka_consumer_lag"):
        assert needed in used
    assert all(panel.get("datasource", {}).get("uid") == "${datasource}"
               for panel in document["panels"] if panel.get("type") != "row")
