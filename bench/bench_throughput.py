"""Issues 2 and 20 benchmark: gateway (embedded broker) vs ActiveMQ's STOMP connector.

Workloads (100-byte non-persistent bodies unless named otherwise):

- 1 producer → 1 consumer on a queue: auto ack, client ack (cumulative, an
  ACK per message) and client-individual ack;
- 4 producers → 4 consumers, each pair on a queue of its own;
- a topic with 1 producer → 10 subscribers (rate = messages delivered/s);
- 1 KB and 64 KB bodies, 1 → 1, auto ack;
- persistent, a receipt every 100 SENDs, 1 → 1 (the gateway's SQLite store
  vs ActiveMQ's KahaDB);
- issue 39's client application shape (:mod:`bench.app_client`): one client
  process whose producer and consumer are two threads sharing one GIL, SENDs
  with ``content-type`` and ``content-length``, 500 SENDs a write, no prefetch
  header, auto ack; 100 B and 1 KB bodies.  ``--app-only`` runs just these
  two (after the warm-up): a few minutes.

Then latency: one producer paced at half (and a tenth) of the gateway's peak
1 → 1 rate, each SEND stamped with the time it was written; p50/p99 of
SEND-written to MESSAGE-read for both servers at the same rate.

Under each workload's ratio the servers' CPU time per message (user + kernel,
``/proc``, over the measured runs) is printed: on a shared host the rates of a
single-threaded server move with what else runs (it gets one core's share while
ActiveMQ's threads spread over both), its CPU per message does not.

Beside it the load generator's own CPU time per message (its producer and
consumer processes) and what the host allows: on a host whose cores are all
busy, a server's rate cannot pass ``cores / (server + clients)`` CPU per
message, so the ratio cannot pass ``(A + C_a) / (G + C_g)`` however fast the
gateway's single thread is.  The consumers count MESSAGE frames and pick out
their ``ack`` ids with ``bytes`` operations (:class:`bench.stomp_load.FrameCounter`);
``--decoding-clients`` makes them decode every frame with the gateway's pure-Python
codec instead, as earlier rounds did: then a consumer spends 7-8 µs a message,
about twice what the gateway does, and the clients, not the servers, fill the
host's two cores (issue 39, 2026-11-28 evening).

ActiveMQ runs twice, side by side: with ``transport.tcpNoDelay=true`` on its
STOMP port (its best for latency) and as Debian ships it (Nagle on: it writes
fewer, larger segments, which its consumers read in fewer ``recv`` calls); the
ratio is the gateway's rate over the better of the two.  ``--activemq
nodelay|shipped`` runs only one.

The servers run at once and the runs alternate (gateway, ActiveMQ, ...), so
other load on the host hits them alike; each figure is the median of
``--repeat`` runs.  Before measuring, each server is warmed with 1 → 1 rounds
until its rate stops rising (bounded), ActiveMQ with the JVM's full JIT (C2),
and each workload gets unmeasured rounds of half its size per server until its
rate stops rising too (at most 8; one with ``--quick``): ActiveMQ's persistent
path (KahaDB) is not warmed by non-persistent rounds, and its rate climbed from
8.9k to 13.7k msg/s over eight measured persistent runs when it had one
unmeasured round (issue 39: the spread of the persistent ratio).  The same raw-socket
load generator (:mod:`bench.stomp_load`) drives both.

``--compiled`` runs the gateway from a copy of this tree whose hot modules are
compiled with mypyc (:func:`bench.ab_trees.compiled_tree`).

Run: ``.venv/bin/python -m bench.bench_throughput [--count N] [--repeat N] [--quick] [--app-only] [--compiled]
[--decoding-clients] [--activemq both|nodelay|shipped]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from bench.ab_trees import compiled_tree, gateway_from
from bench.app_client import run_app
from bench.common import activemq_server, cpu_seconds, gateway_server, host_state, warm_up
from bench.stomp_load import Latency, Workload, run_group, run_latency, run_pair

Address = tuple[str, int]


APP_READS: dict[Address, list[float]] = {}
"""MESSAGEs per ``recv`` the application-shaped client saw, per server (its runs so far)."""


@dataclass(frozen=True, slots=True)
class Case:
    """One workload: what each producer sends, to how many destinations, with how many subscribers each."""

    name: str
    work: Workload
    destinations: int = 1
    subscribers: int = 1
    app: bool = False  # the client application's shape (bench.app_client): one process, two threads

    def run(self, address: Address, count: int, *, decode: bool = False) -> float:
        kind = "topic" if self.subscribers > 1 else "queue"
        work = replace(self.work, destination=f"/{kind}/bench.{uuid.uuid4().hex}", count=count, decode=decode)
        if self.app:
            outcome = run_app(address, work)
            APP_READS.setdefault(address, []).append(outcome.messages_per_read)
            return outcome.rate
        return run_group(address, work, destinations=self.destinations, subscribers=self.subscribers)[0]


def app_cases(count: int) -> list[tuple[Case, int]]:
    """Issue 39's client shape: producer and consumer threads in one process, 500 SENDs a write,
    ``content-type`` and ``content-length``, no prefetch header."""
    app = Workload("", batch=500, prefetch=0)
    return [
        (Case("app: 1 process, 2 threads, 1→1 queue, 100 B", app, app=True), count),
        (Case("app: 1 process, 2 threads, 1→1 queue, 1 KB", replace(app, body_size=1024), app=True), count // 2),
    ]


def cases(count: int) -> list[tuple[Case, int]]:
    """Every workload with the number of messages each of its producers sends."""
    plain = Workload("")
    return [
        (Case("1→1 queue, auto ack", plain), count),
        (Case("1→1 queue, client ack (ACK per message)", replace(plain, ack="client")), count),
        (Case("1→1 queue, client-individual ack", replace(plain, ack="client-individual")), count),
        (Case("4 producers → 4 consumers, 4 queues", plain, destinations=4), count // 4),
        (Case("topic, 1 producer → 10 subscribers (deliveries/s)", plain, subscribers=10), count // 10),
        (Case("1→1 queue, 1 KB bodies", replace(plain, body_size=1024)), count // 2),
        (Case("1→1 queue, 64 KB bodies", replace(plain, body_size=65536, batch=8)), max(count // 25, 20)),
        (Case("1→1 queue, persistent, receipt every 100", replace(plain, persistent=True, receipt_every=100)),
         count // 5),
    ]


def alternate(servers: dict[str, Address], measure: object, repeat: int) -> dict[str, list[float]]:
    """Run ``measure(address)`` ``repeat`` times per server, the servers taking turns."""
    results: dict[str, list[float]] = {name: [] for name in servers}
    for _ in range(repeat):
        for name, address in servers.items():
            results[name].append(measure(address))  # type: ignore[operator]
    return results


def children_cpu() -> float:
    """User + system CPU time of this process's finished children (the load generator's processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def print_ratio(name: str, results: dict[str, list[float]]) -> float:
    """One workload's line: each server's median rate, and the gateway's over ActiveMQ's best."""
    medians = {server: statistics.median(rates) for server, rates in results.items()}
    best = max(rate for server, rate in medians.items() if server != "gateway")
    ratio = medians["gateway"] / best
    print(f"  {name:<52} " + " ".join(f"{rate:>10.0f}" for rate in medians.values()) + f" {ratio:>7.2f}",
          flush=True)
    return ratio


