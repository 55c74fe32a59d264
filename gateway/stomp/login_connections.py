"""The STOMP connections each verified login holds open, against its ``max_connections``
(``[auth.limits]``, :mod:`gateway.security.quotas`; Artemis's and RabbitMQ's per-user connection limit).

Owns the count per login (only logins holding a connection) and the refusal text; the session asks it
once a login is verified, before CONNECTED, and tells it when that connection ends.  Without ``[auth]``
a CONNECT's login is the client's word and nothing is counted.
"""

from __future__ import annotations

from twisted.logger import Logger

from gateway.security.quotas import LoginQuotas


class LoginConnections:
    """Open connections per verified login, judged against the logins' ``max_connections``."""

    log = Logger()

    def __init__(self, quotas: LoginQuotas | None = None) -> None:
        self.quotas = quotas or LoginQuotas()
        self.open: dict[str, int] = {}
        """Login -> its connections that got CONNECTED and are not closed yet."""
        self.refused = 0

    def admit(self, login: str) -> str | None:
        """Count one more connection of ``login`` and return None; or, past its ``max_connections``,
        count nothing and return why it is refused."""
        held = self.open.get(login, 0)
        limit = self.quotas.max_connections(login)
        if limit is not None and held >= limit:
            self.refused += 1
            self.log.info("connection of login {login} refused: it holds {held} connections, its limit "
                          "([auth.limits] max_connections)", login=login, held=held)
            return (f"login {login!r} holds {held} connections and its limit is {limit} ([auth.limits] "
                    "max_connections); close one, or try again later")
        self.open[login] = held + 1
        return None

    def closed(self, login: str) -> None:
        """A connection :meth:`admit` counted for ``login`` ended."""
        left = self.open.get(login, 0) - 1
        if left > 0:
            self.open[login] = left
        else:
            self.open.pop(login, None)
