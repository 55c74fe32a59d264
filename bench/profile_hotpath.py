"""Where a message's time goes in the gateway: a sampling profile of the 1 → 1 workload.

Starts a gateway, runs one producer and one consumer (100-byte bodies,
non-persistent, auto ack) against it while py-spy samples the gateway
process, then attributes every sample to a layer by the innermost gateway
or Twisted frame on its stack (see :data:`LAYERS`) and prints each layer's
share and its cost in CPU-µs per message (the gateway's CPU time over the
run, from ``/proc``, divided by the messages, split by the shares).  Samples
pause the process (py-spy's default): without pausing (``--nonblocking``)
py-spy often misses the decoder's generator frame and the shares wander from
run to run.  A paused process is rarely caught inside ``send()``, so the
kernel's share of the write path shows in the user/kernel CPU split printed
beside the profile rather than in the layers.  py-spy is a development tool, not a dependency:
``pip install py-spy``.

Run: ``.venv/bin/python -m bench.profile_hotpath [--count N] [--rate HZ] [--ack MODE] [--cprofile]``

``--ack client`` or ``--ack client-individual`` profiles the consumer acknowledging every
MESSAGE (as :mod:`bench.bench_throughput`'s client-ack workloads do).

``--app`` profiles issue 39's client application shape instead (:mod:`bench.app_client`: one client
process with a producer and a consumer thread, SENDs with ``content-type`` and ``content-length``, 500
a write, no prefetch header).

``--cprofile`` instead runs the gateway under twistd's own cProfile
(``--profiler=cprofile``) and prints the top functions by own time; its
per-call overhead inflates small functions, so the shares differ.
"""

from __future__ import annotations

import argparse
import collections
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from bench.app_client import run_app
from bench.common import cpu_times, gateway_server, host_state
from bench.stomp_load import Workload, run_pair

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # (layer, markers in a frame "function (file:line)"); the innermost frame that matches decides.
    ("codec decode", ("FrameDecoder.", "unescape_header (", "_unescape_known (")),
    ("MESSAGE encode", ("gateway/wire/codec.py", "gateway/stomp/delivery.py")),  # encode_frame, MessageEncoder
    ("message conversion", ("gateway/message/",)),
    ("broker dispatch", ("gateway/broker/", "gateway/connectors/", "gateway/destinations")),
    ("session", ("gateway/stomp/session.py", "gateway/stomp/sending.py", "gateway/stomp/ack_ledger.py",
                 "gateway/stomp/subscriptions.py", "gateway/stomp/transactions.py", "gateway/stomp/heartbeats.py",
                 "gateway/stomp/temporaries.py", "gateway/stomp/transforms.py", "gateway/stomp/traffic.py",
                 "gateway/flow", "gateway/authorization", "gateway/pipeline")),
    ("protocol glue", ("gateway/stomp/protocol.py",)),
    ("write path (transport.write, send)", ("writeSomeData", "doWrite", "abstract.py:write",
                                            "(twisted/internet/abstract.py", "_postLoseConnection")),
    ("read path (recv, doRead)", ("doRead", "_dataReceived")),
    ("reactor (epoll, timers)", ("twisted/internet/",)),
    ("prometheus metrics", ("prometheus_client/",)),
]


IDLE_LEAVES = ("Condition.wait (threading.py", "wait (threading.py")
"""Leaf frames of a thread that waits (the reactor's idle thread pool), left out of the shares."""


def layer_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        for layer, markers in LAYERS:
            if any(marker in frame for marker in markers):
                return layer
    return "other"


