"""A SEND naming a ``transformation`` whose transformer branches the message elsewhere is judged on
the branch: the login must hold ``write`` there too (docs/security.md, "A transformer the client
names").  Over an in-memory transport with a transformer that branches at once and one that answers
with a Deferred.

The hole this closes was found by tests/integration/test_feature_authorization_attacks.py: with
``[transform.options.route]`` configured for one queue's chain, eve named ``transformation:route`` on
a SEND to her own queue and the ``route`` transformer wrote it into ``/queue/secret.eu``.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.message.model import Message
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import build_portal
from gateway.security.authorization import DestinationAuthorizer, parse_authorization
from gateway.security.settings import AuthSettings
from gateway.stomp.protocol import StompServerFactory
from gateway.wire.frame import Frame
from tests.unit.test_session import Peer, connect

BRANCH = "/queue/secret.eu"


class Branching:
    """An inbound transformer that, for a SEND naming ``transformation:route``, sends the message
    to :data:`BRANCH` (as the shipped ``route`` does), at once or through a Deferred."""

    def __init__(self, clock: Clock, later: bool) -> None:
        self.clock = clock
        self.later = later

    def check_transformation(self, name: str | None) -> None:
        pass

    def passes_through(self, frame: Frame) -> bool:
        return "transformation" not in frame.headers

    def inbound(self, message: Message, session: Any, frame: Frame) -> Message | Deferred[Message]:
        if frame.headers.get("transformation") == "route":
            message.destination = BRANCH
        if not self.later:
            return message
        d: Deferred[Message] = Deferred()
        self.clock.callLater(0.01, d.callback, message)
        return d

    def outbound(self, message: Message, session: Any, subscription: Any) -> Message:
        return message


def gateway(later: bool) -> tuple[Clock, StompServerFactory]:
    clock = Clock()
    broker = EmbeddedBroker(clock)
    broker.start()
    portal = build_portal(AuthSettings(users={"eve": "e-pw", "root": "r-pw"}, allow_weak_passwords=True))
    authorizer = DestinationAuthorizer(parse_authorization([
        {"destination": "/*", "read": ["root"], "write": ["root"]},
        {"destination": "/queue/public.*", "read": ["eve"], "write": ["eve"]},
    ], {}))
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}), portal=portal, authorizer=authorizer,
                                 transformer=Branching(clock, later))
    return clock, factory


@pytest.mark.parametrize("later", [False, True], ids=["at-once", "deferred"])
def test_a_branch_the_client_asked_for_needs_write_there(later: bool) -> None:
    clock, factory = gateway(later)
    root = Peer(factory)
    connect(root, login="root", passcode="r-pw")
    root.send("SUBSCRIBE", {"destination": BRANCH, "id": "1"})
    eve = Peer(factory)
    connect(eve, login="eve", passcode="e-pw")
    eve.send("SEND", {"destination": "/queue/public.a", "transformation": "route", "receipt": "r1"}, b"routed")
    eve.send("SEND", {"destination": "/queue/public.a", "receipt": "r2"}, b"plain")
    clock.advance(1)
    error, receipt = eve.received()
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r1", error
    assert error.headers["message"] == f"not authorized to write {BRANCH}"
    assert (receipt.command, receipt.headers.get("receipt-id")) == ("RECEIPT", "r2")  # (still open, in order)
    assert not eve.transport.disconnecting
    assert [f for f in root.received() if f.command == "MESSAGE"] == []
    # root may write there: the same branch goes through
    root.send("SEND", {"destination": "/queue/public.a", "transformation": "route", "receipt": "r3"}, b"root's")
    clock.advance(1)
    got = root.received()
    assert [f.body for f in got if f.command == "MESSAGE"] == [b"root's"]
    assert [f.headers.get("receipt-id") for f in got if f.command == "RECEIPT"] == ["r3"]
