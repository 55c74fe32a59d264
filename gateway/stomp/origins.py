"""Which web origins may open a STOMP-over-WebSocket connection (``[gateway] allowed_origins``).

A browser sends the page's origin (``Origin: https://app.example.com``) on a
WebSocket handshake, and sends the user's cookies and client certificate with
it whatever page asked: without a check, any web page could drive a browser
into the gateway as its user (cross-site WebSocket hijacking).  The allow-list
holds ``scheme://host[:port]`` entries or ``*`` (every origin); empty (the
default) means same-origin only: the Origin's host and port are the request's
``Host``.  A handshake without an ``Origin`` header (a program, not a browser
page) is allowed.  Pure functions: the WebSocket factory refuses with HTTP 403.
"""

from __future__ import annotations

from urllib.parse import urlsplit

ANY_ORIGIN = "*"
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}

Origin = tuple[str, str, int]
"""(scheme, host, port), lower case, the scheme's default port filled in."""


def parse_origin(text: str) -> Origin:
    """``scheme://host[:port]`` as an :data:`Origin` (ValueError saying what is wrong)."""
    parts = urlsplit(text.strip())
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"{text!r} is not scheme://host[:port] with scheme http, https, ws or wss")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or not parts.hostname:
        raise ValueError(f"{text!r} is not scheme://host[:port] (no path, query or user)")
    port = parts.port  # (ValueError for a bad port)
    return scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme]


def parse_allowed(entries: list[str]) -> frozenset[Origin] | None:
    """The configured list as origins; None when it holds ``*`` (every origin)."""
    if ANY_ORIGIN in entries:
        return None
    return frozenset(parse_origin(entry) for entry in entries)


def origin_refusal(origin: str | None, host: str | None, allowed: frozenset[Origin] | None,
                   secure: bool) -> str | None:
    """Why a handshake with ``Origin: origin`` to ``Host: host`` is refused, or None.

    :param allowed: :func:`parse_allowed` of the configuration (empty: same-origin only).
    :param secure: whether the listener is TLS (the ``Host`` header's default port is 443, else 80).
    """
    if origin is None or allowed is None:
        return None
    try:
        scheme, origin_host, origin_port = parse_origin(origin)
    except ValueError:
        return f"origin {origin!r} is not allowed ([gateway] allowed_origins)"
    if allowed:
        if (scheme, origin_host, origin_port) in allowed:
            return None
        return f"origin {origin!r} is not allowed ([gateway] allowed_origins)"
    if host is not None:
        try:
            request = urlsplit(f"//{host.strip()}")
            request_port = request.port if request.port is not None else (443 if secure else 80)
            if request.hostname is not None and request.hostname.lower() == origin_host \
                    and request_port == origin_port:
                return None
        except ValueError:
            pass
    return (f"origin {origin!r} is not this listener's own ({host!r}); list it in [gateway] allowed_origins "
            "to allow it")
