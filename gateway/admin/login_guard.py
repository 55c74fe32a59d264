"""The admin endpoint's HTTP Basic login (``twisted.web.guard``), behind the failed-login throttle.

:class:`LoginGuard` builds, for each request, a ``twisted.web.guard``
:class:`~twisted.web.guard.HTTPAuthSessionWrapper` over the ``[auth]``
checkers, each wrapped in a :class:`ThrottledChecker` that runs every
password check through the gateway's
:class:`~gateway.security.login_throttle.LoginThrottle` (the one the STOMP listeners
use, listener kind ``admin``) as a STOMP CONNECT does: ``admit`` (a check in
flight counts as a failure until it succeeds), ``check`` (hashing bounded per
address), ``settle`` (a success forgives only that login's failures).  While
the address is locked out, or when too many of its logins are failing or
being checked, the request gets 429 with ``Retry-After`` before its password
is looked at.

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
from twisted.internet.defer import Deferred, fail, maybeDeferred
from twisted.python.failure import Failure
from twisted.web.guard import HTTPAuthSessionWrapper
from twisted.web.iweb import ICredentialFactory
from twisted.web.resource import Resource
from twisted.web.server import Request
from zope.interface import implementer

from gateway.admin.resources import json_body
from gateway.security.login_throttle import Listener, LoginThrottle

LISTENER: Listener = "admin"
"""The throttle's listener kind for admin logins (its ``jmsgateway_admin_logins_*`` metrics)."""


def client_address(request: Request) -> str:
    """The request's client address as the throttle keys it (the host, as STOMP sessions key theirs)."""
    address = request.getClientAddress()
    if isinstance(address, (IPv4Address, IPv6Address)):
        return str(address.host)
    return str(address)


class LoginThrottled(UnauthorizedLogin):
    """A login refused unchecked by the throttle (HTTP 429, not 401)."""

    def __init__(self, reason: str, seconds: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seconds = seconds


@implementer(ICredentialsChecker)
class ThrottledChecker:
    """``checker``, its checks admitted, bounded and settled by ``throttle`` for ``address``."""

    def __init__(self, checker: ICredentialsChecker, throttle: LoginThrottle, address: str) -> None:
        self.checker = checker
        self.throttle = throttle
        self.address = address
        self.credentialInterfaces = checker.credentialInterfaces

    def requestAvatarId(self, credentials: Any) -> Deferred[Any]:
        throttle, address = self.throttle, self.address
        login = _login_of(credentials)
        refusal = throttle.admit(address, login, LISTENER)
        if refusal is not None:
            return fail(LoginThrottled(refusal, throttle.locked_seconds(address) or throttle.lockout))

        def succeeded(avatar_id: Any) -> Any:
            throttle.settle(address, login, True, LISTENER)
            return avatar_id

        def failed(failure: Failure) -> Failure:
            if failure.check(UnauthorizedLogin):
                throttle.settle(address, login, False, LISTENER)
            else:  # (an error of the check itself is no guess: it only ends the attempt)
                throttle.settle(address, None, True, LISTENER)
            return failure

        return throttle.check(address, lambda: maybeDeferred(self.checker.requestAvatarId, credentials)) \
            .addCallbacks(succeeded, failed)


def _login_of(credentials: Any) -> str | None:
    """The login named by ``credentials`` (None for anonymous ones)."""
    username = getattr(credentials, "username", None)
    if isinstance(username, bytes):
        return username.decode("utf-8", "replace")
    return username if isinstance(username, str) else None


class ThrottledAuthWrapper(HTTPAuthSessionWrapper):
    """``HTTPAuthSessionWrapper`` answering a login the throttle refused with 429, not 401."""

    def _loginFailed(self, result: Failure) -> Any:
        refused = result.check(LoginThrottled)
        if refused is not None:
            error = result.value
            assert isinstance(error, LoginThrottled)
            return TooManyLogins(error.reason, error.seconds)
        return super()._loginFailed(result)


class TooManyLogins(Resource):
    """429 with ``Retry-After``: the client's address failed too many logins."""

    isLeaf = True

    def __init__(self, reason: str, seconds: float) -> None:
        super().__init__()
        self.reason = reason
        self.seconds = max(1, math.ceil(seconds))

    def getChildWithDefault(self, path: bytes, request: Request) -> Resource:
        return self  # whatever the path

    def render(self, request: Request) -> bytes:
        request.setHeader(b"retry-after", str(self.seconds).encode())
        return json_body(request, 429, {"error": self.reason})


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
            refusal = self.throttle.refusal(address, LISTENER)
            if refusal is not None:
                return TooManyLogins(refusal, self.throttle.locked_seconds(address) or 1)
            checkers = [ThrottledChecker(checker, self.throttle, address) for checker in checkers]
            return ThrottledAuthWrapper(Portal(self.realm, checkers), self.factories)
        return HTTPAuthSessionWrapper(Portal(self.realm, checkers), self.factories)
