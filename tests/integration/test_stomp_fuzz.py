"""The project's STOMP fuzzer (tests/support/stomp_fuzz.py) over real sockets against a gateway
process: a few thousand generated frames from eight concurrent clients, with random write
splits; every answer is judged against the spec, no connection hangs and a bystander stomp.py
client is served before, during and after.  The 10^5-frame run is in process
(tests/unit/test_stomp_fuzz.py); bench/bench_fuzz.py runs for as long as asked."""

from __future__ import annotations

import random
import uuid
from concurrent.futures import ThreadPoolExecutor

from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import StompClients
from tests.support.stomp_fuzz import make_case, run_over_socket

CASES = 400


def test_fuzzed_clients_over_sockets(gateway: GatewayProcess, stomp: StompClients) -> None:
    bystander = stomp.connect("1.2")
    queue = f"/queue/bystander.{uuid.uuid4().hex}"
    bystander.subscribe(queue, "b")

    def play(index: int) -> list[str]:
        rng = random.Random(index)
        case = make_case(rng, f"/queue/fz-{uuid.uuid4().hex}", rng.randint(1, 12))
        problems = run_over_socket(gateway.address, case, rng)
        return [f"case {index} (STOMP {case.version}, pipelined={case.pipelined}): {p}\n  {case.stream!r}"
                for p in problems]

    with ThreadPoolExecutor(8) as pool:
        results = pool.map(play, range(CASES))
        bystander.send(queue, "during", receipt=True)
        problems = [problem for found in results for problem in found]
    assert not problems, "\n".join(problems[:5])
    bystander.send(queue, "after", receipt=True)
    assert [m.body for m in bystander.messages(2)] == [b"during", b"after"]
