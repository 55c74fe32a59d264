"""Heart-beats alone (:mod:`gateway.stomp.heartbeats`): negotiation, the outgoing beat that only
an idle connection needs, and the incoming deadline, on a :class:`Clock`."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from gateway.stomp.errors import StompError
from gateway.stomp.heartbeats import HeartBeats, parse_heartbeat


class Owner:
    def __init__(self) -> None:
        self.connected = True
        self.held = False
        self.beats = 0
        self.missed: list[tuple[float, float]] = []

    def beating(self) -> bool:
        return self.connected

    def reading_held(self) -> bool:
        return self.held

    def send_heartbeat(self) -> None:
        self.beats += 1

    def heartbeat_missed(self, silent: float, limit: float) -> None:
        self.missed.append((silent, limit))


def started(client: tuple[int, int], server: tuple[int, int] = (1000, 1000)) -> tuple[Clock, Owner, HeartBeats]:
    clock, owner = Clock(), Owner()
    beats = HeartBeats(clock, owner, grace=2.0)
    beats.negotiate(client, *server)
    beats.start()
    return clock, owner, beats


def test_the_slower_side_sets_each_interval_and_zero_means_none() -> None:
    _, _, beats = started((500, 3000))
    assert (beats.out_interval, beats.in_interval) == (3.0, 1.0)
    _, _, none = started((0, 0))
    assert (none.out_interval, none.in_interval) == (0.0, 0.0)


def test_a_bad_header_is_refused() -> None:
    assert parse_heartbeat("10, 20") == (10, 20)
    with pytest.raises(StompError, match="invalid heart-beat header"):
        parse_heartbeat("10")


def test_a_beat_goes_out_only_when_nothing_else_was_written() -> None:
    clock, owner, beats = started((0, 1000))
    clock.advance(0.6)
    beats.sent()  # a frame went out
    clock.advance(0.5)
    assert owner.beats == 0
    clock.advance(0.6)
    assert owner.beats == 1


def test_silence_past_the_grace_is_reported_once_and_data_keeps_it_alive() -> None:
    clock, owner, beats = started((1000, 0))
    clock.advance(1.5)
    beats.received()
    clock.advance(1.5)
    assert owner.missed == []
    clock.advance(0.6)
    [(missed, limit)] = owner.missed
    assert missed == pytest.approx(2.1) and limit == 2.0
    clock.advance(10)
    assert len(owner.missed) == 1


def test_a_held_connection_is_not_closed_for_its_silence() -> None:
    clock, owner, _ = started((1000, 0))
    owner.held = True
    clock.advance(10)
    assert owner.missed == []


def test_stop_cancels_both_timers() -> None:
    clock, _, beats = started((1000, 1000))
    beats.stop()
    assert clock.getDelayedCalls() == []
