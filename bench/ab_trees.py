"""Two versions of the gateway's code on the real server, alternately: rate and CPU per message.

Starts one gateway from each source tree (the version ``--base`` names, taken
out of git with ``git archive`` into a temporary directory, and this tree), warms
both, then runs the same workload against them in turns, ``--rounds`` times,
and prints each one's median rate and its gateway CPU time per message
(user + kernel, ``/proc``), with the load average.  Both gateways run all the
time, so load that comes and goes hits both; the CPU per message is the
steadier figure on a shared host.

With ``--compiled`` the two are this tree as it is (pure Python) and a copy of
it whose hot modules are compiled with mypyc (``setup.py build_ext --inplace``
with ``JMSGATEWAY_MYPYC=1``; docs/performance.md, "Compiled hot modules").
With ``--base REV --both-compiled`` both trees (the base and a copy of this
one) are compiled so: a change to the hot modules measured as installed.

Workloads: ``app`` (issue 39's client application shape, :mod:`bench.app_client`),
``app-1k``, ``pair`` (:func:`bench.stomp_load.run_pair`, 100 B, auto ack), ``1k`` and ``64k`` (the same
with 1 KB bodies, and with 64 KB bodies 8 SENDs a write: :mod:`bench.bench_throughput`'s large-body
workloads), ``persistent`` (the same with
persistent SENDs and a receipt every 100, :mod:`bench.bench_throughput`'s persistent workload; the SQLite
store with ``synchronous = FULL``), ``persistent-each`` (persistent SENDs with no consumer, each waiting for its
RECEIPT: one commit, one fsync a message, :mod:`bench.bench_persistence`'s "receipt per SEND"), ``receipt-each``
(the same client with non-persistent SENDs: a reactor turn a round trip without the store), ``topic``
(1 producer → 10 subscribers, :func:`bench.stomp_load.run_group`; ``--count`` deliveries, the rate and the
CPU per delivery) and ``4x4`` (4 producers → 4 queues → 4 consumers; ``--count`` messages over the four).

Each run's CPU is also split: the part spent in the kernel (system time) and the part spent on the reactor
thread (the process's main thread: user + system) are printed beside it.  With
``--strace`` each gateway does one more run under ``strace -c -f -p`` and its system calls a message are
printed (that run's CPU and rate are not counted: strace slows it).

Run: ``.venv/bin/python -m bench.ab_trees (--base REV [--both-compiled] | --compiled) [--workload W] [--count N]
[--rounds N] [--strace]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import tests.support.gateway as support
from bench.app_client import run_app
from bench.common import cpu_times, host_state
from bench.stomp_load import Workload, run_group, run_pair, send_rate
from tests.support.checkout import copy_checkout

HERE = Path(__file__).resolve().parents[1]
LARGE = {"1k": (1024, 200), "64k": (65536, 8)}
"""The large-body workloads: body size and SENDs a write (as :mod:`bench.bench_throughput`'s)."""


@contextlib.contextmanager
def gateway_from(tree: Path) -> Iterator[support.GatewayProcess]:
    """A gateway process running the code of ``tree``."""
    saved = support.REPO
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as workdir:
        support.REPO = tree  # (read when the process starts: its PYTHONPATH and its config)
        try:
            process = support.GatewayProcess(Path(workdir)).start()
        finally:
            support.REPO = saved
        try:
            yield process
        finally:
            process.stop()


def compiled_tree(target: Path) -> None:
    """A copy of this tree in ``target`` with its hot modules compiled in place (mypyc)."""
    copy_checkout(target, ("gateway", "tests", "twisted", "plugins", "etc", "bench", "setup.py", "setup.cfg",
                           "pyproject.toml"))
    compile_in_place(target)


def compile_in_place(target: Path) -> None:
    """Compile the hot modules of the tree in ``target`` where they are (mypyc)."""
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=target, check=True,
                   capture_output=True, env=dict(os.environ, JMSGATEWAY_MYPYC="1"))


