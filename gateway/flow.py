"""Back-pressure from a send target to the STOMP clients sending to it.

A connector whose target does not keep up - the JMS broker's connection has
more written than it took, librdkafka holds too many records - says so through
its :class:`Congestion`.  A STOMP session that just handed a SEND to such a
connector stops reading from its client (TCP then slows the client down) and
reads again once the congestion clears: the gateway's memory stays bounded and
no SEND is refused for being too fast.  Data already read is still handled, so
a client may overshoot by what one read delivered.

:class:`Congestion` is a Twisted push producer: registered with the broker
connection's transport, the transport pauses it when its write buffer fills
and resumes it once the buffer drained.  Other connectors call
:meth:`~Congestion.pauseProducing` / :meth:`~Congestion.resumeProducing`
themselves.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from zope.interface import implementer


@implementer(IPushProducer)
class Congestion:
    """Whether a target is congested, and who waits for it not to be.

    :param name: the target, for the log.
    """

    log = Logger()

    def __init__(self, name: str) -> None:
        self.name = name
        self.congested = False
        self.episodes = 0
        """How often the target became congested (for tests and status pages)."""
        self._waiters: list[Callable[[], None]] = []

    def when_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the target is no longer congested (now if it is not)."""
        if self.congested:
            self._waiters.append(callback)
        else:
            callback()

    # -- IPushProducer: driven by the target's transport (or its connector) --

    def pauseProducing(self) -> None:
        """The target is behind: senders should wait."""
        if not self.congested:
            self.congested = True
            self.episodes += 1
            self.log.debug("{name}: congested, pausing its senders", name=self.name)

    def resumeProducing(self) -> None:
        """The target caught up: release every waiting sender."""
        if not self.congested:
            return
        self.congested = False
        waiters, self._waiters = self._waiters, []
        for callback in waiters:
            callback()
        self.log.debug("{name}: caught up, {count} senders released", name=self.name, count=len(waiters))

    def stopProducing(self) -> None:
        """The target's connection ended: nobody should keep waiting for it (their sends
        wait or fail by the connector's own rules)."""
        self.resumeProducing()
