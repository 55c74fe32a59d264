"""Typed access to Twisted's log for tests: a plain callable as an :class:`ILogObserver`.

Twisted's publishers call any one-argument callable; its stubs ask for an
``ILogObserver`` provider, which a function or ``list.append`` is not to
mypy-zope. :func:`observer` states the fact once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from twisted.logger import ILogObserver


def observer(function: Callable[[Any], object]) -> ILogObserver:
    """``function`` as the log observer Twisted will call with each event."""
    return cast(ILogObserver, function)
