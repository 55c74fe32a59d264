"""Issue 32 benchmark: an ActiveMQ -> ActiveMQ bridge against a hand-rolled transactional relay.

One ActiveMQ 5.17 (KahaDB, so persistent means on disk), a backlog of ``COUNT`` persistent
100-byte messages per run.  The reference is what a careful user would write by hand on one
STOMP connection: SUBSCRIBE with ``client-individual`` acknowledgements (prefetch 200), each
MESSAGE ACKed *inside* a STOMP transaction together with the SEND of its copy to the target
queue, COMMIT (with a receipt, waited for) every 100.  The bridge is the gateway's
:class:`~gateway.bridges.bridge.Bridge` with two ``stomp://`` connectors (source and target),
``max_batch_size = 100``, under DUPLICATES_OK and ONCE_AND_ONLY_ONCE (its duplicate store on
disk), in this process on a reactor thread.  The three run in turn ``rounds`` times (the
host is shared) and the best rate of each is compared.

With ``--jms`` it then compares a bridge whose source is the JMS-API connector (OpenWire)
with one whose source is ``stomp://``, both into ``stomp://`` (issue 32 asks for 0.8x).

Run: ``.venv/bin/python -m bench.bench_bridge_relay [COUNT] [--jms]`` (default 5000).
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.bench_bridges import fill_activemq, wait
from bench.common import activemq_server, host_state, report
from bench.reactor_thread import reactor, run_in_reactor
from gateway.bridges.bridge import Bridge
from gateway.bridges.config import parse_bridge
from gateway.bridges.dedup import DuplicateStore
from gateway.connectors.stomp_broker import StompBrokerConnector
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame

BATCH = 100


class Relay:
    """The hand-rolled transactional relay (see the module docstring): plain blocking socket."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder(version="1.2")
        self.frames: list[Frame] = []
        self.write(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "heart-beat": "0,0"}))
        assert self.next().command == "CONNECTED"

    def write(self, *frames: Frame) -> None:
        self.sock.sendall(b"".join(encode_frame(frame, "1.2", add_content_length=False) for frame in frames))

    def next(self) -> Frame:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            for item in self.decoder.feed(data):
                if isinstance(item, Exception):
                    raise item
                self.frames.append(item)
        return self.frames.pop(0)

    def run(self, source: str, target: str, count: int) -> float:
        self.write(Frame("SUBSCRIBE", {"destination": source, "id": "1", "ack": "client-individual",
                                       "activemq.prefetchSize": str(2 * BATCH)}))
        started = time.perf_counter()
        moved = in_tx = 0
        tx = 0
        self.write(Frame("BEGIN", {"transaction": f"tx-{tx}"}))
        while moved < count:
            frame = self.next()
            if frame.command != "MESSAGE":
                continue
            name = f"tx-{tx}"
            self.write(Frame("ACK", {"id": frame.headers["ack"], "transaction": name}),
                       Frame("SEND", {"destination": target, "persistent": "true", "transaction": name},
                             frame.body))
            moved += 1
            in_tx += 1
            if in_tx == BATCH or moved == count:
                self.write(Frame("COMMIT", {"transaction": name, "receipt": name}))
                early: list[Frame] = []  # MESSAGEs for the next transaction, come before the receipt
                while True:
                    answer = self.next()
                    if answer.command == "RECEIPT" and answer.headers.get("receipt-id") == name:
                        break
                    if answer.command == "ERROR":
                        raise RuntimeError(f"relay: {answer.headers} {answer.body!r}")
                    if answer.command == "MESSAGE":
                        early.append(answer)
                self.frames[:0] = early
                tx += 1
                in_tx = 0
                if moved < count:
                    self.write(Frame("BEGIN", {"transaction": f"tx-{tx}"}))
        elapsed = time.perf_counter() - started
        self.write(Frame("DISCONNECT", {}))
        self.sock.close()
        return count / elapsed


def relay_rate(port: int, count: int) -> float:
    source, target = f"/queue/relay-src-{uuid.uuid4().hex[:8]}", f"/queue/relay-dst-{uuid.uuid4().hex[:8]}"
    fill_activemq(port, source, count)
    return Relay(port).run(source, target, count)


JMS_CLIENT_JARS = [f"/usr/share/activemq/lib/{jar}" for jar in (
    "activemq-client.jar", "geronimo-jms_1.1_spec.jar", "hawtbuf.jar", "slf4j-api.jar",
    "geronimo-j2ee-management-1.1-spec.jar")]


