"""Long-run STOMP fuzzing of a gateway process with the project's own fuzzer.

The generator and the oracle are tests/support/stomp_fuzz.py (mutated valid frames, malformed
ones, CONNECT pipelined or awaited, random write splits; each answer judged against a plain
reading of the spec).  Concurrent clients play cases against one gateway on the default
configuration until ``--frames`` frames (or ``--minutes``) have gone; a stomp.py bystander must
be served every ``--check-every`` cases, and the gateway must still run at the end.  It prints
the frames per second (meaningful only on an idle machine) and every problem found, and exits 1
if there was one.  The test suite runs the same generator over 10^5 frames in process
(tests/unit/test_stomp_fuzz.py) and over sockets (tests/integration/test_stomp_fuzz.py).

Run: ``.venv/bin/python -m bench.bench_fuzz [--frames 1000000] [--minutes 30] [--clients 8] [--seed N]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from bench.common import gateway_server
from tests.support.stomp_clients import StompClients
from tests.support.stomp_fuzz import make_case, run_over_socket


def play(address: tuple[str, int], seed: int, index: int) -> tuple[int, list[str]]:
    rng = random.Random(seed * 1_000_003 + index)
    case = make_case(rng, f"/queue/fz-{uuid.uuid4().hex}", rng.randint(1, 12))
    problems = run_over_socket(address, case, rng)
    described = [f"case {index} (seed {seed}, STOMP {case.version}, pipelined={case.pipelined}): {p}\n"
                 f"  stream: {case.stream!r}" for p in problems]
    return case.frames + 2, described


def main(frames: int = 200_000, minutes: float = 0.0, clients: int = 8, seed: int = 1,
         check_every: int = 2_000) -> int:
    problems: list[str] = []
    sent = cases = 0
    started = time.monotonic()
    deadline = started + minutes * 60 if minutes else float("inf")
    with gateway_server() as gateway:
        bystanders = StompClients(gateway.address)
        bystander = bystanders.connect("1.2")
        queue = f"/queue/bystander.{uuid.uuid4().hex}"
        bystander.subscribe(queue, "b")
        with ThreadPoolExecutor(clients) as pool:
            while (sent < frames or minutes) and time.monotonic() < deadline:
                batch = list(pool.map(lambda index: play(gateway.address, seed, index),
                                      range(cases, cases + check_every)))
                cases += len(batch)
                for count, found in batch:
                    sent += count
                    problems.extend(found)
                bystander.send(queue, f"after {cases}", receipt=True)
                assert bystander.message().body == f"after {cases}".encode(), "the bystander was not served"
                elapsed = time.monotonic() - started
                print(f"{cases:>9,} cases {sent:>11,} frames {sent / elapsed:>9,.0f} frames/s "
                      f"{len(problems)} problems", flush=True)
        bystanders.close()
        running = gateway.process is not None and gateway.process.poll() is None
    for problem in problems[:20]:
        print(problem)
    if not running:
        print("the gateway process ended during the run")
    return 1 if problems or not running else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=200_000, help="frames to send (default 200,000)")
    parser.add_argument("--minutes", type=float, default=0.0, help="run this long instead (0: until --frames)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent fuzzing clients")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--check-every", type=int, default=2_000, help="cases between bystander checks")
    options = parser.parse_args()
    sys.exit(main(options.frames, options.minutes, options.clients, options.seed, options.check_every))
