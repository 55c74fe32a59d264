"""Issue 7 benchmark: STOMP -> gateway -> ActiveMQ -> JMS consumer, against STOMP straight to ActiveMQ.

In one run, for each of two ActiveMQ set-ups (KahaDB), one broker serves both paths:

* **direct**: the raw-socket STOMP producer sends to ActiveMQ's own STOMP port;
* **via gateway**: the same producer sends to the gateway, whose ``stomp://``
  connector forwards ``/queue/jms.*`` (a ``[[destinations]]`` rule) to
  ActiveMQ; the client's RECEIPT waits for the broker's receipt (of that
  SEND, or of a later frame that confirms it: docs/jms.md).

The two set-ups: ActiveMQ as shipped, whose ``stomp://`` connector leaves
Nagle's algorithm on (its small RECEIPTs wait for the client's delayed ACK,
up to 40 ms: the direct client sees that, the gateway asks its kernel for
quick ACKs), and ActiveMQ with ``transport.tcpNoDelay=true``, where the
comparison is the gateway hop alone.

Both paths use the same workload and receipt policy (100-byte bodies, a
receipt every 100 SENDs, waiting for the receipts after every 1,000), and the
same consumer: the real ActiveMQ JMS client (OpenWire, JPype,
auto-acknowledge) in a separate process, counting the messages on the queue.
Rate = N / (time the JMS consumer got the N-th message - time the producer
started).  Non-persistent messages first, then persistent ones (smaller
count); the row "direct, receipt per SEND" is ActiveMQ storing each message
before its receipt, one SEND at a time.  Measurements alternate and the best
of three counts.  The issue's aim: via gateway / direct above 0.75.

Run: ``.venv/bin/python -m bench.bench_jms [COUNT]``
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.common import activemq_server, gateway_server, report
from bench.stomp_load import Workload, produce

BODY_SIZE = 100
RECEIPT_EVERY = 100
ROUNDS = 3
RECEIVE_TIMEOUT_MS = 30_000


def gateway_config(stomp_uri: str) -> str:
    """A ``stomp://`` connector to ActiveMQ and the rule giving it ``/queue/jms.*``."""
    return f"""
[connectors.activemq]
uri = "{stomp_uri}"

[[destinations]]
pattern = "/queue/jms.*"
connector = "activemq"
"""


def _consumer_process(commands: Any, results: Any) -> None:
    """JMS consumer worker: for each ``(openwire_url, queue, count)`` command, subscribe, say
    ``("ready",)``, receive ``count`` messages and put ``("done", last_perf_counter)``
    (or ``("error", text)``).  ``None`` ends it.  One JVM, one connection per broker."""
    from tests.support.jvm import ensure_jvm

    ensure_jvm()
    import jpype

    jms = jpype.JPackage("javax").jms
    # The client logs through log4j 1.2; without this it warns about a missing configuration.
    jpype.JClass("org.apache.log4j.BasicConfigurator").configure(jpype.JClass("org.apache.log4j.varia.NullAppender")())
    connections: dict[str, Any] = {}
    try:
        while (command := commands.get()) is not None:
            url, queue, count = command
            try:
                connection = connections.get(url)
                if connection is None:
                    factory = jpype.JClass("org.apache.activemq.ActiveMQConnectionFactory")(url)
                    connection = connections[url] = factory.createConnection()
                    connection.start()
                session = connection.createSession(False, jms.Session.AUTO_ACKNOWLEDGE)
                consumer = session.createConsumer(session.createQueue(queue))
                results.put(("ready",))
                received = 0
                while received < count:
                    if consumer.receive(RECEIVE_TIMEOUT_MS) is None:
                        raise RuntimeError(f"JMS consumer got {received} of {count} messages on {queue}")
                    received += 1
                last = time.perf_counter()
                extra = consumer.receive(200)
                session.close()
                if extra is not None:
                    raise RuntimeError(f"JMS consumer got more than the {count} messages sent to {queue}")
                results.put(("done", last))
            except Exception as exc:  # reported to the parent, which raises
                results.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        for connection in connections.values():
            connection.close()