def reactor_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid``'s main thread (the gateway's reactor; Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(process: support.GatewayProcess, workload: str, count: int) -> tuple[float, float, float, float]:
    """(messages/s, gateway CPU µs per message, of which in the kernel, of which on the reactor thread) of one
    run (a topic: deliveries)."""
    assert process.process is not None
    work = Workload(f"/queue/ab.{uuid.uuid4().hex}", count=count)
    user, kernel = cpu_times(process.process.pid)
    reactor = reactor_cpu(process.process.pid)
    if workload.startswith("app"):
        body = 1024 if workload == "app-1k" else 100
        rate = run_app(process.address, Workload(work.destination, count=count, body_size=body, batch=500,
                                                 prefetch=0)).rate
    elif workload == "topic":
        rate = run_group(process.address, Workload(f"/topic/ab.{uuid.uuid4().hex}", count=count // 10),
                         subscribers=10)[0]
    elif workload in LARGE:
        body, batch = LARGE[workload]
        rate = run_pair(process.address, Workload(work.destination, count=count, body_size=body, batch=batch))
    elif workload == "4x4":
        rate = run_group(process.address, Workload(work.destination, count=count // 4), destinations=4)[0]
    elif workload == "persistent":
        rate = run_pair(process.address, Workload(work.destination, count=count, persistent=True, receipt_every=100))
    elif workload == "persistent-each":
        rate = send_rate(process.address, Workload(work.destination, count=count, persistent=True, receipt_every=1))
    elif workload == "receipt-each":
        rate = send_rate(process.address, Workload(work.destination, count=count, receipt_every=1))
    else:
        rate = run_pair(process.address, work)
    user_after, kernel_after = cpu_times(process.process.pid)
    reactor_after = reactor_cpu(process.process.pid)
    return (rate, (user_after - user + kernel_after - kernel) / count * 1e6, (kernel_after - kernel) / count * 1e6,
            (reactor_after - reactor) / count * 1e6)


def system_calls(process: support.GatewayProcess, workload: str, count: int) -> dict[str, float]:
    """The gateway's system calls a message over one run, counted by ``strace -c -f -p`` (which slows
    the gateway: the counts, not the rate or CPU of that run, are what it is for)."""
    assert process.process is not None
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        tracer = subprocess.Popen(["strace", "-c", "-f", "-o", out.name, "-p", str(process.process.pid)],
                                  stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.0)  # (attached to every thread)
            one_run(process, workload, count)
        finally:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=30)
        return calls_per_message(out.read(), count)


def calls_per_message(summary: str, count: int) -> dict[str, float]:
    """Each system call's count in ``strace -c``'s ``summary``, divided by ``count`` messages."""
    calls: dict[str, float] = {}
    for line in summary.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            calls[fields[-1]] = int(fields[3]) / count
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.ab_trees", description=__doc__.split("\n\n")[0])
    choice = parser.add_mutually_exclusive_group(required=True)
    choice.add_argument("--base", help="the git revision to compare this tree with")
    choice.add_argument("--compiled", action="store_true", help="this tree against a mypyc-compiled copy of it")
    parser.add_argument("--workload", default="app",
                        choices=("app", "app-1k", "pair", "1k", "64k", "persistent", "persistent-each",
                                 "receipt-each", "topic", "4x4"))
    parser.add_argument("--both-compiled", action="store_true",
                        help="with --base: both trees with their hot modules compiled (mypyc)")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--strace", action="store_true",
                        help="after the rounds, one more run of each under strace -c: system calls a message")
    args = parser.parse_args(argv)
    print(f"host: {host_state()}", flush=True)
    if args.both_compiled and not args.base:
        parser.error("--both-compiled needs --base")
    with tempfile.TemporaryDirectory(prefix="bench-ab-base-") as base_dir, \
            tempfile.TemporaryDirectory(prefix="bench-ab-this-") as this_dir:
        if args.compiled:
            compiled_tree(Path(base_dir))
            trees = {"this tree, pure Python": HERE, "compiled (mypyc)": Path(base_dir)}
        else:
            archive = subprocess.run(["git", "archive", args.base], cwd=HERE, check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", base_dir], input=archive, check=True)
            trees = {f"base {args.base}": Path(base_dir), "this tree": HERE}
            if args.both_compiled:
                compile_in_place(Path(base_dir))
                compiled_tree(Path(this_dir))
                trees = {f"base {args.base}, compiled": Path(base_dir), "this tree, compiled": Path(this_dir)}
        with contextlib.ExitStack() as stack:
            processes = {name: stack.enter_context(gateway_from(tree)) for name, tree in trees.items()}
            for process in processes.values():
                for _ in range(2):
                    one_run(process, args.workload, min(args.count, 20_000))
            results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in processes}
            for _ in range(args.rounds):
                for name, process in processes.items():
                    results[name].append(one_run(process, args.workload, args.count))
            traced = {name: system_calls(process, args.workload, args.count)
                      for name, process in processes.items()} if args.strace else {}
    print(f"{args.workload}, {args.count} messages a run, {args.rounds} runs each, alternating")
    for name, runs in results.items():
        rates = [run[0] for run in runs]
        cpus = [run[1] for run in runs]
        kernel = [run[2] for run in runs]
        reactor = [run[3] for run in runs]
        print(f"  {name:<24} {statistics.median(rates):>9.0f} msg/s ({min(rates):.0f} to {max(rates):.0f})   "
              f"gateway CPU {statistics.median(cpus):5.2f} µs/msg ({min(cpus):.2f} to {max(cpus):.2f}), "
              f"kernel {statistics.median(kernel):4.2f}, reactor thread {statistics.median(reactor):5.2f}")
    for name, calls in traced.items():
        common = sorted(calls.items(), key=lambda item: -item[1])[:8]
        print(f"  {name:<24} system calls a message: " + ", ".join(f"{call} {each:.3f}" for call, each in common))
    print(f"host at the end: {host_state()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
