"""More attacks on a fleet of gateways in front of Kafka (see test_kafka_fleet_attacks.py): churn.

* consumers that reconnect 2 to 4 s after their first delivery, each time to the next gateway of their list (every
  reconnection a rebalance: members leave with deliveries held, join, get partitions back), with
  ``client``, ``client-individual`` and ``auto`` acks, prefetch 1 and 100, 1 and 8 partitions; the
  ``client`` ones also lose a gateway (SIGKILL) meanwhile;
* a slow link between the fleet and Kafka (every gateway's Kafka connections through a proxy adding
  latency and jitter), a gateway killed meanwhile, then Kafka unreachable for everybody for a while
  (the link passes nothing: every member's session expires);
* CPU load on the host (busy loops beside the test) with three gateways, eight partitions and a
  gateway killed while its consumer holds 100 deliveries.

Counted by id as in test_kafka_fleet_attacks.py: every receipted message is acknowledged.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.kafka import TansuBroker, create_topics, kafka_bootstrap, proxied_kafka, unique_topic
from tests.support.kafka_fleet import (
    Busy,
    Consumer,
    Fleet,
    Producer,
    held_before,
    start_all,
    start_fleet,
    stats,
    verdict,
    wait_all_acked,
)
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

__all__ = ["kafka_bootstrap", "proxied_kafka"]


def finish(fleet: Fleet, bootstrap: str, topic: str, partitions: int, producers: list[Producer],
           consumers: list[Consumer], *, held: dict[str, float] | None = None, killed_at: float = 0.0) -> None:
    for producer in producers:
        producer.stop_sending()
    wait_all_acked(producers, consumers)
    for consumer in consumers:
        consumer.stop()
    print(stats(consumers), {p.name: len(p.receipted) for p in producers})
    verdict(fleet, bootstrap, topic, partitions, producers, consumers, held=held, killed_at=killed_at)


@pytest.mark.parametrize(("partitions", "ack", "prefetch", "kill", "pause"), [
    (1, "client", 1, True, 0.2),  # (one member takes about 20 a second with prefetch 1: an ACK, a commit)
    (8, "client-individual", 100, True, 0.005),
    (4, "auto", 10, False, 0.005),  # (auto: what is on its way at a kill is not promised, docs/persistence.md)
])
def test_consumers_that_reconnect_repeatedly(tmp_path: Path, kafka_bootstrap: str, partitions: int, ack: str,
                                             prefetch: int, kill: bool, pause: float) -> None:
    topic = unique_topic("fleet-churn")
    create_topics(kafka_bootstrap, topic, partitions=partitions)
    fleet = Fleet(tmp_path, kafka_bootstrap, 2)
    destination = f"/queue/kafka.{topic}"
    producers = [Producer(f"p{n}", fleet.hosts, destination, prefer=n, window=5, pause=pause) for n in range(2)]
    consumers = [Consumer(f"c{n}", fleet.hosts, destination, prefer=n % 2, ack=ack, prefetch=prefetch,
                          reconnect_every=2.0 + 1.0 * n, wander=True) for n in range(3)]
    try:
        start_fleet(fleet)
        start_all(consumers)
        start_all(producers)
        time.sleep(8.0)
        if kill:
            fleet.kill(1)
            time.sleep(3.0)
            fleet.restart(1)
        time.sleep(4.0)
        for consumer in consumers:
            consumer.reconnect_every = 0.0  # (settle: the group stops rebalancing)
        finish(fleet, kafka_bootstrap, topic, partitions, producers, consumers)
    finally:
        fleet.close()


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
