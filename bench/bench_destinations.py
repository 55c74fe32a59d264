"""Issue 37 benchmark: destination features, the gateway's embedded broker vs ActiveMQ.

- **wildcard fan-out**: one producer publishes to 1,000 topics (``/topic/fan.<k>.eu``, in turn);
  100 wildcard subscriptions (half ``/topic/fan.>``, half ``/topic/fan.*.eu``, 25 per connection,
  four consumer processes) each receive every message; the rate is deliveries/s.
- **message groups**: one producer → one queue → one consumer, each message in one of 1,000
  groups (``JMSXGroupID``, in turn): the groups' bookkeeping on the delivery path, messages/s.
- **virtual topic**: one producer → ``/topic/VirtualTopic.<name>`` → two consumer groups with one
  consumer each (deliveries/s).

Both servers run at once, the runs alternate, each figure is the median of ``--repeat`` runs, the
ratio is gateway / ActiveMQ (ActiveMQ 5.17 with KahaDB, full JIT, STOMP ``tcpNoDelay``; both
warmed with 1 → 1 rounds first).  It asserts nothing.

Run: ``.venv/bin/python -m bench.bench_destinations [--count N] [--repeat N] [--quick] [--only wildcard]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
import uuid
from collections.abc import Callable

from bench.bench_throughput import print_ratio
from bench.common import activemq_server, gateway_server, host_state, warm_up
from bench.stomp_load import StompSocket, Workload, run_pair
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame

Address = tuple[str, int]
TOPICS = 1000
GROUPS = 1000
SUBSCRIPTIONS = 100
CONNECTIONS = 4


def _produce(address: Address, frames: list[tuple[bytes, bytes]], count: int, go: object) -> None:
    """Send ``count`` frames (cycling through ``frames``: each SEND plain and with a receipt, the
    last one with it) in large writes, then wait for that receipt."""
    client = StompSocket(address)
    go.wait()  # type: ignore[attr-defined]
    chunk: list[bytes] = []
    for index in range(count - 1):
        chunk.append(frames[index % len(frames)][0])
        if len(chunk) >= 200:
            client.sock.sendall(b"".join(chunk))
            chunk = []
    client.sock.sendall(b"".join(chunk) + frames[(count - 1) % len(frames)][1])
    while client.read().command != "RECEIPT":
        pass
    client.close()


def _consume(address: Address, destinations: list[str], expected: int, ready: object, result: object) -> None:
    """Subscribe to every destination on one connection; count ``expected`` MESSAGEs in all."""
    client = StompSocket(address)
    for index, destination in enumerate(destinations):
        client.write(Frame("SUBSCRIBE", {"destination": destination, "id": str(index), "ack": "auto",
                                         "activemq.prefetchSize": "1000", "receipt": f"s{index}"}))
    receipts = 0
    while receipts < len(destinations):
        if client.read().command == "RECEIPT":
            receipts += 1
    ready.set()  # type: ignore[attr-defined]
    received = 0
    while received < expected:
        received += sum(1 for frame in client.read_many() if frame.command == "MESSAGE")
    result.put(time.perf_counter())  # type: ignore[attr-defined]
    client.close()


def run(address: Address, frames: list[tuple[bytes, bytes]], count: int, subscribers: list[list[str]],
        per_connection: int) -> float:
    """Deliveries/s: one producer sending ``count`` frames, consumers subscribed as ``subscribers``
    (one connection per list) each expecting ``per_connection`` MESSAGEs."""
    context = mp.get_context("fork")
    result, go = context.Queue(), context.Event()
    consumers = []
    for destinations in subscribers:
        ready = context.Event()
        process = context.Process(target=_consume, args=(address, destinations, per_connection, ready, result),
                                  daemon=True)
        process.start()
        consumers.append((process, ready))
    producer = context.Process(target=_produce, args=(address, frames, count, go), daemon=True)
    try:
        for _, ready in consumers:
            if not ready.wait(60):
                raise RuntimeError("a consumer did not subscribe")
        producer.start()
        time.sleep(0.2)
        start = time.perf_counter()
        go.set()
        last = max(result.get(timeout=600) for _ in consumers)
    finally:
        for process in [producer, *(p for p, _ in consumers)]:
            process.join(10)
            if process.is_alive():
                process.kill()
    return per_connection * len(subscribers) / (last - start)


def _send(destination: str, **headers: str) -> tuple[bytes, bytes]:
    """A SEND of 100 bytes, plain and with a receipt."""
    fields = {"destination": destination, "persistent": "false", **headers}
    return (encode_frame(Frame("SEND", fields, b"x" * 100), "1.2"),
            encode_frame(Frame("SEND", {**fields, "receipt": "end"}, b"x" * 100), "1.2"))


def wildcard_fan_out(address: Address, count: int) -> float:
    root = f"fan{uuid.uuid4().hex[:6]}"
    frames = [_send(f"/topic/{root}.{k}.eu") for k in range(TOPICS)]
    patterns = [f"/topic/{root}.>" if index % 2 else f"/topic/{root}.*.eu" for index in range(SUBSCRIPTIONS)]
    per = SUBSCRIPTIONS // CONNECTIONS
    connections = [patterns[i * per:(i + 1) * per] for i in range(CONNECTIONS)]
    return run(address, frames, count, connections, per * count)


def message_groups(address: Address, count: int) -> float:
    queue = f"/queue/groups.{uuid.uuid4().hex[:8]}"
    frames = [_send(queue, JMSXGroupID=f"g{k}") for k in range(GROUPS)]
    return run(address, frames, count, [[queue]], count)


def virtual_topic(address: Address, count: int) -> float:
    name = f"VirtualTopic.bench{uuid.uuid4().hex[:6]}"
    frames = [_send(f"/topic/{name}")]
    groups = [[f"/queue/Consumer.{group}.{name}"] for group in ("A", "B")]
    # (ActiveMQ makes a consumer queue when its first consumer subscribes, as the gateway does)
    return run(address, frames, count, groups, count)


CASES: list[tuple[str, Callable[[Address, int], float], int]] = [
    ("wildcard fan-out, 1 → 100 subscriptions, 1,000 topics (deliveries/s)", wildcard_fan_out, 20),
    ("message groups, 1 → 1 queue, 1,000 groups", message_groups, 1),
    ("virtual topic, 1 → 2 consumer groups (deliveries/s)", virtual_topic, 2),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.bench_destinations", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=None, help="messages per 1→1 run (default 40000)")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=None,
                        help="run only the workloads whose title contains this (e.g. 'wildcard')")
    args = parser.parse_args(argv)
    count = args.count or (2000 if args.quick else 40_000)
    repeat = args.repeat or (1 if args.quick else 3)
    print(f"host: {host_state()}", flush=True)
    started = time.monotonic()
    with gateway_server() as gateway, activemq_server(kahadb=True, stomp_no_delay=True, full_jit=True) as broker:
        servers = {"gateway": gateway.address, "activemq": ("127.0.0.1", broker.stomp_port)}
        for name, address in servers.items():
            rates = warm_up(lambda address=address: run_pair(  # type: ignore[misc]
                address, Workload(f"/queue/warmup.{uuid.uuid4().hex}", count=min(count, 20_000))),
                max_rounds=2 if args.quick else 8)
            print(f"warm-up {name}: " + ", ".join(f"{rate:.0f}" for rate in rates) + " msg/s", flush=True)
        print(f"\nmedian of {repeat}, per second (ratio = gateway / ActiveMQ)")
        print(f"  {'workload':<52} {'gateway':>10} {'activemq':>10} {'ratio':>7}")
        for title, case, fan in [c for c in CASES if args.only is None or args.only in c[0]]:
            n = max(count // fan, 50)
            for address in servers.values():
                case(address, max(n // 4, 20))  # (one unmeasured round)
            results: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(repeat):
                for name, address in servers.items():
                    results[name].append(case(address, n))
            print_ratio(title, results["gateway"], results["activemq"])
    print(f"\n({time.monotonic() - started:.0f} s; host at the end: {host_state()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