class JmsCounter:
    """The JMS consumer process (a JVM of its own, started once)."""

    def __init__(self) -> None:
        context = mp.get_context("fork")  # this process never starts a JVM, the child starts its own
        self.commands = context.Queue()
        self.results = context.Queue()
        self.process = context.Process(target=_consumer_process, args=(self.commands, self.results), daemon=True)
        self.process.start()

    def _result(self, timeout: float) -> tuple[Any, ...]:
        result: tuple[Any, ...] = self.results.get(timeout=timeout)
        if result[0] == "error":
            raise RuntimeError(result[1])
        return result

    def rate(self, openwire_url: str, stomp_address: tuple[str, int], work: Workload) -> float:
        """Subscribe the JMS consumer to ``work.destination``, run the STOMP producer, and return
        messages/s from the producer's start to the consumer's last message."""
        queue = work.destination.removeprefix("/queue/")
        self.commands.put((openwire_url, queue, work.count))
        self._result(timeout=60)
        start = time.perf_counter()
        produce(stomp_address, work)
        _, last = self._result(timeout=RECEIVE_TIMEOUT_MS / 1000 + work.count / 100)
        return float(work.count / (last - start))

    def close(self) -> None:
        self.commands.put(None)
        self.process.join(15)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


def cases(counter: JmsCounter, openwire_url: str, gateway: tuple[str, int], broker: tuple[str, int],
          persistent: bool, count: int) -> dict[str, Callable[[], float]]:
    def run(address: tuple[str, int], receipt_every: int = RECEIPT_EVERY) -> Callable[[], float]:
        return lambda: counter.rate(openwire_url, address, Workload(
            f"/queue/jms.bench.{uuid.uuid4().hex}", count=count, body_size=BODY_SIZE, persistent=persistent,
            receipt_every=receipt_every))

    made = {"direct to ActiveMQ": run(broker), "via gateway": run(gateway)}
    if persistent:
        made["direct, receipt per SEND"] = run(broker, receipt_every=1)
    return made


BROKERS = {
    "ActiveMQ as shipped": False,
    "ActiveMQ with transport.tcpNoDelay=true": True,
}
"""The two ActiveMQ set-ups measured: ``stomp://`` connector flags (``stomp_no_delay``)."""


Cases = dict[str, dict[str, Callable[[], float]]]
Rates = dict[tuple[str, str], list[float]]


def measure(stomp_no_delay: bool, count: int, rounds: int, persistent_count: int,
            counter: JmsCounter) -> tuple[Cases, Rates]:
    """Every case of one broker set-up, ``rounds`` times (after a warm-up round)."""
    with activemq_server(kahadb=True, stomp_no_delay=stomp_no_delay) as broker, \
            gateway_server(gateway_config(broker.stomp_uri)) as gateway:
        broker_address = ("127.0.0.1", broker.stomp_port)
        variants = {
            "non-persistent": cases(counter, broker.openwire_url, gateway.address, broker_address, False, count),
            "persistent": cases(counter, broker.openwire_url, gateway.address, broker_address, True,
                                persistent_count),
        }
        for variant in variants.values():  # warm up ActiveMQ's JIT, the connections, the consumer
            for run in variant.values():
                run()
        rates: Rates = {}
        for _ in range(rounds):
            for variant_name, variant in variants.items():
                for case, run in variant.items():
                    rates.setdefault((variant_name, case), []).append(run())
    return variants, rates


def main(count: int = 20_000, rounds: int = ROUNDS, persistent_count: int | None = None) -> None:
    persistent_count = persistent_count or max(count // 4, 1)
    counter = JmsCounter()
    try:
        results = {
            name: measure(no_delay, count, rounds, persistent_count, counter) for name, no_delay in BROKERS.items()
        }
    finally:
        counter.close()
    for broker_name, (variants, rates) in results.items():
        best = {key: max(values) for key, values in rates.items()}
        for variant_name, variant in variants.items():
            size = count if variant_name == "non-persistent" else persistent_count
            report(
                f"{broker_name}: STOMP -> ActiveMQ -> JMS consumer, {size} x {BODY_SIZE} B, {variant_name}, "
                f"receipt every {RECEIPT_EVERY} SENDs (best of {rounds})",
                [(f"{variant_name}, {case}", best[variant_name, case]) for case in variant],
                f"{variant_name}, direct to ActiveMQ",
            )
            for case in variant:
                print(f"  rounds, {case}: {' '.join(f'{rate:.0f}' for rate in rates[variant_name, case])}")
            ratio = best[variant_name, "via gateway"] / best[variant_name, "direct to ActiveMQ"]
            if BROKERS[broker_name]:
                print(f"  aim (issue 7): via gateway / direct >= 0.75: {ratio:.2f}")
            else:  # the direct client waits for ActiveMQ's Nagle-held receipts, the gateway does not
                print(f"  via gateway / direct: {ratio:.2f} (direct clients wait on Nagle here; "
                      "the aim is judged with tcpNoDelay)")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the brokers on the way out
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
