"""Issue 27 benchmark: queues deeper than memory, paged vs in memory vs ActiveMQ.

``rates`` (the default part): a backlog of ten times ``memory_limit`` (1 KB
bodies) is sent into a queue nobody consumes, then drained by one consumer.
Printed for each server: the SEND rate (producer alone, until the last
receipt) and the drain rate (from the SUBSCRIBE to the last message), and
the gateway's peak RSS.  Three servers run at once and the runs alternate:

- the gateway with ``broker.memory_limit`` = the limit (the backlog is paged:
  non-persistent messages to the page file, persistent ones read back from the
  SQLite store);
- the gateway with a limit far above the backlog (everything in memory), the
  reference: the aim is paging costing less than 30% of its rates;
- ActiveMQ 5.17 with ``memoryUsage`` = the same limit (its store cursors spill
  non-persistent messages to the temp store and page persistent ones from
  KahaDB), warmed until its rate stops rising, full JIT.

Two workloads: non-persistent, and persistent with a receipt every 100 SENDs.

``restart``: 1,000,000 persistent 1 KB messages queued, the gateway stopped
(SIGTERM) and started again on the same store: seconds until it listens (aim:
within 20 s), RSS empty, before the restart and after it (aim: bounded by the
limit plus a fixed overhead, not by the backlog), time to the first message
a consumer gets, and the queue depth /status reports.

Run: ``.venv/bin/python -m bench.bench_paging [--limit-mb N] [--repeat N] [--part rates|restart|all] [--quick]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import host_state, rss_bytes, warm_up
from bench.stomp_load import StompSocket, Workload, produce, run_pair
from gateway.wire.frame import Frame
from tests.support.activemq import ActiveMQBroker
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port

Address = tuple[str, int]
MB = 1024 * 1024
BODY = 1024
IN_MEMORY_LIMIT = "1TB"
"""The reference gateway's memory_limit: nothing is ever paged."""


@dataclass
class Server:
    """One server under test: where it listens and, for a gateway, its process."""

    name: str
    address: Address
    pid: int | None = None
    send: list[float] = field(default_factory=list)
    drain: list[float] = field(default_factory=list)
    peak_rss: float = 0.0


