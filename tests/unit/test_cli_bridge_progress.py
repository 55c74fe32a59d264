"""What ``jmsgateway bridge`` logs while it runs (gateway/bridge_progress.py), on a fake clock."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.logger import LogPublisher, formatEvent

from gateway.bridge_progress import BridgeProgress
from tests.support.log_events import observer as log_observer


class FakeBridges:
    def __init__(self) -> None:
        self.rows = [{"name": "b1", "state": "starting", "forwarded": 0, "pending": 0, "retries": 0,
                      "last_error": None}]

    def status(self) -> list[dict[str, Any]]:
        return [dict(row) for row in self.rows]


def test_states_as_they_change_and_rates_every_interval() -> None:
    clock = Clock()
    bridges = FakeBridges()
    lines: list[str] = []
    progress = BridgeProgress(bridges, clock, interval=10)
    progress.log = progress.log.__class__(namespace="test", observer=LogPublisher(log_observer(lambda e: lines.append(
        formatEvent(e)))))
    progress.start()
    clock.advance(1)
    assert lines == ["bridge b1: new -> starting"]
    bridges.rows[0].update(state="running")
    clock.advance(1)
    assert lines[-1] == "bridge b1: starting -> running"
    bridges.rows[0].update(forwarded=500, pending=3)
    for _ in range(8):
        clock.advance(1)
    assert lines[-1] == "bridge b1: running, 500 forwarded (50.0/s over 10s), 3 pending, 0 retries"
    bridges.rows[0].update(state="retrying", last_error="connection refused", retries=1)
    clock.advance(1)
    assert lines[-1] == "bridge b1: running -> retrying: connection refused"
    progress.stop()


def test_interval_zero_logs_states_only() -> None:
    clock = Clock()
    lines: list[str] = []
    progress = BridgeProgress(FakeBridges(), clock, interval=0)
    progress.log = progress.log.__class__(namespace="test", observer=LogPublisher(log_observer(lambda e: lines.append(
        formatEvent(e)))))
    progress.start()
    clock.advance(60)
    assert lines == ["bridge b1: new -> starting"]
