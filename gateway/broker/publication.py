"""The order in which sent messages become visible, per destination.

A persistent message is visible only once the store has it; a message that
needs no write (non-persistent, or a topic message no durable subscription
keeps) could be visible at once.  :class:`PublicationOrder` makes a message
wait behind the earlier messages to its destination that are still being
written, so one producer's messages of one priority reach every consumer in
the order they were sent, whatever each needs stored.  It knows nothing of
queues or stores: the broker hands it callbacks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class Publication:
    """One message waiting for its turn to become visible.

    :ivar then: called once it is visible (its sender's answer waits for that).
    """

    __slots__ = ("settled", "shown", "stored", "then")

    def __init__(self) -> None:
        self.settled = False
        self.stored = False
        self.shown = False
        self.then: Callable[[], None] | None = None

    def show(self, stored: bool) -> None:
        """Called once in its turn: ``show(True)`` makes it visible, ``show(False)`` gives its
        place up (it was not stored)."""
        raise NotImplementedError


class ShowCall(Publication):
    """A publication whose :meth:`show` is a callable it was given."""

    __slots__ = ("_show",)

    def __init__(self, show: Callable[[bool], None]) -> None:
        super().__init__()
        self._show = show

    def show(self, stored: bool) -> None:
        self._show(stored)


class PublicationOrder:
    """Lines of messages, one line per destination, shown strictly in order."""

    def __init__(self) -> None:
        self.lines: dict[str, deque[Publication]] = {}
        """The lines by destination (a destination without one is not :meth:`busy`: the broker's hot
        path asks ``destination in lines``)."""

    def busy(self, destination: str) -> bool:
        """Whether earlier messages to ``destination`` still wait (a new one must queue behind them)."""
        return destination in self.lines

    def wait(self, destination: str, show: Callable[[bool], None]) -> Publication:
        """Queue ``show`` behind what waits for ``destination``; it runs once :meth:`settle` said so
        and every earlier one settled."""
        return self.enter(destination, ShowCall(show))

    def enter(self, destination: str, publication: Publication) -> Publication:
        """Queue ``publication`` behind what waits for ``destination``; it is shown once :meth:`settle`
        said so and every earlier one settled."""
        line = self.lines.get(destination)
        if line is None:
            line = self.lines[destination] = deque()
        line.append(publication)
        return publication

    def settle(self, destination: str, publication: Publication, stored: bool) -> None:
        """The message's write is done (``stored``) or failed (it is never shown)."""
        publication.settled = True
        publication.stored = stored
        line = self.lines.get(destination)
        while line and line[0].settled:
            ready = line.popleft()
            ready.show(ready.stored)
            if ready.stored:
                ready.shown = True
                if ready.then is not None:
                    ready.then()
        if line is not None and not line:
            del self.lines[destination]
