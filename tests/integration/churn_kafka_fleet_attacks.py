"""More attacks on a fleet of gateways in front of Kafka (see test_kafka_fleet_attacks.py): churn.

Consumers that reconnect 2 to 4 s after their first delivery, each time to the next gateway of their
list (every reconnection a rebalance: members leave with deliveries held, join, get partitions back),
with ``client``, ``client-individual`` and ``auto`` acks, prefetch 1 and 100, 1 and 8 partitions; the
``client`` ones also lose a gateway (SIGKILL) meanwhile.  (The slow link and the CPU load:
test_kafka_fleet_attacks_link.py.)  Members that leave about a second after they joined can leave a
Tansu group assigning nothing for a minute (docs/kafka.md, "Bridges across a stalled link"): here a
SUBSCRIBE then fails after ``subscribe_timeout`` and what is after the committed offsets waits: on a
loaded host it happens in most runs, so these attacks are not in the suite (the module's name is not
``test_*``): they are their own command, ``make test-churn`` (with ``JMSGATEWAY_KAFKA_BOOTSTRAP``
against a real Kafka).

Counted by id as in test_kafka_fleet_attacks.py: every receipted message is acknowledged.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.kafka import create_topics, kafka_bootstrap, unique_topic
from tests.support.kafka_fleet import Consumer, Fleet, Producer, finish, start_all, start_fleet

__all__ = ["kafka_bootstrap"]

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
