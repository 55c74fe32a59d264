"""Black-box attacks on the bound of scheduled messages over time: the room coming back as jobs are delivered,
dropped, refused at delivery or repeated, and the count after kill -9, a restart, a standby's takeover and SIGHUP.

The promise is that of ``test_scheduled_bound_attacks.py`` (docs/stomp.md's "scheduled delivery" row: the jobs
waiting take at most ``[broker] max_scheduled_size`` bytes as stored; room comes back as jobs finish; SIGHUP
applies a new size; a restart counts what waits), the helpers ``tests/support/scheduled_bound.py``; a second file
so that ``--dist loadfile`` runs both halves side by side.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from tests.support.destination_attacks import collect, send_frame
from tests.support.raw_stomp import RawStomp
from tests.support.scheduled_bound import (
    BODY,
    BOUND,
    SIZE_ARGS,
    Make,
    assert_count_matches_store,
    counted,
    schedule,
    start,
    stored,
    take,
)
from tests.support.standby import accepts, gateway_pair
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until


def test_a_refused_send_fits_once_jobs_are_delivered_and_the_room_comes_back_exactly(make_gateway: Make) -> None:
    """Fill with jobs due in 1 s; the eleventh is refused; once the ten are delivered the count is 0, the
    retried SEND fits, and the bound holds ten again, not more, not fewer, two rounds over."""
    gateway = start(make_gateway)
    for _ in range(2):
        accepted, error = schedule(gateway, "/queue/sb.again", 11, delay=1000)
        assert accepted == 10 and error is not None, (accepted, error)
        time.sleep(1.0)
        assert len(take(gateway, "/queue/sb.again", quiet=1.0)) == 10
        assert assert_count_matches_store(gateway) == 0


def test_kill_9_and_a_restart_count_what_waits(make_gateway: Make) -> None:
    """Ten jobs a minute ahead, kill -9, restart: the same count as before, the next scheduled SEND is
    refused, a plain SEND still goes."""
    gateway = start(make_gateway)
    assert schedule(gateway, "/queue/sb.kill", 10, delay=60_000)[0] == 10
    before = assert_count_matches_store(gateway)
    gateway.kill()
    gateway.start()
    assert assert_count_matches_store(gateway) == before
    assert schedule(gateway, "/queue/sb.kill", 1, delay=60_000)[0] == 0
    client = Client(gateway.address)
    client.subscribe("/queue/sb.plain", "p")
    client.send("/queue/sb.plain", "plain", receipt=True)
    assert client.message().body == b"plain"
    client.disconnect()


@pytest.mark.parametrize("persistence", ["sqlite", "memory"])
def test_dropped_and_retried_jobs_give_their_room_back(make_gateway: Make, persistence: str) -> None:
    """Jobs to a temporary queue whose owner left (dropped) and jobs refused at delivery by a full FAIL queue
    (retried each second, then delivered once room is made): afterwards nothing is counted."""
    gateway = start(make_gateway, persistence, """
