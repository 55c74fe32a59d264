"""The order of one connection's answers: RECEIPT and ERROR frames go out in the order of the frames.

A RECEIPT for a frame says that frame and every frame the same connection sent
before it were done (docs/persistence.md): a SEND that needs no store write
settles at once, but its RECEIPT must still wait for the earlier SENDs that
wait for the disk.  :class:`ReceiptLine` keeps the answers that are not known
yet in frame order and writes each one only once every earlier one was
written.  An ERROR is an answer like the others: it goes out after the
receipts of the frames before it, then the connection closes and nothing
after it is answered.

A frame that settles at once while nothing waits is answered at once (no
object is made for it).  The line never reads frames or touches a socket:
the session hands it the frames to write and the close to call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.errors import LimitReached
from gateway.stomp.errors import KEEPS_CONNECTION, limit_refusal
from gateway.wire.frame import Frame


def succeeded_already(d: Deferred[Any]) -> bool:
    """Whether ``d`` has fired with a success: a callback that passes the result on tells (the
    result is neither read nor changed; a Deferred not fired yet is left as it was)."""
    if not d.called:
        return False
    seen: list[bool] = []

    def passing(result: object) -> object:
        seen.append(True)
        return result

    d.addCallback(passing)
    return bool(seen)


def receipt_for(frame: Frame) -> Frame | None:
    """The RECEIPT answering ``frame`` (None when it asked for none)."""
    receipt = frame.headers.get("receipt")
    return None if receipt is None else Frame("RECEIPT", {"receipt-id": receipt})


class Answer:
    """The answer of one frame that is not known yet (a place in the line)."""

    __slots__ = ("done", "final", "frame", "line", "queued", "reply")

    def __init__(self, line: ReceiptLine, frame: Frame) -> None:
        self.line = line
        self.frame = frame
        self.done = False
        self.reply: Frame | None = None
        self.final = False
        self.queued = False
        """Whether it holds its place in the line (else :meth:`ReceiptLine.place` gives it one)."""

    def succeeded(self, _result: object = None) -> None:
        """The frame was done: its RECEIPT (if it asked for one) goes out in its turn."""
        self.settle(receipt_for(self.frame))

    def failed(self, reason: BaseException | Failure) -> None:
        """The frame failed: its ERROR goes out in its turn, then the connection closes (save a SEND
        or SUBSCRIBE refused by a destination limit: its ERROR, and the connection stays open)."""
        error = reason.value if isinstance(reason, Failure) else reason
        if isinstance(error, LimitReached) and self.frame.command in KEEPS_CONNECTION:
            self.settle(limit_refusal(error, self.frame))
            return
        self.settle(self.line.error_answer(reason, self.frame), final=True)

    def settled(self, error: Exception | None, _ack: object) -> None:
        """The ``settled(error, ack)`` callback of a posting connector."""
        if error is not None:
            self.failed(error)
        elif "receipt" in self.frame.headers:
            self.settle(receipt_for(self.frame))
        else:  # (the usual SEND: nothing to write)
            self.done = True
            if self.queued:
                self.line.advance()

    def settle(self, reply: Frame | None, final: bool = False) -> None:
        if self.done:
            return
        self.done = True
        self.reply = reply
        self.final = final
        if self.queued:
            self.line.advance()


class ReceiptLine:
    """One connection's answers, written strictly in the order of the frames they answer.

    :param write: writes one frame to the client.
    :param close: closes the connection (after a final answer: an ERROR, or DISCONNECT's RECEIPT).
    :param error_answer: the ERROR frame for a frame that failed (``(reason, frame)``); the session
        builds it (and stops reading and delivering from then on).
    """

    __slots__ = ("_close", "_waiting", "_write", "ended", "error_answer")

    def __init__(self, write: Callable[[Frame], None], close: Callable[[], None],
                 error_answer: Callable[[BaseException | Failure, Frame], Frame]) -> None:
        self._write = write
        self._close = close
        self.error_answer = error_answer
        self._waiting: deque[Answer] = deque()
        self.ended = False
        """A final answer was written (or the connection is gone): nothing more is."""

    def __len__(self) -> int:
        """Answers not written yet."""
        return len(self._waiting)

    def now(self, reply: Frame | None, final: bool = False) -> None:
        """The frame just handled is answered with ``reply`` (None: nothing to say): written now
        when nothing waits before it, else in its turn."""
        if self.ended:
            return
        if not self._waiting:
            self._emit(reply, final)
            return
        if reply is None and not final:
            return  # (nothing to write, and nothing later depends on it)
        answer = Answer(self, _NO_FRAME)
        answer.done = True
        answer.reply = reply
        answer.final = final
        self._waiting.append(answer)

    def later(self, frame: Frame) -> Answer:
        """A place for the answer of ``frame``, known later (:meth:`Answer.settle` and its adapters)."""
        answer = Answer(self, frame)
        answer.queued = True
        if not self.ended:
            self._waiting.append(answer)
        return answer

    def pending(self, frame: Frame) -> Answer:
        """An answer for ``frame`` that takes its place only at :meth:`place`: the hot path of a frame
        handed to a connector that may settle it before returning (then nothing waits in the line)."""
        return Answer(self, frame)

    def place(self, answer: Answer) -> None:
        """``answer`` (from :meth:`pending`) takes its place now: written at once if it is known and
        nothing waits before it, else in its turn."""
        if answer.done and not self._waiting:
            if answer.reply is not None or answer.final:
                self._emit(answer.reply, answer.final)
            return
        answer.queued = True
        if not self.ended:
            self._waiting.append(answer)
            if answer.done:
                self.advance()

    def track(self, result: Deferred[Any], frame: Frame) -> None:
        """Answer ``frame`` when ``result`` fires: its RECEIPT on success, its ERROR on failure."""
        if succeeded_already(result):
            self.now(receipt_for(frame))
            return
        answer = self.later(frame)
        result.addCallbacks(answer.succeeded, answer.failed)

    def advance(self) -> None:
        """Write every answer at the head of the line that is known."""
        waiting = self._waiting
        while waiting and waiting[0].done:
            answer = waiting.popleft()
            self._emit(answer.reply, answer.final)

    def abandon(self) -> None:
        """The connection is gone: nothing more is written."""
        self.ended = True
        self._waiting.clear()

    def _emit(self, reply: Frame | None, final: bool) -> None:
        if self.ended:
            return
        if reply is not None:
            self._write(reply)
        if final:
            self.abandon()
            self._close()


_NO_FRAME = Frame("SEND", {})
"""The frame of an answer known when it is queued (never read)."""
