"""Issue 5 benchmark: gateway throughput with an empty transformer chain and
with a chain of three trivial transformers, in the same run.

The workload is the throughput benchmark's (one producer, one consumer,
100-byte bodies, auto ack, non-persistent).  The overhead ratio is
(empty - three) / empty.  Run: ``.venv/bin/python -m bench.bench_transform [COUNT]``
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from bench.common import gateway_server, report
from bench.stomp_load import Workload, run_pair

PLUGINS = Path(__file__).resolve().parent / "plugins"

CHAIN = f"""
[transform]
plugin_dirs = ["{PLUGINS}"]
load_entry_points = false
""" + "".join(
    f"""
[[transform.chain]]
transformer = "noop-{index}"
destinations = ["/queue/{prefix}.*"]
direction = "{direction}"
"""
    for prefix, direction in (("chain", "inbound"), ("both", "both"))
    for index in (1, 2, 3)
)


def measure(address: tuple[str, int], prefix: str, count: int) -> float:
    run_pair(address, Workload(f"/queue/{prefix}.warm{uuid.uuid4().hex}", count=min(count, 5000)))
    return max(run_pair(address, Workload(f"/queue/{prefix}.{uuid.uuid4().hex}", count=count)) for _ in range(3))


def main(count: int = 30_000) -> None:
    with gateway_server(CHAIN) as gateway:
        # Interleave the two cases so machine noise hits both alike.
        empty = measure(gateway.address, "plain", count)
        three = measure(gateway.address, "chain", count)
        both = measure(gateway.address, "both", count)
        empty = max(empty, measure(gateway.address, "plain", count))
        three = max(three, measure(gateway.address, "chain", count))
    report(f"Transformer chain cost, {count} x 100 B, auto ack", [
        ("empty chain", empty),
        ("chain of three pass-through transformers (inbound)", three),
        ("three inbound + three outbound", both),
    ], "empty chain")
    print(f"  inbound chain of three: overhead {(empty - three) / empty * 100:.1f}% (aim: under 10%)")
    print(f"  three in + three out:   overhead {(empty - both) / empty * 100:.1f}%")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30_000)
