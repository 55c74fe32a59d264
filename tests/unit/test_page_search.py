"""Selector searches of a paged queue in slices (docs/paging.md): a search that runs out of
its time slice goes on in a later reactor turn from where it stopped, so every slice makes
progress and a search always ends; here every slice stops after one message."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker import paging as paging_module
from gateway.broker import queue as queue_module
from gateway.broker.limits import message_size
from gateway.broker.paging import Entry, PageFile, QueuePage, StoredTail
from gateway.broker.sqlite_records import encode_message
from gateway.config import BrokerSettings
from gateway.message.model import Message
from tests.unit.test_store_broker import Run, Sink, text

ONE = message_size(text("/queue/q", "m00", persistent=False))
SEARCHES = 2000
"""Page searches a test allows: a search that does not progress would go on for ever inside
one ``Clock.advance`` (each slice schedules the next with ``callLater(0)``)."""


class Livelock(AssertionError):
    pass


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    """A broker with room for eight messages whose page searches stop after one message
    (and fail the test past :data:`SEARCHES` of them)."""
    monkeypatch.setattr(paging_module, "SEARCH_CLOCK_EVERY", 1)
    monkeypatch.setattr(queue_module, "SEARCH_SLICE", 0.0)
    search = QueuePage.search
    calls = [0]

    def bounded(self: QueuePage, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > SEARCHES:
            raise Livelock(f"{SEARCHES} searches of the page: a sliced search does not progress")
        return search(self, *args, **kwargs)

    monkeypatch.setattr(QueuePage, "search", bounded)
    run = Run(tmp_path, BrokerSettings(persistence="sqlite", max_redeliveries=5, memory_limit=8 * ONE),
              lazy_recovery=True)
    run.start()
    yield run
    if run.broker is not None:
        run.wait(run.broker.stop())


def message(body: str, priority: int = 4) -> Any:
    return text("/queue/q", body, persistent=False, priority=priority, properties={"color": "blue"})


def test_a_sliced_search_between_messages_in_memory_goes_on_where_it_stopped(run: Run) -> None:
    """Memory holds m01, m03, m07 (and lower-priority ones) and the page m02, m04, m05,
    m06 (redeliveries paged out while memory was full): a selective consumer that refuses all
    of them has the page searched between the messages in memory.  The search up to m03 ends
    (m02 only), the one from m03 to m07 stops after m04: it must go on from m04 in the next
    turn.  It went back to m03 at every turn (the consumer's place was not moved, as that
    search did not start from it), for ever."""
    broker = run.broker
    assert broker is not None
    run.send(*[message(f"m{n:02}") for n in range(10)])
    taker = Sink()
    holder = run.subscribe(taker, destination="/queue/q", ack_mode="client-individual", prefetch=10)
    assert taker.texts() == [f"m{n:02}" for n in range(10)]
    holder.pause()  # (as a full transport does: it takes nothing more)
    tags = {m.text: tag for m, tag in taker.got}  # type: ignore[attr-defined]
    run.wait(holder.nack([tags["m01"], tags["m03"], tags["m07"]]))
    run.send(*[message(f"l{n:02}", priority=0) for n in range(10)])  # (memory fills: the rest is paged)
    queue = broker.queues["/queue/q"]
    assert queue.full(ONE) and queue.paged
    run.wait(holder.nack([tags["m02"], tags["m04"], tags["m05"], tags["m06"]]))
    assert [m.text for m in queue.messages(20)[:7]] == ["m01", "m02", "m03", "m04", "m05", "m06", "m07"]
    assert queue.page is not None and queue.page.head is not None and queue.page.head[1] == 2  # (m02)
    reds = Sink()
    red = run.subscribe(reds, destination="/queue/q", ack_mode="client-individual", prefetch=1,
                        selector="color = 'red'")
    for _ in range(20):
        run.clock.advance(0)
    assert reds.got == []
    run.send(text("/queue/q", "red", persistent=False, priority=0, properties={"color": "red"}))
    for _ in range(200):
        run.clock.advance(0)
        if reds.got:
            break
    assert reds.texts() == ["red"]
    run.wait(red.close())
    holder.resume()
    run.wait(holder.ack([tag for _, tag in taker.got]))


# -- the page's own searches ------------------------------------------------------------


class Backlog:
    """A recovered backlog (:class:`~gateway.broker.store.StoredBacklog`) in a list."""

    last_seq = 10**9

    def __init__(self, entries: list[Entry]) -> None:
        self.rows = sorted((rank, seq, message.message_id, 0, len(record := encode_message(message)), 0, record)
                           for rank, seq, message, _ in entries)

    def read(self, queue: str, after: tuple[int, int], limit: int) -> list[Any]:
        return [row for row in self.rows if (row[0], row[1]) > after][:limit]

    def track(self, queue: str, rows: list[Any]) -> None:
        taken = {row[1] for row in rows}
        self.rows = [row for row in self.rows if row[1] not in taken]


def page_entry(seq: int, priority: int, color: str) -> Entry:
    message = text("/queue/p", f"{color}{seq}", persistent=False, priority=priority, properties={"color": color})
    return (-priority, seq, message, message_size(message))


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_a_search_resumed_where_it_stopped_always_moves_on_and_finds_what_one_search_finds(
    data: st.DataObject,
) -> None:
    """Every slice of a search stops after one message (wherever that is: a group in the file,
    the part not written yet, a recovered backlog still in the store); going on past where it
    stopped, it ends, each slice past the last, and takes every match once, in key order."""
    clock = itertools.count()
    page = PageFile(None).queue()
    seqs = iter(range(10**6))
    entries = [page_entry(next(seqs), data.draw(st.sampled_from([0, 4, 4, 9])),
                          data.draw(st.sampled_from(["red", "blue", "blue"])))
               for _ in range(data.draw(st.integers(0, 60)))]
    if entries and data.draw(st.booleans(), label="a recovered backlog"):
        backlog = entries[:data.draw(st.integers(0, len(entries)))]
        entries = entries[len(backlog):]
        page.attach(StoredTail(Backlog(backlog), "/queue/p", len(backlog), 0))
    else:
        backlog = []
    for item in entries:
        page.add(*item)  # (what the last group holds may still wait to be written)
    if data.draw(st.booleans(), label="some read back"):
        page.read(data.draw(st.integers(1, 20)), 2**62)
    for _ in range(data.draw(st.integers(0, 5))):
        page.add(*page_entry(next(seqs), data.draw(st.sampled_from([0, 4, 9])), "red"))
    before = (-4, data.draw(st.integers(0, 70))) if data.draw(st.booleans(), label="up to a key") else None
    every = page.peek(page.count)
    expected = [(rank, seq) for rank, seq, message, _ in every
                if message.properties["color"] == "red" and (before is None or (rank, seq) < before)]

    def red(message: Message) -> bool:
        return message.properties.get("color") == "red"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(paging_module, "SEARCH_CLOCK_EVERY", 1)
        patch.setattr(paging_module, "time", SimpleNamespace(monotonic=lambda: float(next(clock))))
        after: tuple[int, int] | None = None
        got: list[tuple[int, int]] = []
        for _ in range(len(every) + 2):
            found = page.search(red, 10**6, 2**62, after=after, before=before, budget=0.5)
            got.extend((rank, seq) for rank, seq, _, _ in found)
            if page.stopped is None:
                break
            assert after is None or page.stopped > after, "a slice did not move past where the last one stopped"
            after = page.stopped
        else:
            raise AssertionError("a search in slices did not end")
    assert got == expected
    left = [(rank, seq) for rank, seq, _, _ in every if (rank, seq) not in set(expected)]
    assert [(rank, seq) for rank, seq, _, _ in page.peek(page.count)] == left
