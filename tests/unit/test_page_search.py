"""Selector searches of a paged queue in slices (docs/paging.md): a search that runs out of
its time slice goes on in a later reactor turn from where it stopped, so every slice makes
progress and a search always ends; here every slice stops after one message."""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker import queue as queue_module
from gateway.broker.limits import message_size
from gateway.broker.paging import page_file as paging_module
from gateway.broker.paging.page_file import Entry, PageFile, QueuePage, StoredTail
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.sqlite_records import encode_message
from gateway.message.model import Message
from tests.support.messages import text_of
from tests.unit.test_store_broker import Run, Sink, text

ONE = message_size(text("/queue/q", "m00", persistent=False))
SEARCHES = 2000
"""Page searches one ``Clock.advance`` may run: a search that does not progress would go on for
ever inside one (each slice schedules the next with ``callLater(0)``)."""


class Livelock(AssertionError):
    pass


@contextlib.contextmanager
def sliced(directory: Path, limit: int = 8 * ONE) -> Iterator[Run]:
    """A broker with room for ``limit`` bytes of messages whose page searches stop after one
    message (and fail the test past :data:`SEARCHES` of them in one turn of the clock)."""
    search = QueuePage.search
    calls = [0]

    def bounded(self: QueuePage, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > SEARCHES:
            raise Livelock(f"{SEARCHES} searches of the page in one turn: a sliced search does not progress")
        return search(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(paging_module, "SEARCH_CLOCK_EVERY", 1)
        patch.setattr(queue_module, "SEARCH_SLICE", 0.0)
        patch.setattr(QueuePage, "search", bounded)
        run = Run(directory, BrokerSettings(persistence="sqlite", max_redeliveries=100, memory_limit=limit),
                  lazy_recovery=True)
        advance = run.clock.advance

        def turn(amount: float) -> None:
            calls[0] = 0
            advance(amount)

        patch.setattr(run.clock, "advance", turn)
        run.start()
        try:
            yield run
        finally:
            run.close()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    with sliced(tmp_path) as run:
        yield run


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
    assert [text_of(m) for m in queue.messages(20)[:7]] == ["m01", "m02", "m03", "m04", "m05", "m06", "m07"]
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


def pump(run: Run) -> None:
    for _ in range(3):
        run.clock.advance(0)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_selective_consumers_of_any_paged_queue_searched_in_slices_get_each_match_once(data: st.DataObject) -> None:
    """Any mix of priorities and colors, some of it delivered and put back (NACK) while memory is
    full, so that memory and the page interleave; then selective consumers that acknowledge one
    message at a time, every search in one-message slices: the searches end, each consumer gets
    only what its selector accepts, and every message is delivered once (or left, once)."""
    colors = st.sampled_from(["red", "green", "blue", "blue"])
    priorities = st.sampled_from([0, 4, 4, 9])
    bodies = itertools.count()
    with tempfile.TemporaryDirectory() as directory, sliced(Path(directory), 4 * ONE) as run:
        broker = run.broker
        assert broker is not None

        def send(count: int) -> list[str]:
            sent = [f"{data.draw(colors)}{next(bodies):03}" for _ in range(count)]
            run.send(*[text("/queue/q", body, persistent=False, priority=data.draw(priorities),
                            properties={"color": body[:-3]}) for body in sent])
            return sent

        sent = send(data.draw(st.integers(1, 30)))
        holder_sink = Sink()
        holder = run.subscribe(holder_sink, destination="/queue/q", ack_mode="client-individual",
                               prefetch=data.draw(st.integers(1, 30)))
        holder.pause()
        held = [tag for _, tag in holder_sink.got]
        sent += send(data.draw(st.integers(0, 20)))
        kept = set(held)
        for tag in data.draw(st.permutations(held)):
            if data.draw(st.booleans(), label="put back"):
                run.wait(holder.nack([tag]))
                kept.discard(tag)
                if data.draw(st.booleans(), label="send one"):
                    sent += send(1)
        sinks = {color: Sink() for color in ("red", "green")}
        subscriptions = {
            color: run.subscribe(sinks[color], destination="/queue/q", ack_mode="client-individual",
                                 prefetch=data.draw(st.integers(1, 3)), selector=f"color = '{color}'")
            for color in data.draw(st.sampled_from([("red",), ("red", "green")]))
        }
        pump(run)
        acked = {color: 0 for color in subscriptions}
        for _ in range(4 * len(sent)):
            waiting = [color for color in subscriptions if len(sinks[color].got) > acked[color]]
            if not waiting:
                break
            color = data.draw(st.sampled_from(waiting))
            run.wait(subscriptions[color].ack([sinks[color].got[acked[color]][1]]))
            acked[color] += 1
            pump(run)
        for color, sink in sinks.items():
            assert all(body.startswith(color) for body in sink.texts()), sink.texts()
        for subscription in subscriptions.values():
            run.wait(subscription.close())
        run.wait(holder.ack(list(kept)))  # (paused: it takes nothing more)
        run.wait(holder.close())
        rest = Sink()
        drained = run.subscribe(rest, destination="/queue/q", ack_mode="auto")
        pump(run)
        delivered = [*sinks["red"].texts(), *sinks["green"].texts(), *rest.texts(),
                     *(str(text_of(message)) for message, tag in holder_sink.got if tag in kept)]
        run.wait(drained.close())
    left = [body for body in rest.texts() if any(body.startswith(color) for color in subscriptions)]
    assert not left, f"messages a consumer accepts were left for others: {left}"
    assert sorted(delivered) == sorted(sent)


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
    if len(entries) > 0 and data.draw(st.booleans(), label="a recovered backlog"):
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
