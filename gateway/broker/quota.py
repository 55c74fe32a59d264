"""How many destinations the embedded broker holds, and which login holds each queue it created:
``[broker] max_destinations`` and the logins' ``max_queues`` (:mod:`gateway.security.quotas`).

Owns the counts and the judgement of one more creation (:meth:`DestinationQuota.admit`, which
raises :class:`~gateway.errors.LimitReached`).  It creates and deletes nothing: the destinations
(:mod:`gateway.broker.destinations`) tell it what they made and dropped.  Only creations are judged:
what exists keeps working whatever the limits become (a SIGHUP that lowers one refuses the next
creation, it deletes nothing).
"""

from __future__ import annotations

from twisted.logger import Logger

from gateway.errors import LimitReached
from gateway.security.quotas import LoginQuotas

CREATOR_PROPERTY = "JMSXUserID"
"""The property that names a SEND's verified login (the STOMP session stamps it, removing any the
client wrote: gateway/stomp/sender_identity.py): a queue a SEND creates is held by that login."""


class DestinationQuota:
    """The destinations one broker holds, counted, and the queues each login holds.

    :param max_destinations: at most this many destinations (0: no cap).
    :param logins: the logins' ``max_queues`` (read at each creation: a reload replaces them).
    """

    log = Logger()

    def __init__(self, max_destinations: int = 0, logins: LoginQuotas | None = None) -> None:
        self.max_destinations = max_destinations
        self.logins = logins or LoginQuotas()
        self.count = 0
        """Destinations held: queues, durable subscriptions, temporary topics."""
        self.creators: dict[str, str] = {}
        """Key of a destination a login created -> that login."""
        self.held: dict[str, int] = {}
        """Login -> how many destinations it created that exist (only logins holding one)."""
        self.refused = 0
        """Creations refused by a limit since the start."""
        self._warned = False
        """A refusal was logged since the last creation (one warning per episode, not per frame)."""

    def admit(self, name: str, login: str | None) -> None:
        """Nothing when ``login`` (None: no login, or the broker itself) may create the destination
        ``name``; else :class:`LimitReached` naming it and the limit."""
        self.admit_all([(name, login)])

    def admit_all(self, wanted: list[tuple[str, str | None]]) -> None:
        """Nothing when every destination of ``wanted`` ((name, login), distinct names that do not exist
        yet) may be created, all of them together; else :class:`LimitReached` naming the first one past
        a limit.  A batch (a COMMIT's SENDs, a composite SEND's parts) is judged whole before any of
        its queues is made, so a refused one leaves none behind."""
        limit = self.max_destinations
        count = self.count
        held: dict[str, int] = {}
        for name, login in wanted:
            if limit and count >= limit:
                self._refuse(f"{name} was not created: the embedded broker holds {count} destinations and its "
                             f"limit is {limit} ([broker] max_destinations)")
            count += 1
            if login is None:
                continue
            holds = held.get(login, self.held.get(login, 0))
            max_queues = self.logins.max_queues(login)
            if max_queues is not None and holds >= max_queues:
                self._refuse(f"{name} was not created: login {login!r} holds {holds} queues and its "
                             f"limit is {max_queues} ([auth.limits] max_queues)")
            held[login] = holds + 1

    def _refuse(self, why: str) -> None:
        self.refused += 1
        if not self._warned:
            self._warned = True
            self.log.warn("{why}; further refusals are counted (jmsgateway_broker_destinations_refused), not logged, "
                          "until a destination is created", why=why)
        raise LimitReached(f"{why}; existing destinations work as before")

    def created(self, key: str, login: str | None) -> None:
        """The destination ``key`` exists from now on, created by ``login`` (None: nobody's)."""
        self.count += 1
        self._warned = False
        if login is not None:
            self.creators[key] = login
            self.held[login] = self.held.get(login, 0) + 1

    def removed(self, key: str) -> None:
        """The destination ``key`` is gone."""
        self.count -= 1
        login = self.creators.pop(key, None)
        if login is not None:
            left = self.held[login] - 1
            if left:
                self.held[login] = left
            else:
                del self.held[login]

    def creator(self, key: str) -> str | None:
        """The login that created ``key`` (None: nobody, or not known)."""
        return self.creators.get(key)
