"""Scheduled delivery on the embedded broker (issue 37): AMQ_SCHEDULED_DELAY / PERIOD / REPEAT,
jobs on disk across a restart (one timer, no bodies in memory), refusals that say why."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from gateway.bridges.dedup import inline_executor
from gateway.broker.broker import EmbeddedBroker
from gateway.broker.scheduler import (
    CRON,
    DELAY,
    JOB_ID,
    PERIOD,
    REPEAT,
    WINDOW,
    Job,
    MemorySchedule,
    SqliteSchedule,
    is_scheduled,
    job_of,
    job_size,
)
from gateway.broker.settings import BrokerSettings
from gateway.errors import DestinationFull, MessageRefused, StoreError
from gateway.message.model import Message, TextMessage
from tests.unit.test_broker import Sink, subscribe


def scheduled(body: str, destination: str = "/queue/later",
              schedule: Mapping[str, object] | None = None) -> TextMessage:
    return TextMessage(destination=destination, message_id=f"ID:{body}", text=body, persistent=True,
                       properties={key: str(value) for key, value in (schedule or {}).items()})


def fired(d: Deferred[Any]) -> Any:
    results: list[Any] = []
    d.addBoth(results.append)
    assert results, "the Deferred did not fire"
    return results[0]


def make(clock: Clock, schedule: Any = None) -> EmbeddedBroker:
    broker = EmbeddedBroker(clock, BrokerSettings(), schedule=schedule or MemorySchedule())
    fired(broker.start())
    return broker


# -- what a schedule is --------------------------------------------------------------


def test_the_properties_make_a_job() -> None:
    job = job_of(scheduled("m", schedule={DELAY: 5000, PERIOD: 1000, REPEAT: 2}), now_ms=10_000)
    assert (job.due, job.period, job.repeats_left, job.occurrence) == (15_000, 1000, 2, 0)
    assert job.job_id.startswith("ID:job-")
    second = job.next()
    assert second is not None and (second.due, second.repeats_left, second.occurrence) == (16_000, 1, 1)
    assert job.next().next().next() is None  # type: ignore[union-attr]
    assert is_scheduled(scheduled("m", schedule={DELAY: 1})) and not is_scheduled(scheduled("m"))


@pytest.mark.parametrize(("schedule", "why"), [
    ({CRON: "* * * * *"}, "AMQ_SCHEDULED_CRON is not supported"),
    ({DELAY: "-5"}, "AMQ_SCHEDULED_DELAY must not be negative"),
    ({DELAY: "soon"}, "AMQ_SCHEDULED_DELAY must be a whole number of ms, not 'soon'"),
    ({REPEAT: "3"}, "AMQ_SCHEDULED_REPEAT:3 needs an AMQ_SCHEDULED_PERIOD above 0"),
    # (a number the store's 64-bit integers cannot hold was an internal error, the connection closed:
    # tests/integration/test_feature_authorization_attacks.py)
    ({DELAY: "9" * 30}, "AMQ_SCHEDULED_DELAY must be at most 9223372036854775807 ms"),
    ({DELAY: "1", PERIOD: "9" * 30, REPEAT: "1"}, "AMQ_SCHEDULED_PERIOD must be at most"),
    ({PERIOD: "1000", REPEAT: str(2**31)}, "AMQ_SCHEDULED_REPEAT must be at most 2147483647 deliveries"),
], ids=["cron", "negative", "not-a-number", "repeat-without-period", "huge-delay", "huge-period", "huge-repeat"])
def test_what_cannot_be_scheduled_is_refused_saying_why(schedule: dict[str, str], why: str) -> None:
    with pytest.raises(MessageRefused, match=why):
        job_of(scheduled("m", schedule=schedule), now_ms=0)


@pytest.mark.parametrize(("schedule", "why"), [
    ({DELAY: str(2**63)}, "AMQ_SCHEDULED_DELAY must be at most 9223372036854775807 ms"),
    ({DELAY: "1" + "0" * 30}, "AMQ_SCHEDULED_DELAY must be at most 9223372036854775807 ms"),
    ({DELAY: str(2**63 - 1)}, "would be due after 9223372036854775807 ms"),
    ({DELAY: "100", PERIOD: str(2**62), REPEAT: "3"}, "would be due after 9223372036854775807 ms"),
    ({PERIOD: "1", REPEAT: str(2**31)}, "AMQ_SCHEDULED_REPEAT must be at most 2147483647 deliveries"),
    ({DELAY: "1_000"}, "AMQ_SCHEDULED_DELAY must be a whole number of ms, not '1_000'"),
    ({DELAY: "\u0663"}, "AMQ_SCHEDULED_DELAY must be a whole number of ms"),
    ({DELAY: "1e3"}, "AMQ_SCHEDULED_DELAY must be a whole number of ms, not '1e3'"),
], ids=["delay-past-a-long", "delay-huge", "due-past-a-long", "last-repeat-past-a-long", "repeat-past-an-int",
        "underscore", "arabic-indic-digit", "exponent"])
def test_overflowing_and_odd_numbers_are_refused_saying_why(schedule: dict[str, str], why: str) -> None:
    """Values past what ActiveMQ reads (a Java long of ms, an int of repeats), a schedule whose last delivery
    would be due past the store's 64-bit time, and numbers Python reads but Java does not are refused, saying
    why (an overflowing one reached SQLite and failed the SEND as an internal error; ``1_000`` and Unicode
    digits were read as numbers): found by tests/integration/test_scheduled_attacks.py."""
    with pytest.raises(MessageRefused, match=why):
        job_of(scheduled("m", schedule=schedule), now_ms=1_800_000_000_000)


def test_a_kept_job_whose_next_time_would_overflow_ends() -> None:
    """A job kept before the SEND checked its schedule (a period of a Java long's ms) ends after its next
    occurrence rather than fail to advance (its first occurrence came again every second)."""
    job = Job("ID:job-1", 1_800_000_000_000, 2**63 - 1, 1, 0, scheduled("m"))
    assert job.next() is None


def test_the_largest_schedule_that_fits_is_kept() -> None:
    """A delay that ends exactly at the last 64-bit ms is a job (and ``+5``, `` 7 `` are numbers, as before)."""
    now = 1_800_000_000_000
    assert job_of(scheduled("m", schedule={DELAY: str(2**63 - 1 - now)}), now_ms=now).due == 2**63 - 1
    assert job_of(scheduled("m", schedule={DELAY: "+5"}), now_ms=now).due == now + 5
    assert job_of(scheduled("m", schedule={DELAY: " 7 "}), now_ms=now).due == now + 7


# -- on the broker -------------------------------------------------------------------------


def test_a_delayed_message_arrives_when_due_without_its_schedule() -> None:
    clock = Clock()
    broker = make(clock)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/later")
    assert fired(broker.send(scheduled("m", schedule={DELAY: 5000}))) is None
    assert broker.status()["scheduled"]["waiting"] == 1
    clock.advance(4.9)
    assert sink.texts() == []
    clock.advance(0.1)
    assert sink.texts() == ["m"]
    message = sink.got[0][0]
    job_id = message.properties[JOB_ID]
    assert DELAY not in message.properties and isinstance(job_id, str) and job_id.startswith("ID:job-")
    assert message.message_id == "ID:m"
    assert broker.status()["scheduled"] == {"waiting": 0, "delivered": 1}


def test_a_repeated_message_arrives_each_period_with_its_own_id() -> None:
    clock = Clock()
    broker = make(clock)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/later")
    broker.send(scheduled("m", schedule={PERIOD: 1000, REPEAT: 2}))
    clock.advance(0)
    assert [m.message_id for m, _ in sink.got] == ["ID:m"]
    clock.advance(1.0)
    clock.advance(1.0)
    assert [m.message_id for m, _ in sink.got] == ["ID:m", "ID:m:1", "ID:m:2"]
    clock.advance(10)
    assert len(sink.got) == 3


def test_an_earlier_job_scheduled_later_is_not_held_behind_a_later_one() -> None:
    clock = Clock()
    broker = make(clock)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/later")
    broker.send(scheduled("late", schedule={DELAY: 60_000}))
    broker.send(scheduled("early", schedule={DELAY: 1000}))
    clock.advance(1.0)
    assert sink.texts() == ["early"]
    clock.advance(59.0)
    assert sink.texts() == ["early", "late"]


def test_a_scheduled_send_in_a_transaction_waits_for_the_commit_then_its_time() -> None:
    clock = Clock()
    broker = make(clock)
    sink = Sink()
    subscribe(broker, sink, destination="/queue/later")
    fired(broker.send_batch([scheduled("now"), scheduled("later", schedule={DELAY: 2000})]))
    assert sink.texts() == ["now"]
    clock.advance(2.0)
    assert sink.texts() == ["now", "later"]


def test_a_bad_schedule_is_refused_and_nothing_is_stored() -> None:
    clock = Clock()
    broker = make(clock)
    outcome = fired(broker.send(scheduled("m", schedule={CRON: "0 * * * *"})))
    assert "not supported" in outcome.getErrorMessage()
    assert broker.status()["scheduled"]["waiting"] == 0 and "/queue/later" not in broker.queues


def test_a_message_for_a_temporary_queue_that_is_gone_is_dropped_not_retried() -> None:
    clock = Clock()
    broker = make(clock)
    broker.send(scheduled("m", destination="/remote-temp-queue/gone", schedule={DELAY: 100}))
    clock.advance(0.1)
    clock.advance(0)
    assert broker.status()["scheduled"]["waiting"] == 0


# -- on disk ------------------------------------------------------------------------


def test_jobs_survive_a_restart_and_are_due_on_time(tmp_path: Path) -> None:
    path = str(tmp_path / "schedule.sqlite")
    clock = Clock()
    clock.advance(1_000)
    broker = make(clock, SqliteSchedule(path, clock, executor=inline_executor))
    fired(broker.send(scheduled("m", schedule={DELAY: 30_000, PERIOD: 5000, REPEAT: 1})))
    clock.advance(10)
    fired(broker.stop())
    restarted = make(clock, SqliteSchedule(path, clock, executor=inline_executor))
    assert restarted.status()["scheduled"]["waiting"] == 1
    sink = Sink()
    subscribe(restarted, sink, destination="/queue/later")
    clock.advance(19.9)
    assert sink.texts() == []
    clock.advance(0.1)
    assert sink.texts() == ["m"]
    clock.advance(5.0)
    assert [m.message_id for m, _ in sink.got] == ["ID:m", "ID:m:1"]
    fired(restarted.stop())
    again = make(clock, SqliteSchedule(path, clock, executor=inline_executor))
    assert again.status()["scheduled"]["waiting"] == 0, "delivered jobs are gone from the file"


def test_an_occurrence_not_yet_stored_at_a_crash_comes_again(tmp_path: Path) -> None:
    """At least once: the job advances only after the broker stored the occurrence."""
    path = str(tmp_path / "schedule.sqlite")
    clock = Clock()
    store = SqliteSchedule(path, clock, executor=inline_executor)
    broker = make(clock, store)
    held: list[Deferred[None]] = []

    def held_back(message: Message) -> Deferred[None]:
        held.append(Deferred())
        return held[-1]

    broker.scheduler.deliver = held_back
    fired(broker.send(scheduled("m", schedule={DELAY: 100})))
    clock.advance(0.1)
    assert len(held) == 1, "the occurrence is on its way"
    fired(store.close())  # (the crash: the occurrence was never confirmed)
    restarted = make(clock, SqliteSchedule(path, clock, executor=inline_executor))
    sink = Sink()
    subscribe(restarted, sink, destination="/queue/later")
    clock.advance(0)
    assert sink.texts() == ["m"]


def test_many_jobs_hold_one_timer_and_no_bodies(tmp_path: Path) -> None:
    clock = Clock()
    store = SqliteSchedule(str(tmp_path / "schedule.sqlite"), clock, executor=inline_executor)
    broker = make(clock, store)
    count = 3 * WINDOW + 17
    for i in range(count):
        broker.send(scheduled(f"m{i}", schedule={DELAY: 1000 + i}))
    assert len(clock.getDelayedCalls()) <= 3, \
        "one timer for the schedule (and the broker's expiry check and inactive queues' sweep)"
    assert not [value for value in vars(broker.scheduler).values() if isinstance(value, (list, dict))], \
        "the scheduler keeps no jobs in memory"
    sink = Sink()
    subscribe(broker, sink, destination="/queue/later", prefetch=count)
    for _ in range(40):
        clock.advance(0.5)
    assert len(sink.got) == count
    assert sink.texts() == [f"m{i}" for i in range(count)], "in due order"


def test_jobs_added_while_a_write_is_under_way_share_the_next_transaction(tmp_path: Path) -> None:
    """A pipelined client's scheduled SENDs are written together: the jobs added while a write of jobs is
    under way share one transaction (each had its own commit and fsync: 2,500 pipelined scheduled SENDs took
    4.8 s against 0.1 s for plain persistent ones; found by tests/integration/test_scheduled_attacks.py);
    each add fires once its jobs are committed, in order."""
    runs: list[Callable[[], Any]] = []

    def held(function: Callable[[], Any]) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        runs.append(lambda: d.callback(function()))
        return d

    schedule = SqliteSchedule(str(tmp_path / "schedule.sqlite"), Clock(), executor=held)
    runs.clear()
    committed: list[int] = []
    first = job_of(scheduled("first", schedule={DELAY: 1000}), now_ms=0)
    schedule.add([first]).addCallback(lambda _: committed.append(0))
    for index in range(1, 101):
        job = job_of(scheduled(f"m{index}", schedule={DELAY: 1000}), now_ms=0)
        schedule.add([job]).addCallback(lambda _, number: committed.append(number), index)
    assert len(runs) == 1, "a write per job"
    runs.pop(0)()
    assert committed == [0] and len(runs) == 1
    runs.pop(0)()
    assert committed == list(range(101)) and not runs
    count = schedule.open()
    runs.pop(0)()
    assert fired(count)[0] == 101
    schedule.close()
    while runs:
        runs.pop(0)()


# -- bounded: [broker] max_scheduled_size and the disk's min_free --------------------


def bounded(clock: Clock, max_size: int, schedule: Any = None) -> EmbeddedBroker:
    broker = EmbeddedBroker(clock, BrokerSettings(max_scheduled_size=max_size), schedule=schedule or MemorySchedule())
    fired(broker.start())
    return broker


def test_scheduled_sends_past_max_scheduled_size_are_refused_and_room_comes_back() -> None:
    """The defect: a client could schedule without bound (a year's delay each), filling the memory
    (persistence memory) or the disk (SQLite) for everyone."""
    clock = Clock()
    one = job_size(scheduled("m0", schedule={DELAY: 1000}))
    broker = bounded(clock, max_size=3 * one)
    for i in range(3):
        assert fired(broker.send(scheduled(f"m{i}", schedule={DELAY: 1000}))) is None
    refused = fired(broker.send(scheduled("m3", schedule={DELAY: 1000})))
    assert isinstance(refused, Failure) and refused.check(DestinationFull)
    assert "max_scheduled_size" in refused.getErrorMessage() and "/queue/later" in refused.getErrorMessage()
    assert broker.status()["scheduled"]["waiting"] == 3
    sink = Sink()
    subscribe(broker, sink, destination="/queue/later")
    clock.advance(1.0)  # the three are delivered: their room comes back
    assert sink.texts() == ["m0", "m1", "m2"]
    assert fired(broker.send(scheduled("m4", schedule={DELAY: 1000}))) is None


def test_a_commit_whose_scheduled_sends_pass_the_limit_sends_nothing() -> None:
    clock = Clock()
    one = job_size(scheduled("m0", schedule={DELAY: 1000}))
    broker = bounded(clock, max_size=2 * one)
    now = TextMessage(destination="/queue/now", message_id="ID:now", text="now", persistent=True)
    refused = fired(broker.send_batch([now, *(scheduled(f"m{i}", schedule={DELAY: 1000}) for i in range(3))]))
    assert isinstance(refused, Failure) and refused.check(DestinationFull)
    assert "/queue/now" not in broker.queues or len(broker.queues["/queue/now"]) == 0
    assert broker.status()["scheduled"]["waiting"] == 0


def test_the_limit_counts_the_jobs_found_at_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "schedule.sqlite")
    clock = Clock()
    one = job_size(scheduled("m0", schedule={DELAY: 60_000}))
    broker = bounded(clock, 2 * one, SqliteSchedule(path, clock, executor=inline_executor))
    for i in range(2):
        fired(broker.send(scheduled(f"m{i}", schedule={DELAY: 60_000})))
    fired(broker.stop())
    restarted = bounded(clock, 2 * one, SqliteSchedule(path, clock, executor=inline_executor))
    refused = fired(restarted.send(scheduled("m2", schedule={DELAY: 60_000})))
    assert isinstance(refused, Failure) and refused.check(DestinationFull)


def test_the_schedule_file_keeps_min_free_of_the_disk(tmp_path: Path) -> None:
    clock = Clock()
    free = [10_000_000]
    store = SqliteSchedule(str(tmp_path / "schedule.sqlite"), clock, executor=inline_executor,
                           min_free=9_999_000, free_space=lambda _: free[0])
    broker = bounded(clock, 0, store)
    refused = fired(broker.send(scheduled("big" + "x" * 2000, schedule={DELAY: 1000})))
    assert isinstance(refused, Failure) and refused.check(StoreError)
    assert "min_free" in refused.getErrorMessage() and "schedule.sqlite" in refused.getErrorMessage()
    assert broker.scheduler.size == 0 and broker.status()["scheduled"]["waiting"] == 0
    free[0] = 100_000_000
    assert fired(broker.send(scheduled("fits", schedule={DELAY: 1000}))) is None


def commit_being_stored() -> tuple[EmbeddedBroker, Any, Deferred[None]]:
    """A broker with room for two scheduled SENDs and a store whose writes wait for the test, and a COMMIT of a
    plain persistent SEND and two scheduled ones whose plain SEND is being stored."""
    from tests.unit.test_broker_collection import SlowStore

    clock = Clock()
    store: Any = SlowStore()
    room = 2 * job_size(scheduled("m0", schedule={DELAY: 1000}))
    broker = EmbeddedBroker(clock, BrokerSettings(max_scheduled_size=room), store=store, schedule=MemorySchedule())
    fired(broker.start())
    now = TextMessage(destination="/queue/now", message_id="ID:now", text="now", persistent=True)
    commit = broker.send_batch([now, scheduled("m0", schedule={DELAY: 1000}), scheduled("m1", schedule={DELAY: 1000})])
    return broker, store, commit


def test_a_commit_keeps_the_room_of_its_scheduled_sends_while_its_other_sends_are_stored() -> None:
    """A COMMIT with plain persistent SENDs and scheduled ones: the plain ones are stored first.  Another
    connection's scheduled SEND arriving meanwhile must not take the room the COMMIT was judged to fit in,
    or the COMMIT would fail after its plain SENDs were applied."""
    broker, store, commit = commit_being_stored()
    assert not commit.called and store.writes, "the plain SEND is being stored"
    other = fired(broker.send(scheduled("m2", schedule={DELAY: 1000})))
    assert isinstance(other, Failure) and other.check(DestinationFull), "the COMMIT's room was taken"
    store.writes[0].callback(None)
    assert fired(commit) is None
    assert broker.status()["scheduled"]["waiting"] == 2


def test_a_commit_whose_plain_sends_fail_gives_its_scheduled_room_back() -> None:
    broker, store, commit = commit_being_stored()
    store.writes[0].errback(StoreError("disk full"))
    assert isinstance(fired(commit), Failure)
    assert broker.scheduler.size == 0 and broker.status()["scheduled"]["waiting"] == 0
    assert fired(broker.send(scheduled("m2", schedule={DELAY: 1000}))) is None
