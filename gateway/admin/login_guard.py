"""The admin endpoint's HTTP Basic login (``twisted.web.guard``), behind the failed-login throttle.

:class:`LoginGuard` builds, for each request, a ``twisted.web.guard``
:class:`~twisted.web.guard.HTTPAuthSessionWrapper` over the ``[auth]``
checkers, each wrapped in a :class:`ThrottledChecker` that reports the
outcome for the request's client address to the gateway's
:class:`~gateway.login_throttle.LoginThrottle` (the one the STOMP listeners
use, listener kind ``admin``).  While that address is locked out the request
gets 429 with ``Retry-After`` before any credentials are looked at.

The address is the TCP peer: a ``X-Forwarded-For`` header is not trusted (a
client could name any address in it).  It owns no login logic of its own:
passwords are checked by the checkers, lockouts decided by the throttle.
"""

from __future__ import annotations

import math
from typing import Any

from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.error import UnauthorizedLogin
from twisted.cred.portal import IRealm, Portal
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.python.failure import Failure
from twisted.web.guard import HTTPAuthSessionWrapper
from twisted.web.iweb import ICredentialFactory
from twisted.web.resource import Resource
from twisted.web.server import Request
from zope.interface import implementer

from gateway.admin.resources import json_body
from gateway.login_throttle import Listener, LoginThrottle

LISTENER: Listener = "admin"
"""The throttle's listener kind for admin logins (its ``jmsgateway_admin_logins_*`` metrics)."""


def client_address(request: Request) -> str:
    """The request's client address as the throttle keys it (the host, as STOMP sessions key theirs)."""
    address = request.getClientAddress()
    if isinstance(address, (IPv4Address, IPv6Address)):
        return str(address.host)
    return str(address)


@implementer(ICredentialsChecker)
class ThrottledChecker:
    """``checker``, reporting each outcome for ``address`` to ``throttle``."""

    def __init__(self, checker: ICredentialsChecker, throttle: LoginThrottle, address: str) -> None:
        self.checker = checker
        self.throttle = throttle
        self.address = address
        self.credentialInterfaces = checker.credentialInterfaces

    def requestAvatarId(self, credentials: Any) -> Deferred[Any]:
        def succeeded(avatar_id: Any) -> Any:
            self.throttle.login_succeeded(self.address)
            return avatar_id

        def failed(failure: Failure) -> Failure:
            if failure.check(UnauthorizedLogin):
                self.throttle.login_failed(self.address, LISTENER)
            return failure

        d: Deferred[Any] = maybeDeferred(self.checker.requestAvatarId, credentials)
        return d.addCallbacks(succeeded, failed)


class TooManyLogins(Resource):
    """429 with ``Retry-After``: the client's address failed too many logins."""

    isLeaf = True

    def __init__(self, address: str, seconds: float) -> None:
        super().__init__()
        self.address = address
        self.seconds = max(1, math.ceil(seconds))

    def getChildWithDefault(self, path: bytes, request: Request) -> Resource:
        return self  # whatever the path

    def render(self, request: Request) -> bytes:
        request.setHeader(b"retry-after", str(self.seconds).encode())
        return json_body(request, 429, {"error": f"too many failed logins from {self.address}; try again in "
                                                 f"{self.seconds}s ([auth] max_failed_logins)"})


class LoginGuard:
    """HTTP Basic login to ``realm`` through ``checkers``, throttled per client address.

    :param throttle: the gateway's failed-login throttle (None: logins are never throttled).
    """

    def __init__(self, realm: IRealm, checkers: list[ICredentialsChecker], factories: list[ICredentialFactory],
                 throttle: LoginThrottle | None) -> None:
        self.realm = realm
        self.checkers = list(checkers)
        self.factories = list(factories)
        self.throttle = throttle

    def resource_for(self, request: Request) -> Any:
        """What serves ``request``: the guard, or 429 while its address is locked out."""
        checkers = self.checkers
        if self.throttle is not None:
            address = client_address(request)
            seconds = self.throttle.locked_for(address, LISTENER)
            if seconds is not None:
                return TooManyLogins(address, seconds)
            checkers = [ThrottledChecker(checker, self.throttle, address) for checker in checkers]
        return HTTPAuthSessionWrapper(Portal(self.realm, checkers), self.factories)
