"""Which messages a queue of a JMS provider holds, by the bridge copy id: the in-doubt probe of the ``jms`` connector.

A bridge that gives its copies deterministic ids writes the id as the
:data:`~gateway.message.model.DUPLICATE_ID` property too (a JMS client
cannot choose the JMSMessageID).  :func:`browse_duplicate_ids` reads that property
of every message of a queue through a JMS ``QueueBrowser`` (nothing is consumed),
on a session of its own.  It blocks: it runs on a Java-attached thread of its own
(:class:`BrowseThread`), never on the reactor thread nor on a subscription's.

No selector: a provider may evaluate a browser's selector over what it paged into
memory only (ActiveMQ 5.17 does, see :mod:`gateway.connectors.stomp_browse`).
The browse is bounded in size: more than ``limit`` messages answer None ("cannot
tell"); the connector bounds it in time.  A topic keeps nothing to browse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.connectors.jms_provider import AUTO_ACKNOWLEDGE, JavaThread
from gateway.message.model import DUPLICATE_ID

if TYPE_CHECKING:  # pragma: no cover
    from gateway.connectors.jms_link import Link


def browse_duplicate_ids(link: Link, destination: str, *, limit: int) -> set[str] | None:
    """The :data:`DUPLICATE_ID` values of the messages queued at ``destination`` (a
    ``/queue/NAME``), or None when it holds more than ``limit`` messages.  Raises what the
    provider raises (the caller's thread turns it into a failure)."""
    session = link.connection.createSession(False, AUTO_ACKNOWLEDGE)
    try:
        browser = session.createBrowser(link.destination(session, destination))
        try:
            ids: set[str] = set()
            seen = 0
            messages = browser.getEnumeration()
            while messages.hasMoreElements():
                message = messages.nextElement()
                seen += 1
                if seen > limit:
                    return None
                value = message.getStringProperty(DUPLICATE_ID)
                if value is not None:
                    ids.add(str(value))
            return ids
        finally:
            browser.close()
    finally:
        session.close()


class BrowseThread(JavaThread):
    """One browse on a Java-attached thread; ``report(result, error)`` is called on it when done."""

    def __init__(self, name: str, jpype: Any, work: Callable[[], set[str] | None],
                 report: Callable[[set[str] | None, BaseException | None], None]) -> None:
        super().__init__(name)
        self._jpype = jpype
        self._work = work
        self._report = report

    def run(self) -> None:
        self.attach(self._jpype)
        try:
            result = self._work()
        except BaseException as error:
            self._report(None, error)
        else:
            self._report(result, None)
        finally:
            self.detach(self._jpype)
