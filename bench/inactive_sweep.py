"""The inactive-queue sweep's cost (``[broker] inactive_queue_timeout``, gateway/broker/collection.py): how
long one reactor turn of a sweep holds the reactor, and a whole sweep, over N empty auto-created queues.

Builds an :class:`~gateway.broker.broker.EmbeddedBroker` on a :class:`twisted.internet.task.Clock` with N
empty queues (made as a SUBSCRIBE makes them), then times each slice of the sweeps that note them idle and
the one that collects them (the CPU time of each turn, ``time.process_time``).

Run: ``PYTHONPATH=. .venv/bin/python -m bench.inactive_sweep [--queues N] [--busy N]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from twisted.internet.task import Clock

from bench.common import host_state
from gateway.broker.broker import EmbeddedBroker
from gateway.broker.collection import SLICE, sweep_interval
from gateway.broker.settings import BrokerSettings
from gateway.message.model import TextMessage

TIMEOUT = 300


def measure(queues: int, busy: int) -> dict[str, Any]:
    """Slices' CPU ms while ``queues`` empty queues are noted then collected, and ``busy`` queues with a
    pending message each are looked at and kept."""
    clock = Clock()
    broker = EmbeddedBroker(clock, BrokerSettings(persistence="memory", max_destinations=0,
                                                  inactive_queue_timeout=TIMEOUT))
    broker.start()
    for index in range(queues):
        broker.destinations.create_queue(f"/queue/invented.{index}", None)
    for index in range(busy):
        broker.send(TextMessage(destination=f"/queue/busy.{index}", text="x"))
    turns: list[float] = []
    inactive = broker.inactive
    original = inactive._slice

    def timed(*args: Any) -> None:
        started = time.process_time()
        original(*args)
        turns.append((time.process_time() - started) * 1000)

    setattr(inactive, "_slice", timed)  # noqa: B010 (times each turn)
    interval = sweep_interval(TIMEOUT)
    sweeps = []
    while len(broker.queues) > busy:
        before = len(turns)
        clock.advance(interval)
        sweeps.append(turns[before:])
    broker.stop()
    noting = [turn for sweep in sweeps[:-1] for turn in sweep]
    collecting = sweeps[-1]
    return {"queues": queues, "busy": busy, "slice": SLICE, "sweeps": len(sweeps),
            "noting_turn_ms_median": round(statistics.median(noting), 2), "noting_turn_ms_max": round(max(noting), 2),
            "noting_sweep_ms": round(sum(sweeps[0]), 1),
            "collecting_turn_ms_median": round(statistics.median(collecting), 2),
            "collecting_turn_ms_max": round(max(collecting), 2), "collecting_sweep_ms": round(sum(collecting), 1),
            "turns_a_sweep": len(collecting)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.inactive_sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=50_000, help="empty auto-created queues")
    parser.add_argument("--busy", type=int, default=0, help="queues with a pending message (kept)")
    args = parser.parse_args()
    print(host_state())
    print(measure(args.queues, args.busy))


if __name__ == "__main__":
    main()
