"""StompServerFactory.headers_dropped: every left-out header counted, the log bounded."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.task import Clock
from twisted.logger import Logger, formatEvent

from gateway.broker.broker import EmbeddedBroker
from gateway.routing.destination_map import DestinationMap
from gateway.stomp.protocol import StompServerFactory
from gateway.wire.frame import Frame
from tests.support.log_events import observer


def test_left_out_headers_are_logged_ten_frames_a_window_then_counted_only() -> None:
    """Before: a warning a MESSAGE, so a 1.2 producer putting a line break in a header wrote a log line
    for each message a 1.0 subscriber got (437 KB for 2,000)."""
    clock = Clock()
    registry = CollectorRegistry()
    factory = StompServerFactory(clock, DestinationMap({"embedded": EmbeddedBroker(clock=clock)}),
                                 registry=registry)
    events: list[dict[str, Any]] = []
    factory.log = Logger(observer=observer(events.append))
    frame = Frame("MESSAGE", {"message-id": "m1", "x-two": "line\nbreak"})
    for _ in range(25):
        factory.headers_dropped(frame, "1.0", ["x-two"])
    assert registry.get_sample_value("jmsgateway_stomp_headers_dropped_total", {"version": "1.0"}) == 25
    assert len(events) == 11
    assert "left out of more than 10 frames within 10s" in formatEvent(events[10])
    clock.advance(10)
    factory.headers_dropped(frame, "1.0", ["x-two"])
    assert len(events) == 12