class RssWatch:
    """The highest RSS of a process while the ``with`` block runs (sampled every 50 ms)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peak = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while self.pid is not None and not self._halt.wait(0.05):
            with contextlib.suppress(OSError, RuntimeError):
                self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> RssWatch:
        if self.pid is not None:
            self.peak = rss_bytes(self.pid)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(2)


@contextlib.contextmanager
def gateway_with_limit(limit: str, admin: bool = False) -> Iterator[GatewayProcess]:
    """A gateway (default config: SQLite store) whose memory_limit is set on the command line."""
    with tempfile.TemporaryDirectory(prefix="bench-paging-gw-") as workdir:
        extra = ""
        if admin:
            extra = f'[admin]\nlisten = "tcp:{free_port()}:interface=127.0.0.1"\n'
        process = GatewayProcess(Path(workdir), extra, args=["--set", f"broker.memory_limit={json.dumps(limit)}"])
        process.start()
        try:
            yield process
        finally:
            process.stop(timeout=120)


@contextlib.contextmanager
def activemq_with_limit(limit_mb: int, full_jit: bool = True) -> Iterator[ActiveMQBroker]:
    """ActiveMQ with KahaDB, tcpNoDelay, the JVM's full JIT (unless ``full_jit`` is False: a faster
    start) and ``memoryUsage`` = ``limit_mb`` (temp store large enough for the non-persistent backlog)."""
    with tempfile.TemporaryDirectory(prefix="bench-paging-amq-") as workdir:
        broker = ActiveMQBroker(workdir, kahadb=True, heap="1g", stomp_no_delay=True, full_jit=full_jit)
        config = broker.config_file.read_text()
        for before, after in (('<memoryUsage limit="128 mb"/>', f'<memoryUsage limit="{limit_mb} mb"/>'),
                              ('<tempUsage limit="1 gb"/>', '<tempUsage limit="16 gb"/>'),
                              ('<storeUsage limit="2 gb"/>', '<storeUsage limit="16 gb"/>')):
            assert before in config, f"{before} not in ActiveMQ's config"
            config = config.replace(before, after)
        broker.config_file.write_text(config)
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()


def drain_rate(address: Address, destination: str, count: int, prefetch: int = 1000) -> float:
    """Messages/s one auto-ack consumer takes ``count`` queued messages at (from its SUBSCRIBE)."""
    client = StompSocket(address)
    start = time.perf_counter()
    client.write(Frame("SUBSCRIBE", {"destination": destination, "id": "drain", "ack": "auto",
                                     "activemq.prefetchSize": str(prefetch)}))
    received = 0
    while received < count:
        for frame in client.read_many():
            if frame.command == "MESSAGE":
                received += 1
            elif frame.command == "ERROR":
                raise RuntimeError(f"ERROR from server: {frame.headers} {frame.body!r}")
    elapsed = time.perf_counter() - start
    client.close()
    return count / elapsed


def backlog_round(server: Server, count: int, persistent: bool) -> None:
    """Send ``count`` messages into a fresh queue, then drain it; record both rates and the peak RSS."""
    destination = f"/queue/backlog.{uuid.uuid4().hex}"
    work = Workload(destination, count=count, body_size=BODY, persistent=persistent,
                    receipt_every=100 if persistent else 0)
    with RssWatch(server.pid) as rss:
        server.send.append(count / produce(server.address, work))
        server.drain.append(drain_rate(server.address, destination, count))
    server.peak_rss = max(server.peak_rss, rss.peak / MB)


def print_rates(title: str, servers: list[Server], reference: Server, paged: Server, activemq: Server) -> None:
    print(f"\n{title}")
    print(f"  {'server':<44} {'SEND msg/s':>11} {'drain msg/s':>12} {'SEND ratio':>11} {'drain ratio':>12} "
          f"{'peak RSS':>9}")
    base_send, base_drain = statistics.median(reference.send), statistics.median(reference.drain)
    for server in servers:
        send, drained = statistics.median(server.send), statistics.median(server.drain)
        rss = f"{server.peak_rss:.0f} MB" if server.pid is not None else "-"
        print(f"  {server.name:<44} {send:>11.0f} {drained:>12.0f} {send / base_send:>11.2f} "
              f"{drained / base_drain:>12.2f} {rss:>9}", flush=True)
    send_cost = 1 - statistics.median(paged.send) / base_send
    drain_cost = 1 - statistics.median(paged.drain) / base_drain
    print(f"  paging costs {send_cost:.0%} of the in-memory SEND rate and {drain_cost:.0%} of its drain rate "
          f"(aim < 30%); paged / ActiveMQ: SEND {statistics.median(paged.send) / statistics.median(activemq.send):.2f}"
          f", drain {statistics.median(paged.drain) / statistics.median(activemq.drain):.2f}", flush=True)


def rates(limit_mb: int, repeat: int, quick: bool) -> None:
    count = 10 * limit_mb * MB // BODY
    with gateway_with_limit(f"{limit_mb}MB") as paged_gw, gateway_with_limit(IN_MEMORY_LIMIT) as memory_gw, \
            activemq_with_limit(limit_mb, full_jit=not quick) as broker:
        paged = Server(f"gateway, memory_limit {limit_mb} MB (paged)", paged_gw.address, pid(paged_gw))
        memory = Server("gateway, everything in memory (reference)", memory_gw.address, pid(memory_gw))
        activemq = Server(f"activemq, memoryUsage {limit_mb} MB, KahaDB", ("127.0.0.1", broker.stomp_port))
        servers = [paged, memory, activemq]
        jit = "C1 only (--quick)" if quick else "full JIT (C2)"
        print(f"ActiveMQ 5.17: KahaDB, {jit}, STOMP tcpNoDelay, memoryUsage {limit_mb} MB; "
              f"gateways: default config (SQLite store), memory_limit {limit_mb} MB and {IN_MEMORY_LIMIT}")
        warm_rounds, warm_count = (1, 1_000) if quick else (12, 20_000)
        for server in servers:
            def one_round(address: Address = server.address) -> float:
                return run_pair(address, Workload(f"/queue/warmup.{uuid.uuid4().hex}", count=warm_count))
            rounds = warm_up(one_round, max_rounds=warm_rounds, min_rounds=min(2, warm_rounds))
            print(f"warm-up {server.name}: {len(rounds)} rounds of {warm_count} 1→1 messages: "
                  + ", ".join(f"{rate:.0f}" for rate in rounds) + " msg/s", flush=True)

        for persistent in (False, True):
            for server in servers:
                server.send.clear()
                server.drain.clear()
                server.peak_rss = 0.0
            for _ in range(repeat):
                for server in servers:
                    backlog_round(server, count, persistent)
            kind = "persistent, receipt every 100" if persistent else "non-persistent"
            print_rates(f"backlog of 10 x memory_limit: {count} x 1 KB {kind} into a queue without consumers, "
                        f"then drained (median of {repeat}; ratio = / in-memory gateway)",
                        servers, memory, paged, activemq)


def pid(process: GatewayProcess) -> int:
    assert process.process is not None
    return process.process.pid


def queue_depth(admin_port: int, destination: str) -> object:
    """The depth /status reports for ``destination`` (None when the admin port or queue is missing)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/status", timeout=30) as response:
            document = json.loads(response.read())
    except OSError:
        return None
    return document.get("connectors", {}).get("embedded", {}).get("queues", {}).get(destination, {}).get("pending")


