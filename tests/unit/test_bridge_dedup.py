"""The duplicate store: ids survive a reopen, expire after their bridge's window
(memory and disk), stay apart per bridge; a bad file is a StoreError naming it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from gateway.bridges.dedup import DuplicateStore, inline_executor
from gateway.errors import StoreError


def opened(path: Path, clock: Clock, **windows: int) -> DuplicateStore:
    store = DuplicateStore(str(path), clock, executor=inline_executor)
    for bridge, window in windows.items():
        store.register(bridge, window)
    d = store.open()
    assert d.called and d.result is None
    return store


def test_ids_survive_a_reopen_and_stay_per_bridge(tmp_path: Path) -> None:
    clock = Clock()
    store = opened(tmp_path / "d.sqlite", clock, a=60_000, b=60_000)
    store.record("a", ["ID:1", "ID:2"])
    assert store.contains("a", "ID:1") and not store.contains("b", "ID:1")
    store.close()
    again = opened(tmp_path / "d.sqlite", clock, a=60_000, b=60_000)
    assert again.contains("a", "ID:1") and again.contains("a", "ID:2")
    assert not again.contains("a", "ID:3") and not again.contains("b", "ID:2")
    assert again.count("a") == 2
    again.close()


def test_ids_expire_after_the_window(tmp_path: Path) -> None:
    clock = Clock()
    store = opened(tmp_path / "d.sqlite", clock, a=1000)
    store.record("a", ["ID:old"])
    clock.advance(0.6)
    store.record("a", ["ID:new"])
    clock.advance(0.5)
    assert not store.contains("a", "ID:old"), "older than the window: not a duplicate any more"
    assert store.contains("a", "ID:new")
    purged = store.purge()
    assert purged.result == 1 and store.count("a") == 1
    store.close()
    clock.advance(0.6)
    again = opened(tmp_path / "d.sqlite", clock, a=1000)
    assert again.count("a") == 0, "expired rows are deleted when the store opens"
    again.close()


def failures_into(failures: list[BaseException]) -> Callable[[Failure], None]:
    """An errback that keeps each error in ``failures``."""

    def keep(failure: Failure) -> None:
        assert failure.value is not None
        failures.append(failure.value)

    return keep


def test_a_corrupt_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    store = DuplicateStore(str(path), Clock(), executor=inline_executor)
    store.register("a", 1000)
    failures: list[BaseException] = []
    store.open().addErrback(failures_into(failures))
    assert len(failures) == 1 and isinstance(failures[0], StoreError)
    assert str(path) in str(failures[0])


def test_recording_on_a_closed_store_fails() -> None:
    store = DuplicateStore(":memory:", Clock(), executor=inline_executor)
    store.register("a", 1000)
    store.open()
    store.close()
    failures: list[BaseException] = []
    store.record("a", ["ID:1"]).addErrback(failures_into(failures))
    assert failures and isinstance(failures[0], StoreError)


@pytest.mark.parametrize("count", [1, 500])
def test_record_many_in_one_commit(tmp_path: Path, count: int) -> None:
    clock = Clock()
    store = opened(tmp_path / "d.sqlite", clock, a=60_000)
    ids = [f"ID:{i}" for i in range(count)]
    store.record("a", ids)
    store.close()
    again = opened(tmp_path / "d.sqlite", clock, a=60_000)
    assert all(again.contains("a", i) for i in ids)
    again.close()


def test_memory_is_bounded_and_sqlite_answers_for_the_rest(tmp_path: Path) -> None:
    clock = Clock()
    store = DuplicateStore(str(tmp_path / "d.sqlite"), clock, executor=inline_executor, cache_size=3)
    store.register("a", 60_000)
    store.open()
    store.record("a", [f"ID:{i}" for i in range(10)])
    assert store.count("a") == 3, "only the newest ids stay in memory"
    found: list[set[str]] = []
    store.known("a", ["ID:0", "ID:5", "ID:9", "ID:new"]).addCallback(found.append)
    assert found == [{"ID:0", "ID:5", "ID:9"}]
    assert store.count("a") <= 3
    store.close()
    again = DuplicateStore(str(tmp_path / "d.sqlite"), clock, executor=inline_executor, cache_size=3)
    again.register("a", 60_000)
    again.open()
    assert again.count("a") == 3, "a reopen loads the newest ids only"
    again.known("a", ["ID:1"]).addCallback(found.append)
    assert found[-1] == {"ID:1"}
    clock.advance(61)
    again.purge()
    again.known("a", ["ID:1", "ID:9"]).addCallback(found.append)
    assert found[-1] == set(), "expired on disk too"
    again.close()
