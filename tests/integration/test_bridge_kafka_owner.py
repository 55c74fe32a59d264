"""One owner per bridge when the source is Kafka (issue 32): two real gateway processes run one
ONCE_AND_ONLY_ONCE bridge from a Kafka topic (real Tansu, 2 partitions) and must not duplicate or
lose when one of them is SIGKILLed or its Kafka link stalls mid-stream.

* Kafka -> ActiveMQ (``stomp://``): the two gateways are members of the queue's consumer group, each
  gets a partition; the first is SIGKILLed mid-stream (or its Kafka connections stall without RST,
  then are cut: :class:`OwnedLinks`), and its partition moves to the second.  Counted at the target
  by the ``seq`` in the bodies: 0 lost, 0 duplicates.
* Kafka -> Kafka (the transactions engine): both gateways use the bridge's ``transactional.id``;
  the second starts mid-stream (its ``init_transactions`` fences the first's producer, which
  fences it back when it starts again: they take turns), then the first is SIGKILLed.  Counted
  with a ``read_uncommitted`` reader (Tansu serves aborted records to ``read_committed`` ones too,
  so that could neither hide a duplicate nor prove there is none): 0 lost, 0 duplicates, and both
  gateways wrote copies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bridge_fault_run import count_transactions, drain_counting
from tests.integration.test_bridge_kafka import bridge_toml, header, kafka_connector_toml
from tests.support.activemq import ActiveMQBroker, activemq
from tests.support.gateway import GatewayProcess
from tests.support.kafka import (
    TansuBroker,
    committed_offsets,
    create_topics,
    kafka_bootstrap,
    proxied_kafka,
    read_records,
)
from tests.support.ports import socket_inodes
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

__all__ = ["activemq", "kafka_bootstrap", "proxied_kafka"]

pytestmark = [pytest.mark.kafka, pytest.mark.activemq]

TOTAL = 3000
"""Records of the steady stream (100 every 0.1 s: faster than one bridge moves them, so a batch is
always on its way when the fault comes)."""


def stream(bootstrap: str, topic: str, total: int, started: threading.Event, pause: float = 0.1) -> None:
    """Produce ``total`` records (body ``body s-<i>``, header ``jms.seq``), 100 every ``pause`` s."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for start in range(0, total, 100):
        for index in range(start, min(total, start + 100)):
            producer.produce(topic, value=f"body s-{index}".encode(), key=str(index).encode(),
                             headers=[("jms.seq", f"s-{index}".encode())])
        producer.poll(0)
        started.set()
        time.sleep(pause)
    assert producer.flush(30) == 0, "records of the stream were not delivered"


def all_committed(bootstrap: str, group: str, topic: str, total: int, partitions: int = 2) -> bool:
    """The group committed all ``total`` records (offsets of a plain idempotent produce have no gaps;
    Tansu's ListOffsets answers short of the end, so the end is not asked): the bridge recorded and
    acknowledged everything."""
    return sum(max(0, o) for o in committed_offsets(bootstrap, group, topic, partitions)) >= total


MARKS_EVERY = 2.0
"""``delivered_interval`` of the runs: a dead owner's last delivered mark is up to that old, and the
hand-over must not depend on it (at the default 0.2 s, one SIGKILL run in five duplicated 80 of 3000
before the fix; at 2 s every run does)."""


def k2a_config(bootstrap: str, amq_port: int, topic: str, target: str) -> str:
    return (kafka_connector_toml(bootstrap) + f"delivered_interval = {MARKS_EVERY}\n"
            + f'[connectors.amq]\nuri = "stomp://127.0.0.1:{amq_port}"\nfailure_retry_interval = 200\n'
            + bridge_toml("k2a", ("kafka", f"/queue/{topic}"), ("amq", target), qos="ONCE_AND_ONLY_ONCE",
                          max_batch_size=20, max_batch_time=50, failure_retry_interval=200))


# ------------------------------------------------------------------ one gateway's Kafka links