def first_message_ms(address: Address, destination: str) -> float:
    client = StompSocket(address)
    start = time.perf_counter()
    client.write(Frame("SUBSCRIBE", {"destination": destination, "id": "first", "ack": "client-individual",
                                     "activemq.prefetchSize": "1"}))
    while (frame := client.read()).command != "MESSAGE":
        if frame.command == "ERROR":
            raise RuntimeError(f"ERROR from server: {frame.headers} {frame.body!r}")
    elapsed = (time.perf_counter() - start) * 1e3
    client.sock.close()  # unacknowledged: the message stays queued
    return elapsed


def restart(limit_mb: int, count: int, settle: float = 5.0) -> None:
    destination = "/queue/deep"
    admin_port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-paging-restart-") as workdir:
        process = GatewayProcess(Path(workdir), f'[admin]\nlisten = "tcp:{admin_port}:interface=127.0.0.1"\n',
                                 args=["--set", f'broker.memory_limit="{limit_mb}MB"'])
        try:
            process.start()
            empty = rss_bytes(pid(process)) / MB
            started = time.perf_counter()
            with RssWatch(pid(process)) as rss:
                produce(process.address, Workload(destination, count=count, body_size=BODY, persistent=True,
                                                  receipt_every=1000))
            sent = time.perf_counter() - started
            loaded = rss_bytes(pid(process)) / MB
            started = time.perf_counter()
            process.stop(timeout=300)
            stopped = time.perf_counter() - started
            started = time.perf_counter()
            process.start(timeout=600)
            listening = time.perf_counter() - started
            at_listen = rss_bytes(pid(process)) / MB
            first = first_message_ms(process.address, destination)
            time.sleep(settle)
            settled = rss_bytes(pid(process)) / MB
            depth = queue_depth(admin_port, destination)
        finally:
            process.stop(timeout=300)
    print(f"\nrestart with {count} x 1 KB persistent messages queued (memory_limit {limit_mb} MB, SQLite store)")
    print(f"  sending them: {sent:.1f} s ({count / sent:.0f} msg/s, receipt every 1000); gateway RSS empty "
          f"{empty:.0f} MB, peak while sending {rss.peak / MB:.0f} MB, at the end {loaded:.0f} MB")
    print(f"  stop (SIGTERM): {stopped:.1f} s; start until it listens: {listening:.1f} s (aim ≤ 20 s)")
    print(f"  RSS after the restart: {at_listen:.0f} MB when listening, {settled:.0f} MB {settle:g} s later "
          f"(aim: bounded by memory_limit + a fixed overhead, not by the {count * BODY / MB:.0f} MB backlog)")
    print(f"  first message to a consumer after the restart: {first:.0f} ms; queue depth in /status: {depth}",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.bench_paging", description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit-mb", type=int, default=None, help="memory_limit in MB (default 32; quick 1)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per workload and server (median; default 3)")
    parser.add_argument("--part", choices=("rates", "restart", "all"), default=None,
                        help="rates (default), restart, or both (--quick: both)")
    parser.add_argument("--restart-count", type=int, default=None,
                        help="persistent 1 KB messages queued for the restart part (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="everything small (checks the code path)")
    args = parser.parse_args(argv)
    limit_mb = args.limit_mb or (1 if args.quick else 32)
    repeat = args.repeat or (1 if args.quick else 3)
    part = args.part or ("all" if args.quick else "rates")
    restart_count = args.restart_count or (10_000 if args.quick else 1_000_000)

    print(f"host: {host_state()}", flush=True)
    started = time.monotonic()
    parts: dict[str, Callable[[], None]] = {
        "rates": lambda: rates(limit_mb, repeat, args.quick),
        "restart": lambda: restart(limit_mb, restart_count, 1.0 if args.quick else 5.0),
    }
    for name, run in parts.items():
        if part in (name, "all"):
            run()
    print(f"\n({time.monotonic() - started:.0f} s; host at the end: {host_state()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
