"""Helpers for the black-box attacks on the bound of scheduled messages (``[broker] max_scheduled_size``,
``tests/integration/test_scheduled_bound_attacks*.py``).

Gateways with a 1MB bound, receipted scheduled SENDs pipelined on a raw socket, the gateway's own count of the
bytes waiting (read from its refusal of a probe larger than any bound: "the scheduled messages waiting take N
bytes") and the records ``schedule.sqlite`` holds, read beside the running gateway.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable

from tests.support.destination_attacks import collect, send_frame
from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import Client

Make = Callable[..., GatewayProcess]
BOUND = 1024 * 1024  # "1MB" as the gateway reads it (its ERROR names 1048576)
BODY = "x" * 100_000  # ten fit in 1MB as stored, the eleventh does not
SIZE_ARGS = ["--set", "broker.max_scheduled_size=1MB"]
MEMORY_ARGS = ["--set", "broker.persistence=memory"]
COUNTED = re.compile(r"take (\d+) bytes")


def start(make_gateway: Make, persistence: str = "sqlite", extra: str = "") -> GatewayProcess:
    return make_gateway(extra, args=SIZE_ARGS + (MEMORY_ARGS if persistence == "memory" else []))


def schedule(gateway: GatewayProcess, destination: str, count: int, *, delay: int, body: str = BODY,
             headers: dict[str, str] | None = None) -> tuple[int, str | None]:
    """``count`` receipted scheduled SENDs pipelined in one write on a new connection; how many got their
    RECEIPT before an ERROR, and the ERROR's text (None when every one was accepted)."""
    raw = RawStomp(gateway.address, timeout=30)
    raw.connect()
    extra = {"AMQ_SCHEDULED_DELAY": str(delay), **(headers or {})}
    raw.send(b"".join(send_frame(destination, body, {**extra, "receipt": f"r{index}"}) for index in range(count)))
    accepted = 0
    error: str | None = None
    while accepted < count:
        item = raw.item(30)
        if item is None:
            break
        assert not isinstance(item, Exception), item
        if item.command == "ERROR":
            assert item.headers.get("message") == "destination full", item
            error = item.body.decode()
            assert "max_scheduled_size" in error and "nothing was stored" in error, error
            break
        assert item.command == "RECEIPT", item
        accepted += 1
    raw.close()
    return accepted, error


def counted(gateway: GatewayProcess) -> int:
    """The bytes the gateway counts as waiting: the number its refusal of a SEND larger than any bound says."""
    accepted, error = schedule(gateway, "/queue/probe", 1, delay=600_000, body="p" * (4 * BOUND + 1))
    assert accepted == 0 and error is not None
    match = COUNTED.search(error)
    assert match, error
    return int(match.group(1))


def stored(gateway: GatewayProcess) -> tuple[int, int]:
    """Jobs and their bytes in ``schedule.sqlite`` (read-only, beside the running gateway)."""
    with sqlite3.connect(f"file:{gateway.data_dir / 'schedule.sqlite'}?mode=ro", uri=True) as db:
        jobs, size = db.execute("SELECT count(*), coalesce(sum(length(record)), 0) FROM scheduled").fetchone()
    return int(jobs), int(size)


def assert_count_matches_store(gateway: GatewayProcess, persistence: str = "sqlite", bound: int = BOUND) -> int:
    """The gateway's count is within the bound and, with SQLite, the bytes of the records on disk."""
    waiting = counted(gateway)
    assert waiting <= bound, waiting
    if persistence == "sqlite":
        jobs, size = stored(gateway)
        assert waiting == size, f"counted {waiting} bytes, {jobs} jobs take {size} in schedule.sqlite"
    return waiting


def take(gateway: GatewayProcess, destination: str, quiet: float = 1.5) -> list[bytes]:
    consumer = Client(gateway.address)
    consumer.subscribe(destination, "s")
    got = collect(consumer, quiet)
    consumer.disconnect()
    return got
