"""Issue 39: the Python calls one plain SEND makes between the decoded frame and the broker.

A plain SEND (no receipt, no transaction, no transformer applying, a queue) is handled by the
session through :class:`gateway.stomp.sending.Sender`, :func:`gateway.message.convert.frame_to_message`
and the receipt line before the broker takes it.  Each test pins a call that path no longer makes
(the calls are counted with :func:`sys.setprofile`) and checks that the unusual SEND still gets the
full treatment, so the shortcut changes no outcome."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from types import FrameType
from typing import Any

import pytest
from twisted.cred.portal import Portal
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.message.convert import frame_to_message
from gateway.message.model import BytesMessage, Message, TextMessage
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import build_portal
from gateway.security.settings import AuthSettings
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.session import StompSession
from gateway.wire.frame import Frame
from tests.unit.test_session import Peer, connect


@contextmanager
def python_calls() -> Iterator[list[str]]:
    """The gateway's Python functions called inside the block, as ``module:function`` (a dataclass's
    ``__init__`` counts in its class's module)."""
    called: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            module = frame.f_globals.get("__name__", "")
            if module.startswith("gateway."):
                called.append(f"{module}:{code.co_name}")

    sys.setprofile(profile)
    try:
        yield called
    finally:
        sys.setprofile(None)


def _send(headers: dict[str, str], body: bytes = b"hello") -> Frame:
    return Frame("SEND", {"destination": "/queue/a", **headers}, body)


@pytest.mark.parametrize("headers", [{}, {"content-length": "5"}, {"content-type": "text/plain", "content-length": "5"},
                                     {"persistent": "true"}])
def test_a_plain_send_becomes_a_message_without_a_python_call(headers: dict[str, str]) -> None:
    """frame_to_message makes the message's id and timestamp in place and the message without its
    constructor: no ``new_message_id``, ``now_millis``, dataclass ``__init__`` or header helper."""
    frame = _send(headers)
    with python_calls() as called:
        message = frame_to_message(frame)
    assert called == ["gateway.message.convert:frame_to_message"]
    assert message.message_id.startswith("ID:")


def _field_values(message: Message) -> dict[str, Any]:
    return {f.name: getattr(message, f.name) for f in fields(message)}


@pytest.mark.parametrize(("headers", "body", "expected"), [
    ({}, "grüße".encode(), TextMessage(destination="/queue/a", text="grüße")),
    ({"content-length": "3"}, b"a\x00b", BytesMessage(destination="/queue/a", body=b"a\x00b")),
    ({"content-type": "text/plain", "x": "1", "persistent": "true"}, b"t",
     TextMessage(destination="/queue/a", text="t", persistent=True,
                 properties={"content-type": "text/plain", "x": "1"})),
    ({"correlation-id": "c", "reply-to": "/queue/r", "type": "t", "priority": "0", "expires": "9",
      "amq-msg-type": "bytes", "receipt": "r", "transaction": "tx"}, b"b",
     BytesMessage(destination="/queue/a", body=b"b", correlation_id="c", reply_to="/queue/r", type="t", priority=0,
                  expiration=9)),
    ({"content-type": "text/plain; charset=ISO-8859-1"}, "é".encode("latin-1"),
     TextMessage(destination="/queue/a", text="é", properties={"content-type": "text/plain; charset=utf-8"})),
])
def test_every_field_is_set_as_the_constructor_sets_it(headers: dict[str, str], body: bytes,
                                                       expected: Message) -> None:
    """The fields set in place are every field of the class, with the constructor's defaults (a field
    added to the model and not to frame_to_message fails here)."""
    message = frame_to_message(_send(headers, body), now_ms=7)
    assert type(message) is type(expected)
    values = _field_values(message)
    assert values.pop("message_id").startswith("ID:")
    wanted = _field_values(expected)
    del wanted["message_id"]
    wanted["timestamp"] = 7
    assert values == wanted
    copy = message.copy()  # (every slot readable)
    assert _field_values(copy) == _field_values(message)


def test_message_ids_stay_unique_across_both_makers() -> None:
    """The SEND conversion and new_message_id share one count."""
    from gateway.message.model import new_message_id
    ids = [frame_to_message(_send({})).message_id if n % 2 else new_message_id() for n in range(100)]
    assert len(set(ids)) == 100


def _session(clock: Clock, broker: EmbeddedBroker, portal: Portal | None = None) -> tuple[Peer, StompSession]:
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}), portal=portal)
    peer = Peer(factory)
    assert connect(peer, login="alice", passcode="secret").command == "CONNECTED"
    session = peer.protocol.session
    assert session is not None
    return peer, session


def _queued(broker: EmbeddedBroker, destination: str) -> list[Message]:
    """What a consumer of ``destination`` gets (the queue's messages, in order)."""
    got: list[Message] = []
    peer_clock = Clock()
    factory = StompServerFactory(peer_clock, DestinationMap({"embedded": broker}))
    consumer = Peer(factory)
    connect(consumer)
    consumer.send("SUBSCRIBE", {"destination": destination, "id": "s", "ack": "auto"})
    for frame in consumer.received():
        assert frame.command == "MESSAGE"
        got.append(frame_to_message(Frame("SEND", frame.headers, frame.body)))
    return got


