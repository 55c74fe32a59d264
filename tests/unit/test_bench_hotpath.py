"""``bench.hotpath_inprocess`` keeps working: every workload runs small and every message arrives
(its ``run`` asserts the count); no figure is asserted."""

from __future__ import annotations

import pytest

from bench import paging_inprocess, turn_latency
from bench.hotpath_inprocess import WORKLOADS, run, run_persistent


@pytest.mark.parametrize("workload", WORKLOADS)
def test_each_in_process_workload_delivers_every_message(workload: str) -> None:
    assert run(workload, 400) > 0


def test_the_persistent_in_process_workload_delivers_every_message() -> None:
    """(the SQLite store's writer thread reporting through the benchmark's clock; its loop waits for
    every receipt and MESSAGE)"""
    reactor_thread, process = run_persistent(400)
    assert reactor_thread > 0 and process > 0


@pytest.mark.parametrize("persistent", [False, True])
def test_the_in_process_paging_benchmark_pages_and_drains(persistent: bool) -> None:
    """``bench.paging_inprocess`` (it broke once when the protocol's input slices changed)."""
    assert paging_inprocess.run(persistent, "200KB", 400)[4] > 0  # (messages paged out)


def test_the_turn_latency_model_is_deterministic() -> None:
    """``bench.turn_latency`` gives the same latencies for the same input (it runs on a model clock); a
    2 ms stall makes the latest MESSAGE late by about the stall and the turns that drain its backlog."""
    first = turn_latency.run(40_000, 0.1, 2.0, 50.0)
    assert first == turn_latency.run(40_000, 0.1, 2.0, 50.0)
    assert len(first) == 4000
    assert max(turn_latency.run(40_000, 0.1, 0.0, 50.0)) < 0.5  # (no stall: a pacing interval and a turn)
    assert 2.0 < max(first) < 3.5
