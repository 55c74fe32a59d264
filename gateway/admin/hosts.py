"""The Host and Origin headers the admin endpoint answers (no DNS rebinding, no foreign page).

A web page on ``attacker.example`` whose name is rebound to 127.0.0.1 reaches
the endpoint with ``Host: attacker.example:PORT``: :class:`HostPolicy` refuses
every request (GET too, with or without ``[auth]``) whose Host is not in
``[admin] allowed_hosts`` with ``421 Misdirected Request``, and every request
whose ``Origin`` is not an allowed origin with 403.

Defaults, from the ``[admin] listen`` endpoints: each listener's interface
address; ``localhost``, ``127.0.0.1`` and ``::1`` when it listens on loopback
or on all interfaces; the machine's host name (its fully qualified name and
the addresses it resolves to) when it listens on all interfaces.  The allowed origins default to
``http(s)://HOST:PORT`` for an allowed host and the port the request came in
on (so a listener on port 0 needs no configuration).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _normal(host: str) -> str:
    return host.strip("[]").lower().rstrip(".")


def listener_interface(endpoint: str) -> str:
    """The interface a Twisted server endpoint string listens on (``""``: all interfaces)."""
    parts, current, escaped = [], [], False
    for char in endpoint:  # ":" separates arguments, "\\:" is a colon inside one
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    for part in parts[1:]:
        if part.startswith("interface="):
            return _normal(part.split("=", 1)[1])
    return ""


def default_hosts(endpoints: Iterable[str]) -> frozenset[str]:
    """The host names a request to listeners on ``endpoints`` may name by default."""
    hosts: set[str] = set()
    for endpoint in endpoints:
        interface = listener_interface(endpoint)
        everywhere = interface in ("", "0.0.0.0", "::")
        try:
            loopback = ipaddress.ip_address(interface).is_loopback
        except ValueError:
            loopback = interface == "localhost"
        if interface:
            hosts.add(interface)
        if loopback or everywhere:
            hosts.update(LOOPBACK_NAMES)
        if everywhere:
            hosts.update(_own_names())
    return frozenset(hosts)


def _own_names() -> set[str]:
    """The machine's host name, its fully qualified name and the addresses the name resolves to
    (from the local resolver, best effort: a name that does not resolve adds nothing)."""
    names = {_normal(name) for name in (socket.gethostname(), socket.getfqdn()) if name}
    try:
        _, aliases, addresses = socket.gethostbyname_ex(socket.gethostname())
    except OSError:
        return names
    return names | {_normal(name) for name in (*aliases, *addresses) if name}


def split_host(host_header: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a Host header (``name``, ``name:port``, ``[::1]:port``), None when malformed."""
    try:
        parts = urlsplit(f"//{host_header}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path or parts.query:
        return None
    return _normal(parts.hostname), port


def _origin(origin: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    scheme = parts.scheme.lower()
    return scheme, _normal(parts.hostname), port if port is not None else _DEFAULT_PORTS.get(scheme, 0)


@dataclass(frozen=True)
class HostPolicy:
    """Allowed Host names and Origins (``origins`` None: the endpoint's own)."""

    hosts: frozenset[str]
    origins: frozenset[tuple[str, str, int]] | None = None

    @classmethod
    def from_settings(cls, listen: Iterable[str], hosts: Iterable[str] | None,
                      origins: Iterable[str] | None) -> HostPolicy:
        allowed = frozenset(_normal(h) for h in hosts) if hosts is not None else default_hosts(listen)
        parsed = None
        if origins is not None:
            parsed = frozenset(o for o in (_origin(origin) for origin in origins) if o is not None)
        return cls(allowed, parsed)

    def host_refusal(self, host_header: str | None) -> str | None:
        """Why a request with this Host header is misdirected (421), or None."""
        if host_header is None:
            return "a request needs a Host header naming the admin endpoint"
        split = split_host(host_header)
        if split is None or split[0] not in self.hosts:
            return (f"the admin endpoint does not answer for the host {host_header!r} "
                    "(not in [admin] allowed_hosts)")
        return None

    def origin_refusal(self, origin: str, secure: bool, port: int) -> str | None:
        """Why a request from the web origin ``origin`` is refused (403), or None; ``port``: the port the
        request came in on."""
        theirs = _origin(origin)
        if theirs is not None:
            if self.origins is not None:
                if theirs in self.origins:
                    return None
            elif theirs[0] == ("https" if secure else "http") and theirs[1] in self.hosts and theirs[2] == port:
                return None
        return f"requests from the web origin {origin!r} are refused (not in [admin] allowed_origins)"
