"""Typed results of Deferreds that fired at once (a Clock-driven unit test's usual case).

``Deferred.result`` is untyped; :func:`result_of` gives the value with the
Deferred's own type, and fails clearly if it has not fired or failed.
"""

from __future__ import annotations

from typing import TypeVar

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

T = TypeVar("T")


def result_of(d: Deferred[T]) -> T:
    """What ``d`` fired with (AssertionError if it has not fired, or failed)."""
    results: list[T | Failure] = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    result = results[0]
    if isinstance(result, Failure):
        raise AssertionError(f"the Deferred failed: {result.getErrorMessage()}") from result.value
    return result