def _tree(root: int) -> set[int]:
    """``root`` and its descendants (a gateway forks its Kafka consumers into child processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as file:
                    parent = int(file.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _local_ports(inodes: set[str]) -> set[int]:
    """Local ports of the IPv4 TCP sockets with these inodes."""
    ports = set()
    with open("/proc/net/tcp", encoding="ascii") as file:
        for line in file.readlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[9] in inodes:
                ports.add(int(fields[1].split(":")[1], 16))
    return ports


class OwnedLinks:
    """Stalls (without RST), then cuts (RST), the connections of one process tree through a
    :class:`TcpProxy` that every gateway's Kafka traffic passes (Tansu advertises the proxy), so
    one gateway's Kafka link fails while the other's works.  The proxy's faults are for all its
    connections; this picks one gateway's by the client's port (``/proc``)."""

    def __init__(self, proxy: TcpProxy, root: int) -> None:
        self.proxy = proxy
        self.root = root
        self.stalled: set[Any] = set()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _pairs(self) -> Iterator[Any]:
        ports = _local_ports(socket_inodes(_tree(self.root)))
        with self.proxy._lock:
            pairs = list(self.proxy._pairs)
        for pair in pairs:
            try:
                if pair.client.getpeername()[1] in ports:
                    yield pair
            except OSError:
                continue

    def _hold(self) -> None:
        for pair in self._pairs():
            if pair not in self.stalled:
                self.stalled.add(pair)
                for lane in pair.lanes.values():
                    lane._held = lambda: True  # this connection forwards nothing, without a RST

    def stall(self) -> None:
        """Hold every connection of the process tree, and the ones it opens meanwhile."""
        self._hold()

        def keep_holding() -> None:
            while not self._done.wait(0.05):
                self._hold()

        self._thread = threading.Thread(target=keep_holding, daemon=True)
        self._thread.start()

    def cut(self, down: float = 0.0) -> int:
        """Reset the held connections (RST) and, for ``down`` seconds, every new one of the process
        tree (a link that is gone); then they flow again.  Returns how many were held."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(5)
        held = len(self.stalled)
        for pair in self.stalled:
            pair.end(reset=True)
        until = time.monotonic() + down
        while time.monotonic() < until:
            for pair in self._pairs():
                pair.end(reset=True)
            time.sleep(0.05)
        return held


# ------------------------------------------------------------------ Kafka -> ActiveMQ

