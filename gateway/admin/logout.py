"""``/logout``: how a browser forgets the HTTP Basic login of the admin endpoint.

Basic authentication has no session to end: the browser keeps the login it
was given for the realm and sends it with every request.  ``GET /logout``
answers ``401`` with the realm's ``WWW-Authenticate`` challenge whatever the
request carried, so the browser drops the login it sent as rejected (it asks
again at the next page) and shows the page saying so.  The page checks no
password: it is no failed login and counts for no lockout.  Without
``[auth]`` logins there is nothing to forget: ``200`` saying so.
"""

from __future__ import annotations

from twisted.web.resource import Resource
from twisted.web.server import Request

REALM = b"jmsgateway admin"

PAGE_HEADERS = {
    b"content-type": b"text/html; charset=utf-8",
    b"cache-control": b"no-store",
    b"content-security-policy": b"default-src 'self'; frame-ancestors 'none'",
    b"x-frame-options": b"DENY",
    b"x-content-type-options": b"nosniff",
}

LOGGED_OUT = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>jmsgateway: logged out</title></head>
<body style="font-family: system-ui, sans-serif; margin: 40px">
<h1 id="logged-out">You are logged out</h1>
<p>The browser has dropped your login to the jmsgateway admin endpoint.
<a href="/console/">Log in again</a> (the browser asks for a login and password).</p>
</body></html>
"""

NO_LOGINS = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>jmsgateway: no logins</title></head>
<body style="font-family: system-ui, sans-serif; margin: 40px">
<h1 id="no-logins">Nothing to log out of</h1>
<p>This admin endpoint has no logins (no [auth] users): <a href="/console/">back to the console</a>.</p>
</body></html>
"""


class LogoutPage(Resource):
    """``GET /logout``: 401 with the realm's challenge and a page saying the login is forgotten
    (``has_logins``), else 200 saying there is nothing to forget."""

    isLeaf = True

    def __init__(self, has_logins: bool, realm: bytes = REALM) -> None:
        super().__init__()
        self.has_logins = has_logins
        self.realm = realm

    def render_GET(self, request: Request) -> bytes:
        for name, value in PAGE_HEADERS.items():
            request.setHeader(name, value)
        if not self.has_logins:
            request.setResponseCode(200)
            return NO_LOGINS
        request.setResponseCode(401)
        request.setHeader(b"www-authenticate", b'Basic realm="' + self.realm + b'"')
        return LOGGED_OUT

    def render_HEAD(self, request: Request) -> bytes:
        return self.render_GET(request)
