"""How much memory queued messages may take, and what a full destination does.

:class:`MemoryUsage` counts the bytes of the messages the embedded broker's
queues hold in memory (the pending ones: a window of each queue; the rest
is paged out, see :mod:`gateway.broker.paging.page_file`) against ``[broker]
memory_limit``.  :class:`DestinationPolicies` finds the ``max_size`` and
``full_policy`` of a destination from the ``[broker.destinations."PATTERN"]``
tables.  A message's size is an estimate (:func:`message_size`): its body,
its properties and a fixed share for the Python objects around them.

Nothing here pages or refuses anything: the queues and the broker do, by
these numbers.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger

from gateway.message.model import Message

PAGE, BLOCK, FAIL, DROP = "PAGE", "BLOCK", "FAIL", "DROP"
POLICIES = (PAGE, BLOCK, FAIL, DROP)

GiB = 1024 * 1024 * 1024
DEFAULT_SHARE = 8
"""Without ``memory_limit``: 1/8 of physical memory ..."""
DEFAULT_CAP = GiB
"""... and at most 1 GiB (Artemis' global-max-size default is half the heap)."""
FALLBACK_LIMIT = 256 * 1024 * 1024
"""When physical memory cannot be read."""

UNLIMITED = 2**62
"""The limit counted against with ``memory_limit = 0`` (shown as 0)."""

MESSAGE_OVERHEAD = 512
"""Bytes counted for every message besides its body and properties: the Python
objects (message, headers, heap entry) that hold it."""

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: Any) -> int:
    """Bytes of ``value``: an integer, or a string such as ``"64MB"``, ``"1 GiB"``, ``"512KiB"``.

    K, M, G and T are powers of 1024 with or without the ``i`` (as ActiveMQ and
    Artemis read them).  ValueError naming the value otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"must be a size such as '64MB' or a number of bytes, not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must be a size >= 0, not {value!r}")
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        unit = _UNITS.get(match.group(2).lower()) if match else None
        if match and unit is not None:
            return int(float(match.group(1)) * unit)
    raise ValueError(f"must be a size such as '64MB', '1GiB', '512KiB' or a number of bytes, not {value!r}")


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine, or None where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def default_memory_limit() -> int:
    """``memory_limit`` when the configuration sets none: 1/8 of physical memory, at most 1 GiB."""
    memory = physical_memory()
    if not memory:
        return FALLBACK_LIMIT
    return min(memory // DEFAULT_SHARE, DEFAULT_CAP)


def message_size(message: Message) -> int:
    """The bytes ``message`` is counted for while it is held in memory (an estimate)."""
    size = MESSAGE_OVERHEAD + message.body_size() + len(message.destination) + len(message.message_id)
    for key, value in message.properties.items():
        size += 64 + len(key) + (len(value) if isinstance(value, (str, bytes)) else 8)  # (a tuple: faster)
    return size


def destination_pattern_matches(destination: str, pattern: str) -> bool:
    """Whether ``destination`` matches ``pattern``.

    A pattern with ``>`` is read the ActiveMQ way: the name splits at ``.``
    (after the ``/queue/`` or ``/topic/`` prefix), ``*`` is one segment and a
    ``>`` the rest (``/queue/orders.>`` matches ``/queue/orders``,
    ``/queue/orders.eu`` and ``/queue/orders.eu.late``).  Any other pattern is an
    fnmatch glob, as ``[[destinations]]`` and ``[[authorization]]`` read them
    (``/queue/orders.*``)."""
    if ">" not in pattern:
        return fnmatch.fnmatchcase(destination, pattern)
    kind, _, name = pattern.rpartition("/")
    dkind, _, dname = destination.rpartition("/")
    if kind != dkind:
        return False
    parts, dparts = name.split("."), dname.split(".")
    for index, part in enumerate(parts):
        if part == ">":
            return True
        if index >= len(dparts) or (part != "*" and part != dparts[index]):
            return False
    return len(parts) == len(dparts)


@dataclass(frozen=True, slots=True)
class DestinationPolicy:
    """The limit in force on one destination.

    :ivar pattern: the ``[broker.destinations]`` key that matched ("" for none).
    :ivar max_size: bytes of queued messages the destination may hold in memory (0: no own limit).
    :ivar full_policy: PAGE, BLOCK, FAIL or DROP.
    :ivar last_value: a last-value queue (:mod:`gateway.broker.last_value`).
    :ivar exclusive: every consumer is exclusive (:mod:`gateway.broker.exclusive`).
    """

    pattern: str = ""
    max_size: int = 0
    full_policy: str = PAGE
    last_value: bool = False
    exclusive: bool = False


DEFAULT_POLICY = DestinationPolicy()


class DestinationPolicies:
    """``[broker.destinations]``: the first pattern (in file order) that matches a destination wins."""

    def __init__(self, tables: dict[str, Any] | None = None) -> None:
        self.rules = [
            DestinationPolicy(pattern, int(limits.max_size), str(limits.full_policy).upper(),
                              bool(getattr(limits, "last_value", False)), bool(getattr(limits, "exclusive", False)))
            for pattern, limits in (tables or {}).items()
        ]
        self._cache: dict[str, DestinationPolicy] = {}

    def __bool__(self) -> bool:
        return bool(self.rules)

    def for_destination(self, destination: str) -> DestinationPolicy:
        hit = self._cache.get(destination)
        if hit is not None:
            return hit
        policy = DEFAULT_POLICY
        for rule in self.rules:
            if destination_pattern_matches(destination, rule.pattern):
                policy = rule
                break
        if len(self._cache) < 10_000:
            self._cache[destination] = policy
        return policy


class MemoryUsage:
    """Bytes of queued messages in memory, process-wide, against ``limit``.

    Reaching the limit (:meth:`reached`: a message found no room) is logged
    once (warning), and once again when usage is back under 90% of it.
    ``on_release`` (the broker's) runs when memory is freed while something
    waits for room (:attr:`waiting`)."""

    log = Logger()

    def __init__(self, limit: int) -> None:
        self.unlimited = limit <= 0
        """``memory_limit = 0``: no limit (as ``max_size = 0``); nothing is ever paged for memory."""
        self.limit = UNLIMITED if self.unlimited else limit
        self.used = 0
        self.full_episodes = 0
        self.reported = False
        """Whether the limit was reached and usage is not yet back under 90% of it."""
        self.waiting = False
        """Whether a BLOCK destination waits for room (then releases call :attr:`on_release`)."""
        self.on_release: Callable[[], None] | None = None

    @property
    def full(self) -> bool:
        return self.used >= self.limit

    @property
    def configured(self) -> int:
        """The limit as configured: 0 for none."""
        return 0 if self.unlimited else self.limit

    def add(self, size: int) -> None:
        self.used += size

    def reached(self) -> None:
        """A message was kept out of memory (paged, held, refused) for want of room: the start
        of an episode, logged once until usage is back under 90% of the limit."""
        if self.reported:
            return
        self.reported = True
        self.full_episodes += 1
        self.log.warn(
            "embedded broker memory limit reached: queued messages take {used} of {limit} bytes; "
            "destinations now apply their full_policy (PAGE pages to disk)",
            used=self.used, limit=self.limit,
        )

    def release(self, size: int) -> None:
        self.used -= size
        if self.reported and self.used < self.limit * 0.9:
            self.reported = False
            self.log.info("embedded broker memory back under its limit: {used} of {limit} bytes",
                          used=self.used, limit=self.limit)
        if self.waiting and self.on_release is not None:
            self.on_release()
