"""Heart-beats of one STOMP connection: negotiation, the outgoing beat and the incoming deadline.

Owns the two negotiated intervals, when the connection last read and last wrote, and the two
timers.  It writes nothing itself and never closes the connection: it asks its
:class:`HeartBeatOwner`.
"""

from __future__ import annotations

from typing import Protocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from gateway.stomp.errors import StompError


class HeartBeatOwner(Protocol):
    """What the heart-beats ask of their session."""

    def beating(self) -> bool:
        """Whether the connection is connected (the timers stop otherwise)."""
        ...

    def reading_held(self) -> bool:
        """Whether the session stopped reading from the client (its silence then says nothing)."""
        ...

    def send_heartbeat(self) -> None:
        """Write one heart-beat (an EOL) to the client."""
        ...

    def heartbeat_missed(self, silent: float, limit: float) -> None:
        """Nothing came from the client for ``silent`` seconds, past ``limit``: close the connection."""
        ...


def parse_heartbeat(value: str) -> tuple[int, int]:
    """A CONNECT's ``heart-beat`` header: (cx, cy) in milliseconds."""
    parts = value.split(",")
    if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
        raise StompError("invalid heart-beat header", f"heart-beat {value!r} is not two integers 'cx,cy'")
    return int(parts[0]), int(parts[1])


class HeartBeats:
    """The heart-beats of one connection (STOMP 1.1 and 1.2; none in 1.0)."""

    def __init__(self, clock: IReactorTime, owner: HeartBeatOwner, grace: float) -> None:
        self.clock = clock
        self.owner = owner
        self.grace = grace
        """How many incoming intervals of silence close the connection."""
        self.out_interval = 0.0
        """Seconds between the beats the server sends (0: none)."""
        self.in_interval = 0.0
        """Seconds between the beats the server expects (0: none)."""
        self.last_received = clock.seconds()
        self.last_sent = clock.seconds()
        self._out: IDelayedCall | None = None
        self._in: IDelayedCall | None = None

    def negotiate(self, client: tuple[int, int], server_send: int, server_receive: int) -> None:
        """Agree the intervals with the client's ``heart-beat`` (cx, cy) and the server's own."""
        client_send, client_receive = client
        self.out_interval = max(server_send, client_receive) / 1000.0 if server_send and client_receive else 0.0
        self.in_interval = max(client_send, server_receive) / 1000.0 if client_send and server_receive else 0.0

    def start(self) -> None:
        """The connection is connected: beat and watch as negotiated."""
        if self.out_interval:
            self._out = self.clock.callLater(self.out_interval, self._beat)
        if self.in_interval:
            self.last_received = self.clock.seconds()
            self._in = self.clock.callLater(self.in_interval * self.grace, self._check)

    def stop(self) -> None:
        """Cancel both timers."""
        for call in (self._out, self._in):
            if call is not None and call.active():
                call.cancel()
        self._out = self._in = None

    def received(self) -> None:
        """Something arrived from the client: it is alive."""
        self.last_received = self.clock.seconds()

    def sent(self) -> None:
        """Something was written to the client: no beat is due before an interval."""
        self.last_sent = self.clock.seconds()

    def _beat(self) -> None:
        if not self.owner.beating():
            return
        idle = self.clock.seconds() - self.last_sent
        if idle >= self.out_interval * 0.99:
            self.last_sent = self.clock.seconds()
            self.owner.send_heartbeat()
            idle = 0.0
        self._out = self.clock.callLater(self.out_interval - idle, self._beat)

    def _check(self) -> None:
        if not self.owner.beating():
            return
        limit = self.in_interval * self.grace
        if self.owner.reading_held():
            self.last_received = self.clock.seconds()
        silent = self.clock.seconds() - self.last_received
        if silent >= limit:
            self.owner.heartbeat_missed(silent, limit)
            return
        self._in = self.clock.callLater(limit - silent, self._check)