def source_connector(amq: Any, kind: str) -> Any:
    """The source side: ActiveMQ over STOMP, or over OpenWire through the JMS-API connector."""
    if kind == "stomp":
        return StompBrokerConnector.from_config("src", {"uri": amq.stomp_uri}, reactor=reactor,
                                                registry=CollectorRegistry())
    from gateway.connectors.jms_api import JmsConnector

    return JmsConnector.from_config("src", {
        "type": "jms", "classpath": JMS_CLIENT_JARS,
        "connection_factory": {"class": "org.apache.activemq.ActiveMQConnectionFactory",
                               "properties": {"brokerURL": f"tcp://127.0.0.1:{amq.openwire_port}",
                                              "watchTopicAdvisories": False}},
    }, reactor=reactor, registry=CollectorRegistry())


def bridge_rate(amq: Any, count: int, qos: str, workdir: Path, source_kind: str = "stomp") -> float:
    source, target = f"/queue/bridge-src-{uuid.uuid4().hex[:8]}", f"/queue/bridge-dst-{uuid.uuid4().hex[:8]}"
    fill_activemq(amq.stomp_port, source, count)
    connectors = [source_connector(amq, source_kind),
                  StompBrokerConnector.from_config("dst", {"uri": amq.stomp_uri}, reactor=reactor,
                                                   registry=CollectorRegistry())]
    for connector in connectors:
        run_in_reactor(connector.start)
    config = parse_bridge({
        "name": f"bench-{uuid.uuid4().hex[:6]}",
        "source": {"connector": "src", "destination": source},
        "target": {"connector": "dst", "destination": target},
        "qos": qos, "max_batch_size": BATCH, "max_batch_time": 20,
    }, 0, "", {"src", "dst"})
    dedup = None
    if qos == "ONCE_AND_ONLY_ONCE":
        dedup = DuplicateStore(str(workdir / f"{config.name}.sqlite"), reactor)
        dedup.register(config.name, config.duplicate_window)
        run_in_reactor(dedup.open)
    bridge = Bridge(config, connectors[0], connectors[1], clock=reactor, dedup=dedup, metrics=None)
    started = time.perf_counter()
    run_in_reactor(bridge.start)
    wait(lambda: bridge.forwarded >= count)
    elapsed = time.perf_counter() - started
    run_in_reactor(bridge.stop)
    if dedup is not None:
        run_in_reactor(dedup.close)
    for connector in connectors:
        run_in_reactor(connector.stop)
    return count / elapsed


def main(count: int = 5000, rounds: int = 3, jms: bool = False) -> None:
    cases = ["relay", "DUPLICATES_OK", "ONCE_AND_ONLY_ONCE"]
    rates: dict[str, list[float]] = {case: [] for case in cases}
    with activemq_server(kahadb=True) as amq, tempfile.TemporaryDirectory() as tmp:
        relay_rate(amq.stomp_port, min(count, 1000))  # warm-up
        bridge_rate(amq, min(count, 1000), "DUPLICATES_OK", Path(tmp))  # warm-up
        for _ in range(rounds):  # interleaved, best of each: the host is shared
            for case in cases:
                rate = (relay_rate(amq.stomp_port, count) if case == "relay"
                        else bridge_rate(amq, count, case, Path(tmp)))
                rates[case].append(rate)
    reference = f"hand-rolled transactional relay, {BATCH} per COMMIT"
    rows = [(reference, max(rates["relay"]))]
    rows += [(f"bridge {qos}, batch {BATCH}", max(rates[qos])) for qos in cases[1:]]
    print(f"host: {host_state()}")
    for case in cases:
        print(f"  {case} runs: {', '.join(f'{rate:.0f}' for rate in rates[case])} msg/s")
    report(f"ActiveMQ -> ActiveMQ, {count} x 100 B persistent (KahaDB), best of {rounds}, ratio vs the relay",
           rows, reference)
    if jms:
        jms_vs_stomp(count)


def jms_vs_stomp(count: int) -> None:
    """jms-source bridges against stomp:// ones (issue 32: within 0.8x), ONCE_AND_ONLY_ONCE, batch 100."""
    rows: list[tuple[str, float]] = []
    with activemq_server(kahadb=True) as amq, tempfile.TemporaryDirectory() as tmp:
        for kind in ("stomp", "jms"):
            bridge_rate(amq, min(count, 500), "ONCE_AND_ONLY_ONCE", Path(tmp), kind)  # warm-up (the JVM)
            rows.append((f"{kind} -> stomp ONCE_AND_ONLY_ONCE, batch {BATCH}",
                         bridge_rate(amq, count, "ONCE_AND_ONLY_ONCE", Path(tmp), kind)))
    print(f"host: {host_state()}")
    report(f"jms-source vs stomp-source bridges, {count} x 100 B persistent", rows, rows[0][0])


if __name__ == "__main__":
    numbers = [arg for arg in sys.argv[1:] if arg.isdigit()]
    main(int(numbers[0]) if numbers else 5000, jms="--jms" in sys.argv)