[broker.destinations."/queue/sb.full"]
max_size = "4KB"
full_policy = "FAIL"
""")
    owner = Client(gateway.address)
    owner.subscribe("/temp-queue/mine", "t")
    for _ in range(3):
        owner.send("/temp-queue/mine", BODY, receipt=True, headers={"AMQ_SCHEDULED_DELAY": "500"})
    owner.send("/queue/sb.full", "f" * 3500, receipt=True, headers={"persistent": "true"})
    for _ in range(4):
        owner.send("/queue/sb.full", BODY[:2000], receipt=True, headers={"AMQ_SCHEDULED_DELAY": "300"})
    owner.disconnect()
    gateway.wait_for_log("dropped")
    gateway.wait_for_log("refused for now")
    assert counted(gateway) > 0
    got = take(gateway, "/queue/sb.full", quiet=3.0)
    assert len(got) == 5, len(got)
    assert assert_count_matches_store(gateway, persistence) == 0
    assert schedule(gateway, "/queue/sb.after", 11, delay=600_000)[0] == 10


def test_sighup_lowering_drops_nothing_and_raising_makes_room(make_gateway: Make) -> None:
    """Ten jobs at 1MB; SIGHUP to 300KB: nothing dropped (the ten come), the next scheduled SEND refused;
    SIGHUP to 3MB: more fit, up to 3MB and no further."""
    gateway = make_gateway()
    text = gateway.config_path.read_text()

    def resize(size: str) -> None:
        gateway.config_path.write_text(re.sub(r"(?m)^max_scheduled_size = .*\n", "", gateway.config_path.read_text())
                                       .replace("[broker]\n", f'[broker]\nmax_scheduled_size = "{size}"\n', 1))

    resize("1MB")
    gateway.stop()
    gateway.start()
    assert text != gateway.config_path.read_text()
    assert schedule(gateway, "/queue/sb.hup", 11, delay=4000)[0] == 10
    resize("300KB")
    assert gateway.process is not None
    gateway.process.send_signal(signal.SIGHUP)
    gateway.wait_for_log("SIGHUP")
    time.sleep(0.5)
    accepted, error = schedule(gateway, "/queue/sb.hup", 1, delay=600_000, body="s")
    assert accepted == 0 and error is not None and "307200" in error, error
    resize("3MB")
    gateway.process.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    accepted, error = schedule(gateway, "/queue/sb.hup2", 25, delay=600_000)
    assert accepted == 21 and error is not None and str(3 * BOUND) in error, (accepted, error)
    assert assert_count_matches_store(gateway, bound=3 * BOUND) > 3 * BOUND - 100_200
    time.sleep(2.0)
    assert len(take(gateway, "/queue/sb.hup")) == 10


def test_repeating_jobs_keep_the_count_exact_while_they_run(make_gateway: Make) -> None:
    """Five 100 KB jobs repeated 15 times every 100 ms: sampled while they run, the count is what the store
    holds; after the 80 deliveries it is 0 and ten fit again."""
    gateway = start(make_gateway)
    accepted, _ = schedule(gateway, "/queue/sb.run", 5, delay=200,
                           headers={"AMQ_SCHEDULED_REPEAT": "15", "AMQ_SCHEDULED_PERIOD": "100"})
    assert accepted == 5
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sb.run", "s")
    for _ in range(3):
        time.sleep(0.3)
        assert counted(gateway) <= BOUND
    assert len(collect(consumer, 2.0)) == 80
    consumer.disconnect()
    assert assert_count_matches_store(gateway) == 0
    assert schedule(gateway, "/queue/sb.run2", 11, delay=600_000)[0] == 10


def test_kill_9_in_the_middle_of_a_pipelined_flood_counts_what_was_stored(make_gateway: Make) -> None:
    """Thirty 100 KB scheduled SENDs in one write, kill -9 at the third RECEIPT; after the restart the count
    is what schedule.sqlite holds (at most ten jobs), and the rest of the bound fits, no more."""
    gateway = start(make_gateway)
    raw = RawStomp(gateway.address, timeout=30)
    raw.connect()
    raw.send(b"".join(send_frame("/queue/sb.mid", BODY, {"AMQ_SCHEDULED_DELAY": "600000", "receipt": f"r{index}"})
                      for index in range(30)))
    for _ in range(3):
        assert raw.frame(30).command == "RECEIPT"
    gateway.kill()
    raw.close()
    gateway.start()
    jobs, _ = stored(gateway)
    assert 3 <= jobs <= 10, jobs
    assert_count_matches_store(gateway)
    assert schedule(gateway, "/queue/sb.mid2", 11, delay=600_000)[0] == 10 - jobs


def test_a_standby_that_takes_over_counts_what_waits(tmp_path: Path) -> None:
    """Ten jobs a minute ahead on the active gateway, kill -9; the standby takes over: the same count, it
    matches the shared schedule.sqlite, the next scheduled SEND is refused."""
    active, _, standby, _ = gateway_pair(tmp_path, args=SIZE_ARGS)
    try:
        assert schedule(active, "/queue/sb.ha", 10, delay=60_000)[0] == 10
        before = assert_count_matches_store(active)
        active.kill()
        wait_until(lambda: accepts(standby.port), 60, "the standby's STOMP listener")
        assert assert_count_matches_store(standby) == before
        assert schedule(standby, "/queue/sb.ha", 1, delay=60_000)[0] == 0
    finally:
        standby.kill()
        active.kill()

