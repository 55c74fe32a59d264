"""Issue 35 benchmark: a standby takes over a shared store with a deep backlog.

An active gateway (SQLite store, ``memory_limit`` 32 MB) and a standby on the
same data directory; ``--count`` persistent 1 KB messages (receipt every
1000) are queued on the active one, which then gets SIGKILL.  Printed: the
seconds from the SIGKILL to the standby's STOMP listener accepting (aim ≤ 10 s
with 1,000,000 messages), the takeover the standby reports in ``/status``
(from obtaining the lock to listening, and the messages it recovered), the
time to the first message a consumer gets, and the queue depth it reports.

Run: ``.venv/bin/python -m bench.bench_takeover [--count N] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.bench_paging import BODY, first_message_ms
from bench.common import host_state
from bench.stomp_load import Workload, produce
from tests.support.standby import accepts, gateway_pair

DESTINATION = "/queue/deep"


def status(admin_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/status", timeout=60) as response:
        document: dict[str, Any] = json.loads(response.read())
    return document


def takeover(count: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-takeover-") as workdir:
        active, _, standby, standby_admin = gateway_pair(Path(workdir), ["--set", 'broker.memory_limit="32MB"'],
                                                         timeout=120)
        try:
            started = time.perf_counter()
            produce(active.address, Workload(DESTINATION, count=count, body_size=BODY, persistent=True,
                                             receipt_every=1000))
            sent = time.perf_counter() - started
            assert status(standby_admin)["role"] == "standby"
            assert active.process is not None
            active.process.kill()
            killed = time.perf_counter()
            active.process.wait(60)
            while not accepts(standby.port):
                if time.perf_counter() - killed > 600:
                    raise RuntimeError(f"no takeover within 600 s:\n{standby.log()[-3000:]}")
                time.sleep(0.02)
            listening = time.perf_counter() - killed
            first = first_message_ms(standby.address, DESTINATION)
            document = status(standby_admin)
        finally:
            active.kill()
            standby.stop(timeout=300)
    depth = document["connectors"].get("embedded", {}).get("queues", {}).get(DESTINATION, {}).get("pending")
    print(f"\ntakeover with {count} x 1 KB persistent messages queued (SQLite store, memory_limit 32 MB)")
    print(f"  sending them to the active gateway: {sent:.1f} s ({count / sent:.0f} msg/s, receipt every 1000)")
    print(f"  SIGKILL of the active gateway -> the standby's STOMP listener accepts: {listening:.2f} s (aim ≤ 10 s)")
    print(f"  the standby's /status: role {document['role']}, last takeover {document['last_takeover']}")
    print(f"  first message to a consumer after the takeover: {first:.0f} ms; queue depth in /status: {depth}",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.bench_takeover", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=None,
                        help="persistent 1 KB messages queued before the SIGKILL (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="10,000 messages (checks the code path)")
    args = parser.parse_args(argv)
    print(f"host: {host_state()}", flush=True)
    takeover(args.count or (10_000 if args.quick else 1_000_000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
