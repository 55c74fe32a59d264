"""Attacks on a fleet of gateways in front of Kafka (see test_kafka_fleet_attacks.py): the link and the host.

* a slow link between the fleet and Kafka (every gateway's Kafka connections through a proxy adding
  latency and jitter), a gateway killed meanwhile, then Kafka unreachable for everybody for a while
  (the link passes nothing: every member's session expires);
* CPU load on the host (busy loops beside the test) with three gateways, eight partitions and a
  gateway killed while its consumer holds 100 deliveries.

Counted by id as in test_kafka_fleet_attacks.py: every receipted message is acknowledged, what the
killed gateway's consumer held comes again flagged ``redelivered``.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.kafka import TansuBroker, create_topics, kafka_bootstrap, proxied_kafka, unique_topic
from tests.support.kafka_fleet import (
    Busy,
    Consumer,
    Fleet,
    Producer,
    finish,
    held_before,
    start_all,
    start_fleet,
    stats,
)
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

__all__ = ["kafka_bootstrap", "proxied_kafka"]


def test_a_slow_link_to_kafka_a_kill_and_kafka_unreachable(tmp_path: Path,
                                                          proxied_kafka: tuple[TansuBroker, TcpProxy]) -> None:
    broker, proxy = proxied_kafka
    bootstrap = broker.bootstrap
    partitions = 4
    topic = unique_topic("fleet-slow")
    create_topics(bootstrap, topic, partitions=partitions)
    fleet = Fleet(tmp_path, bootstrap, 2)
    destination = f"/queue/kafka.{topic}"
    producers = [Producer(f"p{n}", fleet.hosts, destination, prefer=n, window=10, pause=0.002) for n in range(2)]
    consumers = [Consumer(f"c{n}", fleet.hosts, destination, prefer=n, prefetch=10) for n in range(2)]
    try:
        start_fleet(fleet)
        start_all(consumers)
        start_all(producers)
        wait_until(lambda: all(len(c.deliveries) > 20 for c in consumers), 30, "deliveries to both consumers")
        proxy.delay(0.04, 0.03)  # every request and answer 10-70 ms later (seeded)
        consumers[0].holding.set()
        time.sleep(3.0)
        held = held_before(consumers[0], time.monotonic() - 1.0)
        killed_at = time.monotonic()
        fleet.kill(0)
        time.sleep(4.0)
        proxy.stall("both")  # Kafka unreachable: every member's session expires, SENDs wait for acks=all
        time.sleep(3.0)
        proxy.flow()
        time.sleep(2.0)
        proxy.delay(0)
        fleet.restart(0)
        time.sleep(3.0)
        finish(fleet, bootstrap, topic, partitions, producers, consumers, held=held, killed_at=killed_at)
    finally:
        fleet.close()


def test_cpu_load_three_gateways_a_kill_while_100_deliveries_are_held(tmp_path: Path, kafka_bootstrap: str) -> None:
    partitions = 8
    topic = unique_topic("fleet-load")
    create_topics(kafka_bootstrap, topic, partitions=partitions)
    fleet = Fleet(tmp_path, kafka_bootstrap, 3)
    destination = f"/queue/kafka.{topic}"
    producers = [Producer(f"p{n}", fleet.hosts, destination, prefer=n, window=20, pause=0.002) for n in range(3)]
    consumers = [Consumer(f"c{n}", fleet.hosts, destination, prefer=n, prefetch=100) for n in range(3)]
    busy = Busy(2)
    try:
        start_fleet(fleet)
        start_all(consumers)
        start_all(producers)
        wait_until(lambda: all(len(c.deliveries) > 20 for c in consumers), 60, "deliveries to every consumer")
        consumers[1].holding.set()
        wait_until(lambda: len(consumers[1].held) >= 100, 30, f"100 deliveries held ({stats(consumers)})")
        time.sleep(1.0)
        held = held_before(consumers[1], time.monotonic())
        killed_at = time.monotonic()
        fleet.kill(1)
        time.sleep(5.0)
        busy.stop()
        finish(fleet, kafka_bootstrap, topic, partitions, producers, consumers, held=held, killed_at=killed_at)
    finally:
        busy.stop()
        fleet.close()
