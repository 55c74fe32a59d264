"""Typed access to Twisted's log for tests: a plain callable as an :class:`ILogObserver`.

Twisted's publishers call any one-argument callable; its stubs ask for an
``ILogObserver`` provider, which a function or ``list.append`` is not to
mypy-zope. :func:`observer` states the fact once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher


def observer(function: Callable[[Any], object]) -> ILogObserver:
    """``function`` as the log observer Twisted will call with each event."""
    return cast(ILogObserver, function)


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """The formatted lines Twisted's global log publisher gets while the test runs (import it as a fixture)."""
    lines: list[str] = []

    def observe(event: LogEvent) -> None:
        lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observer(observe))
    yield lines
    globalLogPublisher.removeObserver(observer(observe))
