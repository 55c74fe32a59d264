"""A ONCE_AND_ONLY_ONCE bridge across takeovers: an active gateway and a standby on one data directory,
a ``[[bridges]]`` entry between two embedded queues, the active gateway SIGKILLed while a producer sends
and the bridge moves, the standby takes over (bridges start only then), the killed one comes back as
the standby and the new active gateway is SIGKILLed while its bridge works off the backlog.  Counted
at the target by the producer's ``seq``: nothing receipted lost, nothing arrived twice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.test_admin import http
from tests.integration.test_bridge_gateway import Producer, Tally, bridge_toml, drain
from tests.support.standby import accepts, gateway_pair, launch, role
from tests.support.waiting import wait_until


@pytest.mark.parametrize("batch", [1, 20])
def test_once_and_only_once_bridge_neither_loses_nor_duplicates_across_takeovers(tmp_path: Path,
                                                                                 batch: int) -> None:
    config = bridge_toml("ha", "/queue/hsrc", "/queue/hdst", qos="ONCE_AND_ONLY_ONCE", max_batch_size=batch,
                         max_batch_time=20, failure_retry_interval=200)
    first, first_admin, second, standby_admin = gateway_pair(tmp_path, extra_config=config)
    tally = Tally()
    try:
        wait_until(lambda: [b["state"] for b in http(first_admin, "GET", "/status")[1]["bridges"]] == ["running"],
                   30, "the active gateway's bridge running")
        assert [b["state"] for b in http(standby_admin, "GET", "/status")[1]["bridges"]] == ["stopped"]
        producer = Producer(first, "/queue/hsrc", tally, "p1", limit=600)
        producer.start()
        wait_until(lambda: producer.count() >= 300, 60, "300 receipted sends")
        first.kill()  # mid-stream: the producer sends, the bridge moves
        producer.halt.set()
        producer.join(10)
        wait_until(lambda: accepts(second.port), 60, "the standby's takeover")
        launch(first)  # back as the standby
        wait_until(lambda: role(first_admin) == "standby", 60, "a standby again")
        Producer(second, "/queue/hsrc", tally, "p2", limit=300).run()  # a backlog for the bridge
        time.sleep(0.05)
        second.kill()  # while the bridge works off the backlog
        wait_until(lambda: accepts(first.port), 60, "the second takeover")
        drain(first, "/queue/hdst", tally, tally.receipted)
    except BaseException:
        print(first.log()[-3000:], second.log()[-3000:])
        raise
    finally:
        first.kill()
        second.kill()
    print(f"ONCE_AND_ONLY_ONCE batch {batch} across two takeovers: {tally.summary()}")
    assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
    assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"
