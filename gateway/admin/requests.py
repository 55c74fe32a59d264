"""What the admin endpoint accepts, checked before any resource (or the login guard) sees a request.

:class:`AdminRequest` is the site's request class:

- **Bounded bodies, refused before they are read.**  Only the console's
  actions read a body (a small JSON object), so a declared ``Content-Length`` above :data:`MAX_BODY` gets
  413 as soon as the headers are in, before one byte of the body is read
  (``twisted.web`` would otherwise read it all, spooling a large one to a
  temporary file, and only then ask for a login); a chunked body is cut off
  with 413 once it passes the bound.  Either way the connection closes.
- **Only its own host names and origins** (:class:`~gateway.admin.hosts.HostPolicy`, the site's
  ``host_policy``): a request whose ``Host`` is not in ``[admin] allowed_hosts`` gets 421 (a DNS
  rebinding page), one whose ``Origin`` is not allowed gets 403, GETs included.
- **No cross-site state changes.**  Every request that is not ``GET`` or
  ``HEAD`` must be one a web page cannot send without the browser asking the
  server first (a CORS preflight, which this endpoint never grants): it needs
  a JSON content type (``application/json``) or an ``X-Requested-With``
  header, and an ``Origin`` header, when present, must be the endpoint's own
  origin or one ``[admin] allowed_origins`` lists.  Otherwise: 403 with a JSON body saying why.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from twisted.logger import Logger
from twisted.web.server import Request

from gateway.admin.hosts import HostPolicy

MAX_BODY = 16 * 1024
"""Bytes of request body the admin endpoint takes: the console's JSON actions (a test message included)."""

SAFE_METHODS = frozenset({b"GET", b"HEAD"})
"""Methods that change nothing, so need no cross-site check."""

CUSTOM_HEADER = b"x-requested-with"
"""A header a web page cannot add to a cross-site request without a preflight."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, host: str, port: int | None) -> tuple[str, str, int]:
    return scheme, host.lower().rstrip("."), port if port is not None else _DEFAULT_PORTS.get(scheme, 0)


def same_origin(origin: str, host_header: str, secure: bool) -> bool:
    """Whether the ``Origin`` header names the endpoint reached through ``host_header``."""
    scheme = "https" if secure else "http"
    try:
        theirs = urlsplit(origin)
        ours = urlsplit(f"{scheme}://{host_header}")
        if not theirs.scheme or not theirs.hostname or not ours.hostname:
            return False
        return _origin(theirs.scheme, theirs.hostname, theirs.port) == _origin(scheme, ours.hostname, ours.port)
    except ValueError:  # a malformed port
        return False


def cross_site_refusal(method: bytes, headers: Any, secure: bool, origin_allowed: bool = False) -> str | None:
    """Why a request with ``method`` and ``headers`` (``twisted.web`` Headers) is refused, or None.

    :param origin_allowed: its ``Origin`` is one ``[admin] allowed_origins`` allows (checked by
        the :class:`HostPolicy`), so it need not be the very origin its ``Host`` header names.
    """
    if method in SAFE_METHODS:
        return None
    origin = headers.getRawHeaders(b"origin", [None])[0]
    if origin is not None and not origin_allowed:
        host = headers.getRawHeaders(b"host", [b""])[0]
        if not same_origin(origin.decode("latin-1"), host.decode("latin-1"), secure):
            return (f"a {method.decode('latin-1')} from the web origin {origin.decode('latin-1')!r} is refused: "
                    "the admin endpoint takes actions from its own origin only")
    content_type = headers.getRawHeaders(b"content-type", [b""])[0].split(b";")[0].strip().lower()
    if content_type != b"application/json" and not headers.hasHeader(CUSTOM_HEADER):
        return (f"a {method.decode('latin-1')} needs the content type application/json or an X-Requested-With "
                "header (so that no web page can send it cross-site)")
    return None


class AdminRequest(Request):
    """A ``twisted.web`` request with the admin endpoint's body bound and cross-site check."""

    log = Logger()
    max_body = MAX_BODY
    _body_refused = False
    _body_read = 0

    def gotLength(self, length: int | None) -> None:
        """The headers are in: refuse a declared body past the bound before reading any of it."""
        if length is not None and length > self.max_body:
            self._refuse_body(f"a request body of {length} bytes is more than the admin endpoint takes "
                              f"({self.max_body} bytes)")
            length = 0
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._body_refused:
            return
        self._body_read += len(data)
        if self._body_read > self.max_body:
            self._refuse_body(f"a request body of more than {self.max_body} bytes is more than the admin "
                              "endpoint takes")
            return
        super().handleContentChunk(data)

    def _refuse_body(self, reason: str) -> None:
        """Answer 413 straight on the connection and close it; the rest of the body is never read."""
        self._body_refused = True
        self.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after the refusal
        body = json.dumps({"error": reason}).encode("utf-8") + b"\n"
        transport: Any = self.channel.transport
        transport.write(
            b"HTTP/1.1 413 Content Too Large\r\ncontent-type: application/json; charset=utf-8\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode("ascii") + b"\r\n\r\n" + body
        )
        peer = transport.getPeer()
        self.log.info("admin: refused a request from {peer}: {reason}", peer=getattr(peer, "host", "?"),
                      reason=reason)
        self.channel.loseConnection()

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._body_refused:  # answered already; the connection is closing
            return
        super().requestReceived(command, path, version)

    def refusal(self) -> tuple[int, str] | None:
        """Why this request is refused before any resource sees it: ``(code, reason)``, or None.

        A Host not allowed (421), an Origin not allowed (403), a cross-site state change (403).
        """
        channel: Any = self.channel
        policy: HostPolicy | None = getattr(channel.site, "host_policy", None)
        origin_allowed = False
        if policy is not None:
            host = self.requestHeaders.getRawHeaders(b"host", [None])[0]
            misdirected = policy.host_refusal(host.decode("latin-1") if host is not None else None)
            if misdirected is not None:
                return 421, misdirected
            origin = self.requestHeaders.getRawHeaders(b"origin", [None])[0]
            if origin is not None:
                port = getattr(self.getHost(), "port", 0)
                foreign = policy.origin_refusal(origin.decode("latin-1"), self.isSecure(), port)
                if foreign is not None:
                    return 403, foreign
                origin_allowed = True
        cross_site = cross_site_refusal(self.method, self.requestHeaders, self.isSecure(), origin_allowed)
        return (403, cross_site) if cross_site is not None else None

    def process(self) -> None:
        refused = self.refusal()
        if refused is None:
            super().process()
            return
        code, reason = refused
        self.log.info("admin: refused {method} {path} from {peer} ({code}): {reason}",
                      method=self.method.decode("latin-1"), path=self.path.decode("latin-1", "replace"),
                      peer=getattr(self.getClientAddress(), "host", "?"), code=code, reason=reason)
        body = json.dumps({"error": reason}).encode("utf-8") + b"\n"
        self.setResponseCode(code, b"Misdirected Request" if code == 421 else None)
        self.setHeader(b"content-type", b"application/json; charset=utf-8")
        self.setHeader(b"cache-control", b"no-store")
        self.setHeader(b"content-length", str(len(body)).encode("ascii"))
        self.write(body)
        self.finish()
