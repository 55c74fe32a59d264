"""A connection's temporary destinations: ``/temp-queue/x`` as the client names it, and the
broker's ``/remote-temp-queue/<session>.x`` that exists as long as the connection does.

Owns the names this connection created; the embedded broker creates and deletes them.
"""

from __future__ import annotations

from gateway.interfaces import IConnector

TEMP_PREFIXES = {"/temp-queue/": "/remote-temp-queue/", "/temp-topic/": "/remote-temp-topic/"}
CLIENT_PREFIXES = tuple(TEMP_PREFIXES)
"""How a client names a temporary destination of its own."""
SERVER_PREFIXES = tuple(TEMP_PREFIXES.values())


class TemporaryDestinations:
    """The temporary destinations of one connection."""

    def __init__(self, session_id: str, embedded: IConnector) -> None:
        self.session_id = session_id
        self.embedded = embedded
        self.names: set[str] = set()
        """The broker's names of the destinations this connection created."""
        self.login: str | None = None
        """The connection's verified login, which holds what it creates (set at CONNECTED)."""

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def server_destination(self, destination: str, *, create: bool) -> str:
        """Map a client's ``/temp-queue/x`` to this connection's private queue (``create``: made now
        if it does not exist); any other name is returned as it is."""
        if not destination.startswith("/temp-"):
            return destination
        for prefix, remote in TEMP_PREFIXES.items():
            if destination.startswith(prefix):
                name = f"{remote}{self.session_id}.{destination[len(prefix):]}"
                if create and name not in self.names:
                    self.embedded.create_temporary(name, self.login)  # type: ignore[attr-defined]  # (LimitReached)
                    self.names.add(name)
                return name
        return destination

    def delete_all(self) -> None:
        """The connection ended: its temporary destinations go with it."""
        for name in self.names:
            self.embedded.delete_destination(name)  # type: ignore[attr-defined]
        self.names.clear()