def two_gateways_run(tmp_path: Path, bootstrap: str, activemq: ActiveMQBroker, fault: str,
                     proxy: TcpProxy) -> tuple[Counter[str], str]:
    """Two gateways run one Kafka -> ActiveMQ bridge; ``fault`` hits the first mid-stream
    (``kill``: SIGKILL; ``stall``: its Kafka connections stall 5 s, then are cut and refused 10 s).
    The Kafka link has 100 ms of latency each way (a WAN): a batch is at the target well before
    its offsets are committed at the source, and a delivered mark is on its way as long.  Returns the
    target's seq counts and the logs."""
    tag = uuid.uuid4().hex[:8]
    topic, target = f"kown-{tag}", f"/queue/kown-dst-{tag}"
    create_topics(bootstrap, topic, partitions=2)
    config = k2a_config(bootstrap, activemq.stomp_port, topic, target)
    first, second = GatewayProcess(tmp_path / "first", config), GatewayProcess(tmp_path / "second", config)
    group = f"jmsgateway.queue.{topic}"
    started = threading.Event()
    producer = threading.Thread(target=stream, args=(bootstrap, topic, TOTAL, started), daemon=True)
    proxy.delay(0.1)
    try:
        first.start()
        first.wait_for_log("bridge k2a consuming from", timeout=60)
        second.start()
        second.wait_for_log("bridge k2a consuming from", timeout=60)
        time.sleep(3.0)  # the group settles: one partition each
        producer.start()
        started.wait(30)
        # mid-stream: both bridges are moving records (the group committed some) when the fault comes
        wait_until(lambda: all_committed(bootstrap, group, topic, TOTAL // 5), 60, "the bridges moving records")
        if fault == "kill":
            first.kill()
        else:
            assert first.process is not None
            links = OwnedLinks(proxy, first.process.pid)
            links.stall()
            time.sleep(5.0)
            print(f"held {len(links.stalled)} of {proxy.open_connections} connections")
            assert links.cut(down=10.0) > 0, "the first gateway had no Kafka connection through the proxy"
        producer.join(120)
        wait_until(lambda: all_committed(bootstrap, group, topic, TOTAL), 120, "the group committed every record")
        time.sleep(2.0)
        first.stop()
        second.stop()
        address = ("127.0.0.1", activemq.stomp_port)
        arrived = drain_counting(address, target, quiet=2.0, timeout=60)
        logs = f"FIRST:\n{first.log()[-4000:]}\nSECOND:\n{second.log()[-4000:]}"
        for line in (first.log() + second.log()).splitlines():
            if "handed over" in line or "already holds" in line:
                print(line[:300])
        return arrived, logs
    finally:
        first.kill()
        second.kill()


def verdict(arrived: Counter[str], logs: str, what: str) -> None:
    duplicated = {seq: n for seq, n in arrived.items() if n > 1}
    lost = {f"s-{i}" for i in range(TOTAL)} - set(arrived)
    print(f"\n{what}: {len(arrived)} distinct of {TOTAL}, {len(lost)} lost, {len(duplicated)} duplicated "
          f"({sum(duplicated.values()) - len(duplicated)} extra copies)")
    assert not lost, f"{len(lost)} lost: {sorted(lost)[:10]}\n{logs}"
    assert not duplicated, f"{len(duplicated)} duplicated: {sorted(duplicated)[:10]}\n{logs}"


def test_two_gateways_kafka_to_activemq_first_sigkilled_mid_stream(
        tmp_path: Path, proxied_kafka: tuple[TansuBroker, TcpProxy], activemq: ActiveMQBroker) -> None:
    broker, proxy = proxied_kafka
    arrived, logs = two_gateways_run(tmp_path, broker.bootstrap, activemq, "kill", proxy)
    verdict(arrived, logs, "kafka -> activemq, two gateways, SIGKILL of one")


def test_two_gateways_kafka_to_activemq_first_kafka_link_stalls_then_is_cut(
        tmp_path: Path, proxied_kafka: tuple[TansuBroker, TcpProxy], activemq: ActiveMQBroker) -> None:
    broker, proxy = proxied_kafka
    arrived, logs = two_gateways_run(tmp_path, broker.bootstrap, activemq, "stall", proxy)
    verdict(arrived, logs, "kafka -> activemq, two gateways, one's Kafka link stalled 5 s then cut 10 s")


# ------------------------------------------------------------------ Kafka -> Kafka


def kafka_to_kafka_run(tmp_path: Path, bootstrap: str, fault: str) -> None:
    """Two gateways run one Kafka -> Kafka ONCE_AND_ONLY_ONCE bridge (the second started mid-stream: fences
    both ways); ``fault`` hits the first once both copy: ``kill`` (SIGKILL), or ``pause`` (SIGSTOP of its
    process tree, its consumers' too, for :data:`PAUSED_FOR` s: its group membership expires while it
    holds a batch, the group gives its partitions to the second, then SIGCONT: a zombie that goes on with
    its batch and the offsets of partitions it no longer owns).  Counted by transaction at the target."""
    tag = uuid.uuid4().hex[:8]
    source, target = f"kkown-src-{tag}", f"kkown-dst-{tag}"
    create_topics(bootstrap, source, partitions=2)
    create_topics(bootstrap, target)
    config = kafka_connector_toml(bootstrap) + bridge_toml(
        "k2k", ("kafka", f"/queue/{source}"), ("kafka", f"/topic/{target}"), qos="ONCE_AND_ONLY_ONCE",
        max_batch_size=20, max_batch_time=50, failure_retry_interval=200)
    first, second = GatewayProcess(tmp_path / "first", config), GatewayProcess(tmp_path / "second", config)
    started = threading.Event()
    # a pause must come mid-stream with both copying: a slower stream (30 s) leaves time for both to start
    every = 0.4 if fault == "kill" else 1.0
    producer = threading.Thread(target=stream, args=(bootstrap, source, TOTAL, started, every), daemon=True)

    UNCOMMITTED: dict[str, Any] = {"isolation.level": "read_uncommitted"}

    def writers_now() -> set[str]:
        return {header(record, "jmsbridge.origin") or "?" for record in read_records(
            bootstrap, target, TOTAL, timeout=1.0, **UNCOMMITTED)}

    try:
        first.start()
        time.sleep(3.0)  # (the transactions engine logs nothing while it runs well)
        producer.start()  # 3000 records in 12 s
        started.wait(30)
        time.sleep(1.0)
        second.start()  # mid-stream: its producer's init_transactions meets the first's open transaction
        wait_until(lambda: len(writers_now()) == 2, 60, "both gateways copying")
        if fault == "kill":
            first.kill()
        else:
            assert first.process is not None
            paused = sorted(_tree(first.process.pid))
            for pid in paused:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            group = "jmsgateway.bridge.k2k"
            at_stop = committed_offsets(bootstrap, group, source, 2)
            time.sleep(PAUSED_FOR)
            at_cont = committed_offsets(bootstrap, group, source, 2)
            handed_over = time.monotonic() + HANDOVER_WITHIN  # (on a busy host the second may be retrying)
            while not all(c > s for c, s in zip(at_cont, at_stop, strict=True)) and time.monotonic() < handed_over:
                time.sleep(0.5)
                at_cont = committed_offsets(bootstrap, group, source, 2)
            for pid in paused:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        producer.join(120)
        copies: list[tuple[str, str | None, str | None]] = []

        def all_there() -> bool:
            copies.clear()
            for record in read_records(bootstrap, target, TOTAL, timeout=10, settle=0.5, **UNCOMMITTED):
                copies.append((header(record, "jms.seq") or "?", header(record, "jmsbridge.txn"),
                               header(record, "jmsbridge.origin")))
            return len({seq for seq, _, _ in copies}) >= TOTAL

        with contextlib.suppress(AssertionError):
            wait_until(all_there, 120, "every record at the target")
        time.sleep(3.0)
        all_there()
        writers = Counter(origin or "?" for _, _, origin in copies)
        print(f"\ncopies per gateway: {dict(writers)}")
        assert len(writers) == 2, f"both gateways copy: {dict(writers)}"
        struck = (first.data_dir / "gateway.id").read_text().strip()
        # a SIGKILLed gateway's last transaction is logged nowhere; a paused one logs what became of it
        in_flight = (next((txn for _, txn, origin in reversed(copies) if origin == struck), None)
                     if fault == "kill" else None)
        logs = f"FIRST:\n{first.log()[-4000:]}\nSECOND:\n{second.log()[-4000:]}"
        count = count_transactions([(seq, txn) for seq, txn, _ in copies], first.log() + second.log(), in_flight)
        raw = Counter(seq for seq, _, _ in copies)
        print(f"copies of aborted transactions (the killed gateway's last one: {in_flight}): {count.aborted}; "
              f"seqs at the target more than once, aborted copies included: {sum(n > 1 for n in raw.values())}")
        for line in (first.log() + second.log()).splitlines():
            if any(part in line for part in ("kafka transaction failed", "was revoked or lost", "moved past the")):
                print(line[-200:])
        if fault == "pause":
            print(f"the group's offsets at SIGSTOP {at_stop}, at SIGCONT {at_cont}")
            assert sum(at_stop) < TOTAL, "the pause came mid-stream"
            # every partition with records left at SIGSTOP moved while the first was stopped: the group gave the
            # stopped gateway's partition to the second (one already copied to its end at SIGSTOP cannot move:
            # on a busy CI host a partition once was, [438, 1502] -> [1498, 1502], 1502 its end)
            final = committed_offsets(bootstrap, "jmsgateway.bridge.k2k", source, 2)
            print(f"the group's offsets at the end {final}")
            left = [p for p, (s, f) in enumerate(zip(at_stop, final, strict=True)) if s < f]
            assert left, "the pause came while records were left to copy"
            assert all(at_cont[p] > at_stop[p] for p in left), (at_stop, at_cont, final)
        assert not count.problems, f"{count.problems}\n{logs}"
        what = "SIGKILL of one" if fault == "kill" else f"one SIGSTOPped {PAUSED_FOR} s (a zombie)"
        verdict(count.delivered, logs, f"kafka -> kafka, two gateways, {what} (read_uncommitted, "
                "less the copies of aborted transactions)")
    finally:
        first.kill()
        second.kill()


PAUSED_FOR = 4.0
"""Seconds the paused gateway stays stopped at least: four times the tests' ``session.timeout.ms`` (1 s on
Tansu, :func:`tests.support.kafka.group_settings`), so the group expels it and hands its partitions over."""

HANDOVER_WITHIN = 30.0
"""Seconds more it may stay stopped, until the second gateway has committed on both partitions."""


def test_two_gateways_kafka_to_kafka_first_sigkilled_mid_stream(tmp_path: Path, kafka_bootstrap: str) -> None:
    kafka_to_kafka_run(tmp_path, kafka_bootstrap, "kill")


def test_two_gateways_kafka_to_kafka_first_paused_past_its_session_mid_stream(tmp_path: Path,
                                                                              kafka_bootstrap: str) -> None:
    """The zombie: SIGSTOP (its whole process tree) while it holds a batch, its membership expires, the
    second gateway takes its partitions; SIGCONT: it must not commit that batch's offsets (it no longer owns
    the partitions) nor its copies.  The one ``transactional.id`` fences it once the second's producer starts
    again; on Tansu, which accepts offsets of an old generation, nothing else would."""
    kafka_to_kafka_run(tmp_path, kafka_bootstrap, "pause")
