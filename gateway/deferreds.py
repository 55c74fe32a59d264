"""Deferred combinators the layers share.

:func:`gather` waits for every Deferred and fails with the first failure
itself (not Twisted's ``FirstError`` wrapper), so callers report the real
cause; an empty list succeeds at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed
from twisted.python.failure import Failure


def _unwrap(failure: Failure) -> Failure:
    if isinstance(failure.value, FirstError):
        inner: Failure = failure.value.subFailure
        return inner
    return failure


def gather(deferreds: Iterable[Deferred[Any]]) -> Deferred[list[Any]]:
    """All results, or the first failure unwrapped."""
    pending = list(deferreds)
    if not pending:
        return succeed([])
    if len(pending) == 1:
        return pending[0].addCallback(lambda result: [result])
    return gatherResults(pending, consumeErrors=True).addErrback(_unwrap)
