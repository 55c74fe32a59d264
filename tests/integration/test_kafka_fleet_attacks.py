"""Attacks on a fleet of gateways in front of Kafka (docs/kafka.md, "A fleet of gateways in front of Kafka").

Real ``twistd jmsgateway`` processes, each with its own data directory, serve ``/queue/kafka.<topic>``
from the session's Tansu; stomp.py producers and consumers with the fleet's host list move to another
gateway when theirs dies.  The promise attacked: nothing receipted (``persistent``, ``x-dedup-id``, a
RECEIPT) is lost, what a dead gateway's consumer held comes again flagged ``redelivered``, a resend is
stored at most once per gateway it went to.  Counted by id (:func:`tests.support.kafka_fleet.verdict`:
on a loss, where the missing records are in the topic and the group's committed offsets).

This file: SIGKILL during SEND bursts (2 and 3 gateways, 4 and 8 partitions, ``client-individual`` and
``client`` acks, prefetch 10 and 100), both gateways killed one after the other with a restart during the
outage, and a gateway that stalls (SIGSTOP of it and its consumer processes: its group sessions expire)
and comes back (SIGCONT: zombie members).  More in churn_kafka_fleet_attacks.py (`make test-churn`).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.kafka import create_topics, kafka_bootstrap, unique_topic
from tests.support.kafka_fleet import (
    Consumer,
    Fleet,
    Producer,
    finish,
    held_before,
    start_all,
    start_fleet,
    stats,
)
from tests.support.waiting import wait_until

__all__ = ["kafka_bootstrap"]


def clients(fleet: Fleet, topic: str, *, ack: str, prefetch: int, window: int,
            pause: float = 0.01, backwards: bool = False) -> tuple[list[Producer], list[Consumer]]:
    """A producer and a consumer preferring each gateway of ``fleet`` (``backwards``: the consumers
    acknowledge each batch of 5 last first)."""
    destination = f"/queue/kafka.{topic}"
    producers = [Producer(f"p{n}", fleet.hosts, destination, prefer=n, window=window, pause=pause)
                 for n in range(len(fleet.gateways))]
    consumers = [Consumer(f"c{n}", fleet.hosts, destination, prefer=n, ack=ack, prefetch=prefetch, backwards=backwards)
                 for n in range(len(fleet.gateways))]
    return producers, consumers


@pytest.mark.parametrize(("gateways", "partitions", "ack", "prefetch", "window", "backwards"), [
    # (each 5 acknowledged last first, and the holder acknowledges every other delivery: the
    # commits must stay below what is held, behind acknowledged deliveries, at the kill)
    (2, 4, "client-individual", 10, 20, True),
    (3, 8, "client", 100, 50, False),
    (2, 1, "client-individual", 1, 5, False),
])
def test_sigkill_of_a_gateway_during_send_bursts(tmp_path: Path, kafka_bootstrap: str, gateways: int,
                                                 partitions: int, ack: str, prefetch: int, window: int,
                                                 backwards: bool) -> None:
    topic = unique_topic("fleet-kill")
    create_topics(kafka_bootstrap, topic, partitions=partitions)
    fleet = Fleet(tmp_path, kafka_bootstrap, gateways)
    producers, consumers = clients(fleet, topic, ack=ack, prefetch=prefetch, window=window, pause=0.002,
                                   backwards=backwards)
    try:
        start_fleet(fleet)
        start_all(consumers)
        start_all(producers)
        wait_until(lambda: sum(len(c.deliveries) for c in consumers) > 200, 30, "deliveries to the consumers")
        holder = max(consumers, key=lambda c: len(c.deliveries))  # (one partition: the one that has it)
        victim = [g.port for g in fleet.gateways].index(holder.port)
        holder.hold_every = 2 if backwards else 1
        holder.holding.set()  # it holds what it gets from now on (every other delivery when backwards)
        wait_until(lambda: len(holder.held) >= min(prefetch, 5), 20, f"deliveries held ({stats(consumers)})")
        time.sleep(1.0)  # past delivered_interval: the marks are published
        held = held_before(holder, time.monotonic())
        killed_at = time.monotonic()
        fleet.kill(victim)  # SENDs in flight on it: resent to another gateway
        time.sleep(4.0)
        finish(fleet, kafka_bootstrap, topic, partitions, producers, consumers, held=held, killed_at=killed_at)
    finally:
        fleet.close()


def test_both_gateways_killed_in_turn_one_restarted_during_the_outage(tmp_path: Path, kafka_bootstrap: str) -> None:
    partitions = 4
    topic = unique_topic("fleet-both")
    create_topics(kafka_bootstrap, topic, partitions=partitions)
    fleet = Fleet(tmp_path, kafka_bootstrap, 2)
    producers, consumers = clients(fleet, topic, ack="client-individual", prefetch=10, window=10)
    try:
        start_fleet(fleet)
        start_all(consumers)
        start_all(producers)
        time.sleep(2.0)
        fleet.kill(0)
        time.sleep(0.5)  # its session has not expired yet: its partitions are still its own
        fleet.restart(0)
        time.sleep(3.0)
        fleet.kill(1)  # the other one now, with everything moved to it
        time.sleep(0.5)
        fleet.restart(1)
        time.sleep(3.0)
        fleet.kill(0)  # and the first again, with the clients spread over both
        time.sleep(3.0)
        finish(fleet, kafka_bootstrap, topic, partitions, producers, consumers)
    finally:
        fleet.close()


@pytest.mark.parametrize(("stall", "move"), [(3.0, False), (8.0, True)])
def test_a_stalled_gateway_comes_back_as_a_zombie(tmp_path: Path, kafka_bootstrap: str, stall: float,
                                                  move: bool) -> None:
    """SIGSTOP of a gateway and its consumer processes (a host that stalls): its group sessions
    expire (1 s); its clients stay (their SENDs and ACKs wait in its sockets) or give up on it after
    2 s (as when their heart-beats time out) and move; SIGCONT: its members wake up holding
    deliveries and offsets of an assignment the group gave away."""
    partitions = 4
    topic = unique_topic("fleet-stop")
    create_topics(kafka_bootstrap, topic, partitions=partitions)
    fleet = Fleet(tmp_path, kafka_bootstrap, 2)
    producers, consumers = clients(fleet, topic, ack="client-individual", prefetch=10, window=10)
    try:
        start_fleet(fleet)
        start_all(consumers)
        start_all(producers)
        time.sleep(2.0)
        fleet.freeze(0)
        time.sleep(2.0)
        if move:
            for client in [*producers, *consumers]:
                if client.port == fleet.gateways[0].port:
                    client.abandon()
        time.sleep(stall - 2.0)
        assert not move or any(len(c.moves) > 1 for c in consumers), "no consumer left the stalled gateway"
        fleet.thaw(0)
        time.sleep(3.0)
        fleet.freeze(0)  # again, while the clients that stayed or came back are on it
        time.sleep(2.0)
        fleet.thaw(0)
        time.sleep(3.0)
        finish(fleet, kafka_bootstrap, topic, partitions, producers, consumers)
    finally:
        fleet.close()
