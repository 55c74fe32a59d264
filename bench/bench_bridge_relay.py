"""Issue 32 benchmark: an ActiveMQ -> ActiveMQ bridge against a hand-rolled transactional relay.

One ActiveMQ 5.17 (KahaDB, so persistent means on disk), a backlog of ``COUNT`` persistent
100-byte messages per run.  The reference is what a careful user would write by hand on one
STOMP connection: SUBSCRIBE with ``client-individual`` acknowledgements (prefetch 200), each
MESSAGE ACKed *inside* a STOMP transaction together with the SEND of its copy to the target
queue, COMMIT (with a receipt, waited for) every 100.  The bridge is the gateway's
:class:`~gateway.bridges.bridge.Bridge` with two ``stomp://`` connectors (source and target),
``max_batch_size = 100``, under DUPLICATES_OK and ONCE_AND_ONLY_ONCE (its duplicate store on
disk), in this process on a reactor thread.  The relay runs before and after the bridges;
the better of its two rates is the reference.

Run: ``.venv/bin/python -m bench.bench_bridge_relay [COUNT]`` (default 5000).
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
from gateway.stomp.codec import FrameDecoder, encode_frame
from gateway.stomp.frame import Frame

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


def bridge_rate(amq: Any, count: int, qos: str, workdir: Path) -> float:
    source, target = f"/queue/bridge-src-{uuid.uuid4().hex[:8]}", f"/queue/bridge-dst-{uuid.uuid4().hex[:8]}"
    fill_activemq(amq.stomp_port, source, count)
    connectors = [StompBrokerConnector.from_config(name, {"uri": amq.stomp_uri}, reactor=reactor,
                                                   registry=CollectorRegistry()) for name in ("src", "dst")]
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


def main(count: int = 5000) -> None:
    rows: list[tuple[str, float]] = []
    with activemq_server(kahadb=True) as amq, tempfile.TemporaryDirectory() as tmp:
        relay_rate(amq.stomp_port, min(count, 1000))  # warm-up
        bridge_rate(amq, min(count, 1000), "DUPLICATES_OK", Path(tmp))  # warm-up
        relays = [relay_rate(amq.stomp_port, count)]
        for qos in ("DUPLICATES_OK", "ONCE_AND_ONLY_ONCE"):
            rows.append((f"bridge {qos}, batch {BATCH}", bridge_rate(amq, count, qos, Path(tmp))))
        relays.append(relay_rate(amq.stomp_port, count))
    rows.insert(0, (f"hand-rolled transactional relay, {BATCH} per COMMIT", max(relays)))
    print(f"host: {host_state()}; relay runs: {', '.join(f'{rate:.0f}' for rate in relays)} msg/s")
    report(f"ActiveMQ -> ActiveMQ, {count} x 100 B persistent (KahaDB), ratio vs the relay",
           rows, rows[0][0])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