SESSION_SIDE = ("gateway.stomp.session", "gateway.stomp.sending", "gateway.stomp.sender_identity",
                "gateway.stomp.receipts", "gateway.routing.destination_map", "gateway.message.convert")
"""The modules of the SEND's way before the broker (the broker's own calls are pinned by
tests/unit/test_broker_hot_path.py)."""


def _send_side(called: list[str]) -> list[str]:
    return [name for name in called if name.startswith(SESSION_SIDE)]


def test_a_plain_send_makes_only_the_calls_it_needs(clock: Clock, broker: EmbeddedBroker) -> None:
    """No SEND handler look-up (``_on_send``), no ``stamp_sender`` (no portal, no identity header),
    no ``verified_login``, no second ``resolve`` of the same destination, no ``pending``/``_post``."""
    _peer, session = _session(clock, broker)
    session.frame_received(_send({"content-type": "text/plain", "content-length": "5"}))
    with python_calls() as called:
        session.frame_received(_send({"content-type": "text/plain", "content-length": "5"}))
    assert _send_side(called) == [
        "gateway.stomp.session:frame_received",
        "gateway.stomp.sending:send",
        "gateway.message.convert:frame_to_message",
        "gateway.stomp.receipts:__init__",  # (the Answer the broker settles)
        "gateway.stomp.receipts:settled",
        "gateway.stomp.receipts:place",
    ]
    assert [m.body_size() for m in _queued(broker, "/queue/a")] == [5, 5]


def test_identity_headers_are_still_removed_or_stamped(clock: Clock, broker: EmbeddedBroker) -> None:
    """Without a portal, a SEND's identity and credential headers are removed (stamp_sender runs for
    it); with one, every SEND is stamped with the verified login."""
    _peer, session = _session(clock, broker)
    with python_calls() as called:
        session.frame_received(_send({"JMSXUserID": "mallory", "user-id": "mallory", "passcode": "p", "x": "1"}))
    assert "gateway.stomp.sender_identity:stamp_sender" in called
    portal = build_portal(AuthSettings(users={"alice": "secret"}, allow_weak_passwords=True))
    _peer, verified = _session(clock, broker, portal)
    verified.frame_received(_send({"x": "2"}))
    verified.frame_received(_send({"JMSXUserID": "mallory", "login": "mallory", "x": "3"}))
    got = _queued(broker, "/queue/a")
    assert [m.properties for m in got] == [
        {"x": "1"},
        {"x": "2", "JMSXUserID": "alice", "user-id": "alice"},
        {"x": "3", "JMSXUserID": "alice", "user-id": "alice"},
    ]


def test_each_destination_is_resolved_as_before(clock: Clock, broker: EmbeddedBroker) -> None:
    """The sender remembers the last destination's answer only: SENDs alternating between two
    queues (and a temporary one) each reach their own."""
    _peer, session = _session(clock, broker)
    for n in range(6):
        session.frame_received(Frame("SEND", {"destination": f"/queue/d{n % 2}", "n": str(n)}, b"b"))
    assert [m.properties["n"] for m in _queued(broker, "/queue/d0")] == ["0", "2", "4"]
    assert [m.properties["n"] for m in _queued(broker, "/queue/d1")] == ["1", "3", "5"]


def test_a_send_before_connect_or_unknown_is_still_an_error(clock: Clock, broker: EmbeddedBroker) -> None:
    """The SEND shortcut in frame_received applies to a connected session only."""
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}))
    peer = Peer(factory)
    peer.send("SEND", {"destination": "/queue/a"}, b"x")
    error = peer.received()[-1]
    assert error.command == "ERROR" and error.headers["message"] == "not connected"
    connected, _connected_session = _session(clock, broker)
    connected.send("SNED", {"destination": "/queue/a"}, b"x")
    error = connected.received()[-1]
    assert error.command == "ERROR" and error.headers["message"] == "unknown command"


def test_a_producer_s_repeated_properties_are_read_once(clock: Clock, broker: EmbeddedBroker) -> None:
    """Issue 39: the session's Sender keeps the last SEND's properties (PropertyMemo): a SEND with the
    same headers does not read them again; one with other headers does, and both messages carry theirs."""
    _peer, session = _session(clock, broker)
    headers = {"content-type": "text/plain", "app": "x", "content-length": "5"}
    session.frame_received(_send(headers))
    with python_calls() as called:
        session.frame_received(_send(headers))
    assert "gateway.message.convert:read" not in called
    with python_calls() as called:
        session.frame_received(_send({**headers, "app": "y"}))
    assert "gateway.message.convert:read" in called
    assert [m.properties for m in _queued(broker, "/queue/a")] == [
        {"content-type": "text/plain", "app": "x"}, {"content-type": "text/plain", "app": "x"},
        {"content-type": "text/plain", "app": "y"}]
