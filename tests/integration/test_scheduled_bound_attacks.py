"""Black-box attacks on the bound of scheduled messages (``[broker] max_scheduled_size``).

The promise (docs/stomp.md's "scheduled delivery" row, docs/configuration.md, docs/operations.md's SIGHUP
table, the CHANGELOG): the jobs waiting take at most ``max_scheduled_size`` bytes as stored; past it a
scheduled SEND gets ERROR "destination full" naming the setting and nothing is stored; a COMMIT whose
scheduled SENDs do not fit applies nothing; room comes back as jobs finish; SIGHUP applies a new size; a
restart counts what waits.  Real gateway processes, raw sockets that pipeline many SENDs in one write, stomp.py
consumers.  The gateway's own count is read from the refusal of a probe larger than any bound ("the scheduled
messages waiting take N bytes"), and with SQLite compared with the records in ``schedule.sqlite``.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.destination_attacks import collect, frame, send_frame
from tests.support.raw_stomp import RawStomp
from tests.support.scheduled_bound import (
    BODY,
    BOUND,
    Make,
    assert_count_matches_store,
    counted,
    schedule,
    start,
    stored,
    take,
)
from tests.support.stomp_clients import Client


@pytest.mark.parametrize("persistence", ["sqlite", "memory"])
def test_pipelined_sends_stop_at_the_bound_and_the_refused_store_nothing(make_gateway: Make,
                                                                        persistence: str) -> None:
    """Fifteen 100 KB scheduled SENDs in one write: ten RECEIPTs, then ERROR (the connection closes); the
    count is what is stored; exactly the ten come when due; the count is back to 0 afterwards."""
    gateway = start(make_gateway, persistence)
    accepted, error = schedule(gateway, "/queue/sb.pipe", 15, delay=2500)
    assert accepted == 10 and error is not None, (accepted, error)
    assert_count_matches_store(gateway, persistence)
    time.sleep(2.0)
    assert len(take(gateway, "/queue/sb.pipe")) == 10
    assert counted(gateway) == 0


def test_a_huge_repeat_counts_once_and_a_tiny_period_gives_its_room_back(make_gateway: Make) -> None:
    """A job repeated 2,147,483,647 times (period 1000 s) takes one body's room: nine more fit beside it.
    A 10 KB job repeated 40 times every 10 ms: 41 deliveries, then nothing is counted for it."""
    gateway = start(make_gateway)
    accepted, _ = schedule(gateway, "/queue/sb.rep", 1, delay=600_000,
                           headers={"AMQ_SCHEDULED_REPEAT": "2147483647", "AMQ_SCHEDULED_PERIOD": "1000000"})
    assert accepted == 1
    one = assert_count_matches_store(gateway)
    assert 100_000 <= one < 110_000, one
    accepted, error = schedule(gateway, "/queue/sb.rep", 12, delay=600_000)
    assert accepted == 9 and error is not None, (accepted, error)
    gateway2 = start(make_gateway)
    accepted, _ = schedule(gateway2, "/queue/sb.tiny", 1, delay=100, body="t" * 10_000,
                           headers={"AMQ_SCHEDULED_REPEAT": "40", "AMQ_SCHEDULED_PERIOD": "10"})
    assert accepted == 1
    assert len(take(gateway2, "/queue/sb.tiny", quiet=2.0)) == 41
    assert assert_count_matches_store(gateway2) == 0


def test_composite_scheduled_sends_stay_within_the_bound(make_gateway: Make) -> None:
    """300 KB scheduled to three queues at once, pipelined: whatever is accepted, the count stays within the
    bound and matches the store, every part gets each accepted job, and the room comes back."""
    gateway = start(make_gateway)
    accepted, error = schedule(gateway, "/queue/sb.ca,/queue/sb.cb,/queue/sb.cc", 6, delay=2500, body="c" * 300_000)
    assert 1 <= accepted < 6 and error is not None, (accepted, error)
    assert_count_matches_store(gateway)
    time.sleep(2.0)
    for part in ("/queue/sb.ca", "/queue/sb.cb", "/queue/sb.cc"):
        assert len(take(gateway, part, quiet=1.0)) == accepted, part
    assert counted(gateway) == 0


@pytest.mark.parametrize("persistence", ["sqlite", "memory"])
def test_a_commit_that_does_not_fit_applies_nothing(make_gateway: Make, persistence: str) -> None:
    """BEGIN, a plain SEND, fifteen 100 KB scheduled SENDs, COMMIT in one write: ERROR, nothing of the
    transaction arrives (not the plain SEND either), nothing is counted; then a transaction of five fits."""
    gateway = start(make_gateway, persistence)
    raw = RawStomp(gateway.address, timeout=30)
    raw.connect()
    scheduled = {"AMQ_SCHEDULED_DELAY": "1500", "transaction": "t"}
    raw.send(frame("BEGIN", {"transaction": "t"}) + send_frame("/queue/sb.tx", "plain", {"transaction": "t"})
             + b"".join(send_frame("/queue/sb.tx", BODY, scheduled) for _ in range(15))
             + frame("COMMIT", {"transaction": "t", "receipt": "c"}))
    answer = raw.frame(30)
    assert answer.command == "ERROR" and answer.headers.get("message") == "destination full", answer
    assert "max_scheduled_size" in answer.body.decode()
    raw.close()
    assert assert_count_matches_store(gateway, persistence) == 0
    time.sleep(1.5)
    assert take(gateway, "/queue/sb.tx", quiet=1.0) == []
    raw = RawStomp(gateway.address, timeout=30)
    raw.connect()
    raw.send(frame("BEGIN", {"transaction": "u"})
             + b"".join(send_frame("/queue/sb.tx2", BODY, {**scheduled, "transaction": "u"}) for _ in range(5))
             + frame("COMMIT", {"transaction": "u", "receipt": "c"}))
    answer = raw.frame(30)
    assert answer.command == "RECEIPT", answer
    raw.close()
    time.sleep(1.5)
    assert len(take(gateway, "/queue/sb.tx2")) == 5


def test_connections_racing_never_pass_the_bound(make_gateway: Make) -> None:
    """Five connections each pipelining six 100 KB scheduled SENDs at once: ten accepted in all, the count is
    what is stored; a refused SEND retried on a new connection is refused again while full."""
    gateway = start(make_gateway)
    results: list[tuple[int, str | None]] = []
    barrier = threading.Barrier(5)

    def race(index: int) -> None:
        barrier.wait()
        results.append(schedule(gateway, f"/queue/sb.race{index}", 6, delay=600_000))

    threads = [threading.Thread(target=race, args=(index,)) for index in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(accepted for accepted, _ in results) == 10, results
    assert_count_matches_store(gateway)
    assert schedule(gateway, "/queue/sb.race0", 1, delay=600_000)[0] == 0


def test_after_the_error_other_clients_go_on(make_gateway: Make) -> None:
    """While the bound is full, another client's plain SENDs reach a consumer, and a scheduled SEND small
    enough for what is left is still refused only if it does not fit."""
    gateway = start(make_gateway)
    assert schedule(gateway, "/queue/sb.full2", 11, delay=600_000)[0] == 10
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sb.other", "o")
    producer = Client(gateway.address)
    for index in range(20):
        producer.send("/queue/sb.other", f"m{index}", receipt=True)
    assert [body.decode() for body in collect(consumer, 1.0)] == [f"m{index}" for index in range(20)]
    room = BOUND - counted(gateway)
    assert schedule(gateway, "/queue/sb.small", 1, delay=600_000, body="s" * (room // 2))[0] == 1
    assert_count_matches_store(gateway)
    producer.disconnect()
    consumer.disconnect()


def test_commits_racing_do_not_fit_together(make_gateway: Make) -> None:
    """Two connections each hold a transaction of six 100 KB scheduled SENDs and COMMIT at the same moment:
    each fits alone, not both; one COMMIT gets the RECEIPT, the other ERROR, and six are counted."""
    gateway = start(make_gateway)
    raws = []
    for index in range(2):
        raw = RawStomp(gateway.address, timeout=30)
        raw.connect()
        raw.send(frame("BEGIN", {"transaction": "t"}) + b"".join(
            send_frame(f"/queue/sb.rc{index}", BODY, {"AMQ_SCHEDULED_DELAY": "600000", "transaction": "t"})
            for _ in range(6)) + frame("BEGIN", {"transaction": "probe", "receipt": "ready"}))
        assert raw.frame(30).command == "RECEIPT"
        raws.append(raw)
    commit = frame("COMMIT", {"transaction": "t", "receipt": "c"})
    threads = [threading.Thread(target=raw.send, args=(commit,)) for raw in raws]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    answers = sorted(raw.frame(30).command for raw in raws)
    assert answers == ["ERROR", "RECEIPT"], answers
    jobs, _ = stored(gateway)
    assert jobs == 6
    assert_count_matches_store(gateway)


def test_aborted_and_abandoned_transactions_hold_no_room(make_gateway: Make) -> None:
    """Ten scheduled SENDs in a transaction that is aborted, ten in one whose connection drops: then ten
    still fit."""
    gateway = start(make_gateway)
    for end in (frame("ABORT", {"transaction": "t", "receipt": "a"}), b""):
        raw = RawStomp(gateway.address, timeout=30)
        raw.connect()
        raw.send(frame("BEGIN", {"transaction": "t"}) + b"".join(
            send_frame("/queue/sb.ab", BODY, {"AMQ_SCHEDULED_DELAY": "600000", "transaction": "t"})
            for _ in range(10)) + end)
        if end:
            assert raw.frame(30).command == "RECEIPT"
        raw.close()
    time.sleep(0.5)
    assert schedule(gateway, "/queue/sb.ab", 11, delay=600_000)[0] == 10
    assert_count_matches_store(gateway)


def test_a_resent_scheduled_send_with_a_dedup_id_counts_once(make_gateway: Make) -> None:
    """The same scheduled SEND with one x-dedup-id written twenty times: acknowledged each time, one job
    stored and counted; nine others still fit."""
    gateway = start(make_gateway)
    accepted, error = schedule(gateway, "/queue/sb.dup", 20, delay=600_000, headers={"x-dedup-id": "once"})
    assert accepted == 20 and error is None, (accepted, error)
    assert stored(gateway)[0] == 1
    assert_count_matches_store(gateway)
    assert schedule(gateway, "/queue/sb.dup2", 10, delay=600_000)[0] == 9


def test_big_headers_count_as_stored(make_gateway: Make) -> None:
    """Small bodies with 60 KB of headers: the headers take room as stored; the count matches the store and
    stays within the bound."""
    gateway = start(make_gateway)
    accepted, error = schedule(gateway, "/queue/sb.hdr", 30, delay=600_000, body="b",
                               headers={"big": "h" * 60_000})
    assert 10 <= accepted < 30 and error is not None, (accepted, error)
    assert_count_matches_store(gateway)


def test_frames_pipelined_after_the_refused_send_are_not_handled(make_gateway: Make) -> None:
    """Full; then a refused scheduled SEND followed in the same write by a plain SEND: ERROR, the connection
    closes, the plain SEND is not handled (docs/persistence.md: no frame after the ERROR)."""
    gateway = start(make_gateway, "memory")
    assert schedule(gateway, "/queue/sb.fill", 10, delay=600_000)[0] == 10
    raw = RawStomp(gateway.address, timeout=30)
    raw.connect()
    raw.send(send_frame("/queue/sb.fill", BODY, {"AMQ_SCHEDULED_DELAY": "600000", "receipt": "s"})
             + send_frame("/queue/sb.behind", "behind", {"receipt": "p"}))
    items = raw.until_closed(10)
    assert [item.command for item in items if not isinstance(item, Exception)] == ["ERROR"], items
    assert take(gateway, "/queue/sb.behind", quiet=0.7) == []