def print_cpu(messages: int, used: dict[str, float], clients: dict[str, float], results: dict[str, list[float]],
              aim: float = 2.0) -> None:
    """The servers' and the load generator's CPU per message, and what ``aim`` times the better ActiveMQ's rate
    would allow the gateway: at most a core's worth on its reactor thread, and the host's cores shared
    with the load generator."""
    cores = os.cpu_count() or 1
    per = {name: seconds / messages * 1e6 for name, seconds in used.items()}
    load = {name: seconds / messages * 1e6 for name, seconds in clients.items()}
    print("    (CPU µs per message, server + load generator: " + ", ".join(
        f"{name} {per[name]:.1f} + {load[name]:.1f}" for name in used) + ")", flush=True)
    wanted = aim * max(statistics.median(rates) for name, rates in results.items() if name != "gateway")
    print(f"    ({aim:g} x the better ActiveMQ is {wanted:.0f} msg/s: the gateway's thread ≤ {1e6 / wanted:.1f} µs "
          f"a message (now {per['gateway']:.1f}), gateway + load generator ≤ {cores * 1e6 / wanted:.1f} µs "
          f"(now {per['gateway'] + load['gateway']:.1f}))", flush=True)


def latency(servers: dict[str, Address], rate: int, fraction: float, seconds: float, repeat: int) -> None:
    """Both servers' latency percentiles with one producer paced at ``rate``."""
    work = Workload("", count=max(int(rate * seconds), 100), rate=rate)
    print(f"\nLatency, SEND written → MESSAGE read, 1→1 queue, auto ack, 100 B, producer paced at "
          f"{rate} msg/s ({fraction:g} of the gateway's 1→1 peak), {work.count} messages, median of {repeat}")
    print(f"  {'server':<12} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    runs: dict[str, list[Latency]] = {name: [] for name in servers}
    for _ in range(repeat):
        for name, address in servers.items():
            runs[name].append(run_latency(address, replace(work, destination=f"/queue/lat.{uuid.uuid4().hex}")))
    for name, each in runs.items():
        p50 = statistics.median(run.p50 for run in each)
        p99 = statistics.median(run.p99 for run in each)
        print(f"  {name:<12} {p50:>8.2f} {p99:>8.2f} {max(run.max for run in each):>8.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.bench_throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("count", nargs="?", type=int, help="messages per 1→1 run (default 50000)")
    parser.add_argument("--count", dest="count_option", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None, help="runs per workload and server (median)")
    parser.add_argument("--quick", action="store_true", help="every workload, small (checks the code path)")
    parser.add_argument("--compiled", action="store_true",
                        help="the gateway from a copy of this tree with its hot modules compiled (mypyc)")
    parser.add_argument("--app-only", action="store_true",
                        help="only the client application's shape (bench.app_client), no latency runs")
    parser.add_argument("--only", metavar="TEXT",
                        help="only the workloads whose name holds TEXT (e.g. persistent), no latency runs")
    parser.add_argument("--activemq", choices=["both", "nodelay", "shipped"], default="both",
                        help="ActiveMQ's STOMP port with tcpNoDelay, as Debian ships it (Nagle on), or both "
                             "side by side (default; the ratio is against the better)")
    parser.add_argument("--decoding-clients", action="store_true",
                        help="the consumers decode every frame (the gateway's pure-Python codec) instead of "
                             "counting them (bench.stomp_load.FrameCounter)")
    parser.add_argument("--latency-at", type=float, nargs="+", default=[0.5, 0.1], metavar="FRACTION",
                        help="paced latency runs at these fractions of the gateway's 1→1 peak (default 0.5 0.1)")
    args = parser.parse_args(argv)
    count = args.count_option or args.count or (2000 if args.quick else 50_000)
    repeat = args.repeat or (1 if args.quick else 3)
    warm_rounds, warm_count = (2, count) if args.quick else (12, 20_000)
    case_rounds = 1 if args.quick else 8  # (per workload and server, before it is measured)
    latency_seconds = 1.0 if args.quick else 5.0

    print(f"host: {host_state()}", flush=True)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.compiled:
            tree = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-compiled-")))
            compiled_tree(tree)
            gateway = stack.enter_context(gateway_from(tree))
        else:
            gateway = stack.enter_context(gateway_server())
        servers = {"gateway": gateway.address}
        assert gateway.process is not None
        pids = {"gateway": gateway.process.pid}
        for name, no_delay in (("activemq", True), ("amq-shipped", False)):
            if args.activemq in ("both", "nodelay" if no_delay else "shipped"):
                broker = stack.enter_context(activemq_server(kahadb=True, stomp_no_delay=no_delay, full_jit=True))
                assert broker.pid is not None
                servers[name], pids[name] = ("127.0.0.1", broker.stomp_port), broker.pid
        print("ActiveMQ: KahaDB, full JIT (C2); " + ", ".join(
            f"{name}: STOMP tcpNoDelay={name == 'activemq'}" for name in servers if name != "gateway") +
            f"; gateway: default config (SQLite store){', hot modules compiled (mypyc)' if args.compiled else ''}"
            f"; consumers {'decode every frame' if args.decoding_clients else 'count the frames'}")
        for name, address in servers.items():
            def one_round(address: Address = address) -> float:
                return run_pair(address, Workload(f"/queue/warmup.{uuid.uuid4().hex}", count=warm_count))
            rates = warm_up(one_round, max_rounds=warm_rounds)
            print(f"warm-up {name}: {len(rates)} rounds of {warm_count} 1→1 messages until the rate stopped "
                  f"rising (bound {warm_rounds}): " + ", ".join(f"{rate:.0f}" for rate in rates) + " msg/s",
                  flush=True)

        print(f"\nSTOMP throughput, median of {repeat}, messages/s (ratio = gateway / the better ActiveMQ)")
        print(f"  {'workload':<52} " + " ".join(f"{name:>10}" for name in servers) + f" {'ratio':>7}")
        peak = 0.0
        workloads = app_cases(count) if args.app_only else [*cases(count), *app_cases(count)]
        if args.only:
            workloads = [(case, n) for case, n in workloads if args.only in case.name]
        for case, per_producer in workloads:
            for name, address in servers.items():  # unmeasured rounds until this workload's rate stops rising
                def workload_round(address: Address = address, case: Case = case, n: int = per_producer) -> float:
                    return case.run(address, max(n // 2, 10), decode=args.decoding_clients)
                rates = warm_up(workload_round, max_rounds=case_rounds)
                if not args.quick:
                    print(f"    (warm-up {name}: " + ", ".join(f"{rate:.0f}" for rate in rates) + ")", flush=True)
            used = {name: 0.0 for name in servers}
            clients = {name: 0.0 for name in servers}

            def measure(address: Address, case: Case = case, n: int = per_producer,
                        used: dict[str, float] = used, clients: dict[str, float] = clients) -> float:
                name = next(name for name, each in servers.items() if each == address)
                before, load = cpu_seconds(pids[name]), children_cpu()
                rate = case.run(address, n, decode=args.decoding_clients)
                used[name] += cpu_seconds(pids[name]) - before
                clients[name] += children_cpu() - load
                return rate

            results = alternate(servers, measure, repeat)
            print_ratio(case.name, results)
            print_cpu(repeat * per_producer * case.destinations * case.subscribers, used, clients, results)
            if case.app:
                reads = {name: statistics.median(APP_READS.pop(address)) for name, address in servers.items()}
                print("    (MESSAGEs per client read: " + ", ".join(f"{name} {value:.0f}" for name, value in
                                                             reads.items()) + ")", flush=True)
            if not peak:
                peak = statistics.median(results["gateway"])

        for fraction in [] if args.app_only or args.only else args.latency_at:
            latency(servers, round(peak * fraction), fraction, latency_seconds, repeat)
    print(f"\n({time.monotonic() - started:.0f} s; host at the end: {host_state()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
