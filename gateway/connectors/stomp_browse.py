"""Which messages a queue of a JMS broker spoken to over STOMP holds: the in-doubt probe.

A bridge that gives its copies deterministic ids (ONCE_AND_ONLY_ONCE,
AT_MOST_ONCE) also writes the id as the :data:`DUPLICATE_ID` property, the
name of Artemis's duplicate detection id; the broker's own ``message-id``
cannot be set by a client.  :func:`browse_duplicate_ids` reads that property
of every message of a queue by browsing it: a SUBSCRIBE with
``browser:true`` delivers the queue's messages without consuming them and
ends with a MESSAGE carrying ``browser:end`` (ActiveMQ 5, Artemis).

The browse has no selector: ActiveMQ 5.17 evaluates a browser's selector
only over the messages it paged into memory (one browse page), so a selector
on a queue not yet paged in misses the newest messages, the very ones a
bridge is in doubt about (seen against the real broker); a browse without a
selector gets them all.  It is bounded in size (more than ``limit``
messages: the answer is None, "cannot tell") and, by the connector, in time.
A message over the connection's frame limit is skipped unread but counted,
its id read from its headers (the browse consumes nothing).

A topic keeps nothing to browse: only queues can be asked.  What a consumer
took from the queue between the send and the browse is not seen either
(the bridge's duplicate store still answers for what it recorded).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.connectors.stomp_client import StompClientProtocol
from gateway.errors import ConnectorUnavailable, FrameSkipped
from gateway.message.model import DUPLICATE_ID
from gateway.wire.frame import Frame

BROWSE_PREFETCH = 1000
"""How many browsed messages the broker may have on the way at once."""


def browse_duplicate_ids(protocol: StompClientProtocol, destination: str, subscription_id: str, *,
                         limit: int) -> Deferred[set[str] | None]:
    """The :data:`DUPLICATE_ID` values of the messages queued at ``destination``, or None
    when the queue holds more than ``limit`` messages (nothing is consumed).  Fails with
    ConnectorUnavailable when the connection ends first, with the broker's error when it
    refuses the browse."""
    def cancel(_: Deferred[set[str] | None]) -> None:  # timed out: the browse goes on no longer
        if not protocol.closed:
            protocol.unsubscribe(subscription_id, receipt=False)

    result: Deferred[set[str] | None] = Deferred(cancel)
    ids: set[str] = set()
    seen = [0]

    def received(frame: Frame) -> None:
        if result.called:
            return
        if frame.headers.get("browser") == "end":
            finish(ids)
            return
        seen[0] += 1
        value = frame.headers.get(DUPLICATE_ID)
        if value:
            ids.add(value)
        if seen[0] > limit:
            finish(None)

    def finish(answer: set[str] | None) -> None:
        if not protocol.closed:
            protocol.unsubscribe(subscription_id, receipt=False)
        result.callback(answer)

    def refused(failure: Failure) -> None:
        if not result.called:
            result.errback(failure)

    def lost(_: object) -> None:
        if not result.called:
            result.errback(ConnectorUnavailable(f"connection lost while browsing {destination}"))

    def oversized(skipped: FrameSkipped) -> None:  # (over the frame limit: its headers are all a browse reads)
        received(Frame("MESSAGE", skipped.headers))

    subscribed = protocol.subscribe(destination, subscription_id, received, ack="auto",
                                    headers={"browser": "true", "activemq.prefetchSize": str(BROWSE_PREFETCH)},
                                    oversized=oversized)
    subscribed.addErrback(refused)
    protocol.when_lost().addCallback(lost)
    return result