def attribute(raw: Path) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Samples per layer and per leaf function, from py-spy's raw (collapsed) output."""
    layers: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack_text, _, count = line.rpartition(" ")
        if not stack_text:
            continue
        stack = stack_text.split(";")
        if stack[-1].startswith(IDLE_LEAVES):  # a thread-pool thread waiting for work (py-spy counts it)
            continue
        layers[layer_of(stack)] += int(count)
        leaves[stack[-1]] += int(count)
    return layers, leaves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.profile_hotpath", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000, help="messages in the profiled run")
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--ack", choices=("auto", "client", "client-individual"), default="auto",
                        help="the consumer's ack mode (client modes: an ACK per MESSAGE)")
    parser.add_argument("--cprofile", action="store_true", help="twistd's cProfile instead of py-spy")
    parser.add_argument("--body-size", type=int, default=100, help="bytes per body (bench_throughput: 1024, 65536)")
    parser.add_argument("--batch", type=int, default=200, help="SENDs per write (bench_throughput: 8 for 64 KB)")
    parser.add_argument("--app", action="store_true",
                        help="the client application's shape (bench.app_client): 500 SENDs a write, two threads")
    args = parser.parse_args(argv)
    if args.app:
        args.batch = 500
    print(f"host: {host_state()}", flush=True)
    if args.cprofile:
        return cprofile(args.count, args.ack)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as workdir, gateway_server() as gateway:
        assert gateway.process is not None
        pid = gateway.process.pid
        shape = {"body_size": args.body_size, "batch": args.batch}
        run_pair(gateway.address, Workload(f"/queue/warm.{uuid.uuid4().hex}", count=min(20_000, args.count), **shape))
        raw = Path(workdir) / "gateway.raw"
        sampler = subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", str(args.rate),
                                    "--format", "raw", "--output", str(raw)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # py-spy attaches
        user_before, system_before = cpu_times(pid)
        work = Workload(f"/queue/profile.{uuid.uuid4().hex}", count=args.count, ack=args.ack, **shape)
        rate = run_app(gateway.address, replace(work, prefetch=0)).rate if args.app else run_pair(gateway.address, work)
        user_after, system_after = cpu_times(pid)
        user, system = user_after - user_before, system_after - system_before
        used = user + system
        time.sleep(0.3)
        sampler.send_signal(2)  # SIGINT: py-spy writes its output and ends
        sampler.wait(30)
        layers, leaves = attribute(raw)
    total = sum(layers.values())
    per_message = used / args.count * 1e6
    shape_name = "app client (1 process, 2 threads), " if args.app else ""
    print(f"\n{shape_name}1 → 1 queue, {args.ack} ack, {args.body_size} B, {args.batch} SENDs a write, "
          f"{args.count} messages: "
          f"{rate:.0f} msg/s end to end; gateway CPU "
          f"{used:.2f} s = {per_message:.1f} µs per message (user {user / args.count * 1e6:.1f}, kernel "
          f"{system / args.count * 1e6:.1f}: mostly send/recv/epoll); {total} samples (idle excluded)")
    print(f"  {'layer (innermost frame decides)':<40} {'share':>7} {'µs/msg':>8}")
    for layer, samples in layers.most_common():
        print(f"  {layer:<40} {samples / total:>7.1%} {samples / total * per_message:>8.2f}")
    print("\n  leaf functions with the most samples:")
    for leaf, samples in leaves.most_common(15):
        print(f"  {samples / total:>6.1%}  {leaf}")
    print(f"\nhost at the end: {host_state()}")
    return 0


def cprofile(count: int, ack: str = "auto") -> int:
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as workdir:
        stats = Path(workdir) / "gateway.pstats"
        args = [f"--profile={stats}", "--profiler=cprofile", "--savestats"]
        with gateway_server() as gateway:
            gateway.stop()  # restarted with twistd's own options before the plugin name
            command = gateway.command
            gateway.command = lambda: [command()[0], *args, *command()[1:]]  # type: ignore[method-assign]
            gateway.start()
            run_pair(gateway.address, Workload(f"/queue/warm.{uuid.uuid4().hex}", count=5_000))
            rate = run_pair(gateway.address, Workload(f"/queue/profile.{uuid.uuid4().hex}", count=count, ack=ack))
        print(f"\n1 → 1 queue, {ack} ack, 100 B, {count} messages under cProfile: {rate:.0f} msg/s")
        pstats.Stats(str(stats)).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
