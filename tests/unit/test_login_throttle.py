"""The failed-login throttle (issue 33 #5, #6, #7): attempts in flight count, a success forgives
only its own login, hashing work is bounded per address - on the throttle alone and through the
STOMP session with a checker whose answers the test releases."""

from __future__ import annotations

from typing import Any

from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import IUsernamePassword
from twisted.cred.error import UnauthorizedLogin
from twisted.cred.portal import Portal
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from zope.interface import implementer

from gateway.broker.broker import EmbeddedBroker
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import StompRealm
from gateway.security.login_throttle import CHECKS_PER_ADDRESS, LoginThrottle
from gateway.stomp.protocol import StompServerFactory
from gateway.wire.codec import FrameDecoder
from tests.unit.test_session import Peer

PASSWORDS = {"root": "r00t", "eve": "eve-pw"}


@implementer(ICredentialsChecker)
class HeldChecker:
    """Answers each check only when the test releases it (a slow bcrypt in a thread)."""

    credentialInterfaces = (IUsernamePassword,)

    def __init__(self) -> None:
        self.held: list[tuple[Any, Deferred[bytes | tuple[()]]]] = []

    def requestAvatarId(self, credentials: Any) -> Deferred[bytes | tuple[()]]:
        d: Deferred[bytes | tuple[()]] = Deferred()
        self.held.append((credentials, d))
        return d

    def release_all(self) -> None:
        while self.held:
            credentials, d = self.held.pop(0)
            login = credentials.username.decode()
            if PASSWORDS.get(login) == credentials.password.decode():
                d.callback(login.encode())
            else:
                d.errback(UnauthorizedLogin(login))


def factory_with(clock: Clock, broker: EmbeddedBroker, checker: HeldChecker, throttle: LoginThrottle,
                 ) -> StompServerFactory:
    return StompServerFactory(clock, DestinationMap({"embedded": broker}), portal=Portal(StompRealm(), [checker]),
                              throttle=throttle)


def connect_from(factory: StompServerFactory, login: str, passcode: str, host: str = "127.0.0.1") -> Peer:
    peer = Peer.__new__(Peer)
    peer.protocol = factory.buildProtocol(None)
    peer.transport = StringTransport(peerAddress=IPv4Address("TCP", host, 40000))
    peer.protocol.makeConnection(peer.transport)
    peer.decoder = FrameDecoder(version="1.2")
    peer.frames = []
    peer.send("CONNECT", {"accept-version": "1.2", "login": login, "passcode": passcode})
    return peer


def test_concurrent_connects_get_at_most_max_checks_and_the_right_password_is_refused_too(
        clock: Clock, broker: EmbeddedBroker) -> None:
    """#5: 40 CONNECTs at once, max 5: 5 checks; the others (the right password, #36, too) refused unchecked."""
    checker = HeldChecker()
    factory = factory_with(clock, broker, checker, LoginThrottle(clock, max_failures=5))
    peers = [connect_from(factory, "root", PASSWORDS["root"] if n == 35 else f"guess-{n}") for n in range(40)]
    assert len(checker.held) <= 5
    checker.release_all()
    answers = [peer.received()[0] for peer in peers]
    assert not [a for a in answers if a.command == "CONNECTED"]
    assert sum(a.headers["message"] == "too many failed logins" for a in answers) >= 35
    later = connect_from(factory, "root", PASSWORDS["root"])
    checker.release_all()
    assert later.received()[0].headers["message"] == "too many failed logins"


def test_a_success_of_another_login_does_not_reset_the_count(clock: Clock, broker: EmbeddedBroker) -> None:
    """#6: wrong root passwords with a successful login of eve's own account every 2 guesses."""
    checker = HeldChecker()
    factory = factory_with(clock, broker, checker, LoginThrottle(clock, max_failures=5))
    answers: list[str | None] = []
    for guess in range(8):
        if guess % 2 == 0:
            eve = connect_from(factory, "eve", PASSWORDS["eve"])
            checker.release_all()
            answers.append(eve.received()[0].command)
        root = connect_from(factory, "root", f"guess-{guess}")
        checker.release_all()
        answers.append(root.received()[0].headers.get("message"))
    assert answers.count("too many failed logins") >= 3, answers
    right = connect_from(factory, "root", PASSWORDS["root"])
    checker.release_all()
    assert right.received()[0].headers["message"] == "too many failed logins"


def test_a_success_forgives_that_logins_own_failures() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock, max_failures=3)
    for _ in range(2):
        assert throttle.admit("10.0.0.1", "alice") is None
        throttle.settle("10.0.0.1", "alice", False)
    assert throttle.admit("10.0.0.1", "alice") is None
    throttle.settle("10.0.0.1", "alice", True)
    for _ in range(2):
        assert throttle.admit("10.0.0.1", "bob") is None
        throttle.settle("10.0.0.1", "bob", False)
    assert throttle.refusal("10.0.0.1") is None  # alice's two were forgiven: bob's two alone


def test_hashing_work_is_bounded_per_address() -> None:
    """#7: at most CHECKS_PER_ADDRESS checks of one address run at once; another address's check
    starts at once."""
    throttle = LoginThrottle(Clock(), max_failures=0)
    running: list[Deferred[str]] = []

    def slow() -> Deferred[str]:
        d: Deferred[str] = Deferred()
        running.append(d)
        return d

    results = [throttle.check("10.0.0.1", slow) for _ in range(150)]
    assert len(running) == CHECKS_PER_ADDRESS
    other = throttle.check("10.0.0.2", slow)
    assert len(running) == CHECKS_PER_ADDRESS + 1
    running.pop().callback("other")
    assert other.result == "other"
    running.pop(0).callback("first")
    assert results[0].result == "first"
    assert len(running) == CHECKS_PER_ADDRESS  # the next one of 10.0.0.1 took the free turn
    assert not results[CHECKS_PER_ADDRESS + 1].called


def test_waiting_checks_are_bounded(clock: Clock) -> None:
    throttle = LoginThrottle(clock, max_failures=0)
    refusals = []
    for _ in range(100):
        refusal = throttle.admit("10.0.0.1", "x")
        if refusal is None:
            throttle.check("10.0.0.1", Deferred)
        else:
            refusals.append(refusal)
    assert refusals and "being checked" in refusals[0]
