"""In-doubt resolution: ask the target what it holds until it answers, never guess.

A batch is *in doubt* when the target may or may not have committed it (the confirmation
was lost: a stalled or slow link, a cut after the COMMIT went out, a crash before the
duplicate store recorded it).  :class:`InDoubtResolver` asks the target which of the bridge's
copies it holds (:func:`~gateway.bridges.probe.held_message_ids`) and, when it cannot be asked
(no answer within the connector's ``send_timeout``, the connection down), asks again after a
backoff (``failure_retry_interval``, doubling up to :data:`MAX_BACKOFF_S`), each time as a new
request that the connector sends over its connection of the moment: a fresh one once the stalled
one is declared dead and the connector reconnected.  The owner (the bridge, through
:class:`InDoubtOwner`) is told once when an episode starts (it shows ``in_doubt``, consumes
and sends nothing new) and once when it ends; the episode is logged once.  After
``max_retries`` unanswered attempts (``-1``: never) the owner hears that the resolver gave up:
the bridge fails *in doubt*, it does not resend.

Why an answer is conclusive: over the same connection, the probe is ordered after the COMMIT;
over a new connection, a broker that fences connections by client id (ActiveMQ refuses a second
connection with the ``client-id`` of one still open; the STOMP connector sends its ``client_id``)
answers only once the old connection, and its transaction, is closed.  See docs/bridges.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.bridges.probe import held_message_ids
from gateway.deferreds import gather
from gateway.interfaces import IConnector

MAX_BACKOFF_S = 30.0
"""The longest wait between two questions of one episode."""


class GaveUpInDoubt(Exception):
    """The target could not be asked within ``max_retries`` attempts (or the bridge stopped)."""


class InDoubtOwner(Protocol):
    """What an :class:`InDoubtResolver` tells its bridge."""

    name: str

    def in_doubt_began(self, reason: str) -> None:
        """The target cannot be asked now: show ``in_doubt``, consume and send nothing new."""

    def in_doubt_ended(self) -> None:
        """The target answered: the episode is over."""

    def in_doubt_failed(self, reason: str) -> None:
        """Gave up asking (``max_retries``): fail the bridge, in doubt."""

    def asking_allowed(self) -> bool:
        """False once the bridge stopped or failed: stop asking."""


class InDoubtResolver:
    """Asks one target until it answers (see the module docstring).

    :param tail: for a log target, how many newest records per partition to read.
    :param first_delay: seconds before the second question (``failure_retry_interval``).
    :param max_attempts: unanswered questions before giving up (``-1``: never).
    """

    log = Logger()

    def __init__(self, owner: InDoubtOwner, target: IConnector, target_name: str, clock: IReactorTime, *,
                 tail: int, first_delay: float, max_attempts: int) -> None:
        self.owner = owner
        self.target = target
        self.target_name = target_name
        self.clock = clock
        self.tail = tail
        self.first_delay = first_delay
        self.max_attempts = max_attempts
        self.episodes = 0
        """Episodes so far (each logged once)."""
        self._timers: set[IDelayedCall] = set()
        self._waiting: set[Deferred[set[str] | None]] = set()
        self._doubting = 0
        """Questions unanswered now: an episode lasts while any is (several batches in flight)."""

    def held(self, destinations: Iterable[str], why: str) -> Deferred[set[str] | None]:
        """The ids the target holds at ``destinations`` (None: it cannot tell), asked until it answers;
        fails with :class:`GaveUpInDoubt`.  ``why`` says what is in doubt (for the log)."""
        wanted = sorted(set(destinations))
        result: Deferred[set[str] | None] = Deferred()
        self._waiting.add(result)
        state = {"attempts": 0, "episode": False}

        def ask() -> None:
            if result.called:
                return
            if not self.owner.asking_allowed():
                self._settle(result, Failure(GaveUpInDoubt("the bridge stopped")))
                return
            gather([held_message_ids(self.target, destination, tail=self.tail) for destination in wanted]) \
                .addCallbacks(answered, unanswered)

        def answered(answers: list[set[str] | None]) -> None:
            if result.called:
                return
            held: set[str] | None = set()
            for answer in answers:
                if answer is None:
                    held = None
                    break
                assert held is not None
                held |= answer
            if state["episode"]:
                state["episode"] = False
                self._doubting -= 1
                if self._doubting == 0:
                    self.log.info("bridge {name}: {target} answered after {count} question(s); {why} resolved",
                                  name=self.owner.name, target=self.target_name, count=state["attempts"] + 1,
                                  why=why)
                    self.owner.in_doubt_ended()
            self._settle(result, held)

        def unanswered(failure: Failure) -> None:
            if result.called:
                return
            state["attempts"] += 1
            attempts = state["attempts"]
            reason = f"cannot ask {self.target_name} what it holds ({why}): {failure.getErrorMessage()}"
            if not state["episode"]:
                state["episode"] = True
                self._doubting += 1
                if self._doubting == 1:  # once per episode, however many batches are in doubt
                    self.episodes += 1
                    self.log.warn("bridge {name} IN DOUBT: {reason}; consuming and sending nothing until it "
                                  "answers, asking again from {delay}s up to every {most}s", name=self.owner.name,
                                  reason=reason, delay=self.first_delay, most=MAX_BACKOFF_S)
                    self.owner.in_doubt_began(reason)
            if self.max_attempts != -1 and attempts > self.max_attempts:
                self._doubting = max(0, self._doubting - 1)
                self.owner.in_doubt_failed(f"{reason} (gave up, in doubt, after {self.max_attempts} retries; "
                                           "nothing was sent again)")
                self._settle(result, Failure(GaveUpInDoubt(reason)))
                return
            delay = min(MAX_BACKOFF_S, self.first_delay * 2 ** (attempts - 1))
            scheduled: list[IDelayedCall] = []

            def fire() -> None:
                self._timers.difference_update(scheduled)
                ask()

            scheduled.append(self.clock.callLater(delay, fire))
            self._timers.update(scheduled)

        ask()
        return result

    def cancel(self) -> None:
        """Stop asking; every question waiting fails with :class:`GaveUpInDoubt`."""
        for timer in list(self._timers):
            if timer.active():
                timer.cancel()
        self._timers.clear()
        self._doubting = 0
        for waiting in list(self._waiting):
            self._settle(waiting, Failure(GaveUpInDoubt("the bridge stopped")))

    def _settle(self, result: Deferred[set[str] | None], outcome: set[str] | Failure | None) -> None:
        self._waiting.discard(result)
        if result.called:
            return
        if isinstance(outcome, Failure):
            result.errback(outcome)
        else:
            result.callback(outcome)
