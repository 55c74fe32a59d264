"""The admin endpoint's HTTP Basic login behind the throttle (issue 33 #5, #6 on the admin side): a
check in flight counts as a failure (refused unchecked: 429), hashing is bounded per address, and a
success (even of a login the realm then refuses) forgives only that login's failures."""

from __future__ import annotations

import base64
from typing import Any, cast

from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import IUsernamePassword
from twisted.cred.error import UnauthorizedLogin
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.web.guard import BasicCredentialFactory
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request
from twisted.web.test.requesthelper import DummyRequest
from zope.interface import implementer

from gateway.admin.login_guard import LoginGuard
from gateway.admin.site import AdminRealm
from gateway.security.login_throttle import CHECKS_PER_ADDRESS, LoginThrottle

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


class Page(Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return b"ok"


def guard_with(checker: HeldChecker, throttle: LoginThrottle, users: tuple[str, ...] = ()) -> LoginGuard:
    root = Resource()
    root.putChild(b"status", Page())
    return LoginGuard(AdminRealm(root, users), [checker], [BasicCredentialFactory("test")], throttle)


def request(guard: LoginGuard, login: str, password: str) -> DummyRequest:
    """A GET /status with Basic ``login:password``, rendered through ``guard`` (its answer may wait)."""
    req = DummyRequest([])
    req.prepath = [b"status"]
    req.client = IPv4Address("TCP", "10.0.0.1", 40000)
    req.requestHeaders.setRawHeaders(b"authorization",
                                     [b"Basic " + base64.b64encode(f"{login}:{password}".encode())])
    # (DummyRequest stands in for twisted.web's Request: it has what the guard reads)
    resource = guard.resource_for(cast(Request, req)).getChildWithDefault(b"status", req)
    result = resource.render(req)
    if result is not NOT_DONE_YET:
        req.write(result)
        req.finish()
    return req


def status(req: DummyRequest) -> int:
    assert req.finished, "no answer yet"
    return req.responseCode or 200


def test_checks_in_flight_count_and_the_right_password_is_refused_unchecked() -> None:
    checker, throttle = HeldChecker(), LoginThrottle(Clock(), max_failures=5)
    requests = [request(guard_with(checker, throttle), "root", "r00t" if n == 7 else f"guess-{n}")
                for n in range(10)]
    assert [bool(req.finished) for req in requests] == [False] * 5 + [True] * 5
    assert {status(req) for req in requests[5:]} == {429}  # #7, the right password, included
    assert requests[7].responseHeaders.getRawHeaders(b"retry-after")
    checker.release_all()
    assert [status(req) for req in requests[:5]] == [401] * 5
    assert status(request(guard_with(checker, throttle), "root", "r00t")) == 429  # now locked out


def test_hashing_is_bounded_per_address() -> None:
    checker, throttle = HeldChecker(), LoginThrottle(Clock(), max_failures=0)  # (lockout off: bounded anyway)
    requests = [request(guard_with(checker, throttle), "root", f"guess-{n}") for n in range(4)]
    assert len(checker.held) == CHECKS_PER_ADDRESS
    while checker.held:
        checker.release_all()
    assert [status(req) for req in requests] == [401] * 4


def test_a_valid_login_the_realm_refuses_does_not_forgive_another_logins_failures() -> None:
    checker, throttle = HeldChecker(), LoginThrottle(Clock(), max_failures=5)
    guard = guard_with(checker, throttle, users=("root",))
    statuses = []
    for number in range(8):
        if number and number % 2 == 0:
            eve = request(guard, "eve", "eve-pw")  # right password, not in [admin] users: 401
            checker.release_all()
            assert status(eve) == (401 if number <= 4 else 429)  # (429 once root's 5 failures locked it)
        req = request(guard, "root", f"guess-{number}")
        checker.release_all()
        statuses.append(status(req))
    assert statuses == [401] * 5 + [429] * 3


def test_a_success_forgives_that_logins_own_failures() -> None:
    checker, throttle = HeldChecker(), LoginThrottle(Clock(), max_failures=3)
    guard = guard_with(checker, throttle)
    for login, password in [("root", "x"), ("root", "y"), ("root", "r00t"), ("root", "z"), ("root", "w")]:
        req = request(guard, login, password)
        checker.release_all()
        assert status(req) == (200 if password == "r00t" else 401)
