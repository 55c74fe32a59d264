"""Scheduled persistent messages across a takeover (issue 37 #6 on issue 35's standby).

A raw-socket client pipelines persistent SENDs with ``AMQ_SCHEDULED_DELAY`` (one of them repeating:
``AMQ_SCHEDULED_PERIOD`` / ``AMQ_SCHEDULED_REPEAT``), each asking for a receipt, to the active
gateway of a pair on one data directory; the active gateway gets SIGKILL as soon as half of the
RECEIPTs are in.  The standby takes over before anything is due, and must then deliver every
receipted job on time (± 1 s of its due time), each once (the repeating one its three times), and
nothing early; a SEND whose RECEIPT had not come may be delivered or not, but at most once.
"""

from __future__ import annotations

import collections
import queue
import time
from pathlib import Path

from tests.support.raw_stomp import RawStomp
from tests.support.standby import accepts, gateway_pair
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

QUEUE = "/queue/ha.scheduled"
PIPELINED = 200
DUE_MS = 15_000
"""The first job's delay: long enough for the kill and the standby's takeover on a loaded host."""
SPREAD_MS = 10
"""Each next job is due this much later (200 jobs over 2 s)."""
TOLERANCE = 1.0
"""Seconds an arrival may be off its due time (docs/stomp.md)."""
REPEATS = 3
"""Deliveries of the repeating job: the first and AMQ_SCHEDULED_REPEAT = 2 more."""
PERIOD_MS = 1000


def due_at(body: str) -> list[float]:
    """Seconds after the pipeline's start at which ``body`` is due (each delivery of a repeating job)."""
    if body == "repeating":
        return [(DUE_MS + n * PERIOD_MS) / 1000 for n in range(REPEATS)]
    return [(DUE_MS + int(body[1:]) * SPREAD_MS) / 1000]


def pipeline() -> bytes:
    """The repeating job first, then ``PIPELINED`` one-shot jobs, each persistent and receipted (its body)."""
    frames = [f"SEND\ndestination:{QUEUE}\npersistent:true\nreceipt:repeating\nAMQ_SCHEDULED_DELAY:{DUE_MS}\n"
              f"AMQ_SCHEDULED_PERIOD:{PERIOD_MS}\nAMQ_SCHEDULED_REPEAT:{REPEATS - 1}\n\nrepeating\x00"]
    frames += [f"SEND\ndestination:{QUEUE}\npersistent:true\nreceipt:j{n}\n"
               f"AMQ_SCHEDULED_DELAY:{DUE_MS + n * SPREAD_MS}\n\nj{n}\x00" for n in range(PIPELINED)]
    return "".join(frames).encode()


def test_receipted_scheduled_jobs_come_from_the_standby_on_time_and_once(tmp_path: Path) -> None:
    active, _, standby, _ = gateway_pair(tmp_path)
    try:
        producer = RawStomp(active.address)
        producer.connect()
        start = time.monotonic()
        producer.send(pipeline())
        receipted: set[str] = set()
        while len(receipted) < PIPELINED // 2:
            frame = producer.frame(timeout=30)
            assert frame.command == "RECEIPT", frame
            receipted.add(frame.headers["receipt-id"])
        assert active.process is not None
        active.process.kill()  # with half the pipeline's RECEIPTs in, the rest under way
        active.process.wait(15)
        producer.close()
        wait_until(lambda: accepts(standby.port), 60, "the standby's STOMP listener")
        took_over = time.monotonic() - start
        assert took_over < DUE_MS / 1000 - TOLERANCE, f"the takeover took {took_over:.1f} s, past the first due time"

        consumer = Client(standby.address)
        consumer.subscribe(QUEUE, "s")
        arrivals: dict[str, list[float]] = collections.defaultdict(list)
        deadline = start + DUE_MS / 1000 + PIPELINED * SPREAD_MS / 1000 + REPEATS * PERIOD_MS / 1000 + 10

        last_due = max(due_at(f"j{PIPELINED - 1}") + due_at("repeating"))

        def complete() -> bool:
            # (past the last due time too: a job stored whose RECEIPT had not come may still come, once; the
            # jobs a pipeline's scheduled SENDs make are written together, so there may be many of them)
            return receipted <= set(arrivals) and len(arrivals["repeating"]) >= REPEATS \
                and time.monotonic() - start > last_due + TOLERANCE

        while not complete() and time.monotonic() < deadline:
            try:
                frame = consumer.listener.messages.get(timeout=0.2)
            except queue.Empty:
                continue
            body = frame.body.decode() if isinstance(frame.body, bytes) else str(frame.body)
            arrivals[body].append(time.monotonic() - start)
        quiet = consumer.no_message(1.5)  # (and nothing more: no job twice)
        consumer.disconnect()

        lost = sorted(receipted - set(arrivals))
        assert not lost, f"{len(lost)} receipted scheduled jobs never came from the standby: {lost[:10]}"
        twice = {body: len(times) for body, times in arrivals.items() if len(times) != len(due_at(body))}
        assert not twice, f"jobs delivered a wrong number of times: {twice}"
        assert quiet, "a delivery came after every job had come"
        off = {body: ([round(t, 2) for t in times], due_at(body)) for body, times in arrivals.items()
               if any(abs(t - due) > TOLERANCE for t, due in zip(times, due_at(body), strict=True))}
        assert not off, f"arrivals off their due time by more than {TOLERANCE} s (seconds, due): {off}"
    finally:
        standby.kill()
        active.kill()

