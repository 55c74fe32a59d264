"""How a configured destination pattern matches a destination name, and what a wildcard
subscription's name (ActiveMQ's ``*`` and ``>`` segments) stands for.

One rule for ``[[destinations]]`` (:mod:`gateway.routing.destination_map`) and ``[[authorization]]``
(:mod:`gateway.security.authorization`), so a pattern means the same in both; the wildcard syntax
here is the embedded broker's (:mod:`gateway.broker.wildcards`), so an entry is judged on what a
wildcard subscription will actually receive.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from gateway.errors import DestinationError

WILDCARD_PREFIXES = ("/topic/", "/queue/")
"""The kinds of destination whose names may be wildcard patterns."""

_ANY = "\x00"
"""Stands for a wildcard segment when a glob is asked whether it covers it: no destination holds it
(a STOMP header cannot), and only a glob's ``*`` matches it (:func:`_glob_regex`)."""

_COVER_CACHE_LIMIT = 1000
_globs: dict[str, re.Pattern[str]] = {}


def destination_matches(destination: str, pattern: str) -> bool:
    """Whether ``destination`` matches the glob ``pattern`` (``*``, ``?``, ``[...]``; case-sensitive),
    as ``[[destinations]]`` and ``[[authorization]]`` patterns are read."""
    return fnmatch.fnmatchcase(destination, pattern)


def is_wildcard(destination: str) -> bool:
    """Whether ``destination`` is a wildcard topic or queue pattern: a ``/topic/`` or ``/queue/`` name
    with a segment (``.`` separates them) that is ``*`` (one segment) or ``>`` (the rest)."""
    prefix = next((p for p in WILDCARD_PREFIXES if destination.startswith(p)), None)
    if prefix is None:
        return False
    return any(segment in ("*", ">") for segment in destination[len(prefix):].split("."))


def wildcard_covered(destination: str, patterns: Iterable[str]) -> bool:
    """Whether the globs ``patterns`` together match **every** name the wildcard ``destination``
    stands for.

    Each ``*`` or ``>`` segment of ``destination`` must fall under a ``*`` of one pattern (a ``?`` or
    ``[...]`` there matches the character ``*`` but not every segment: ``/queue/shard.?`` does not
    cover ``/queue/shard.*``); and since ``>`` also matches no segment at all (``orders.>`` matches
    ``orders``, as in ActiveMQ), the name without its trailing ``.>`` must be matched too, by the same
    or another pattern.  A name that is no wildcard is covered when one pattern matches it."""
    globs = list(patterns)
    if not is_wildcard(destination):
        return any(destination_matches(destination, glob) for glob in globs)
    prefix = next(p for p in WILDCARD_PREFIXES if destination.startswith(p))
    segments = destination[len(prefix):].split(".")
    forms = [segments]
    if len(segments) > 1 and segments[-1] == ">":
        forms.append(segments[:-1])  # (zero segments for the '>')
    names = [prefix + ".".join(_ANY if s in ("*", ">") else s for s in form) for form in forms]
    return all(any(_glob_regex(glob).match(name) is not None for glob in globs) for name in names)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` read as :func:`fnmatch.fnmatchcase` reads it (``*``, ``?``, ``[...]`` with ``!``
    and ranges, an unclosed ``[`` literal), as a regular expression in which only a ``*`` can match
    :data:`_ANY`."""
    found = _globs.get(pattern)
    if found is not None:
        return found
    pieces: list[str] = []
    at = 0
    while at < len(pattern):
        char = pattern[at]
        close = _class_end(pattern, at) if char == "[" else -1
        if char == "*":
            pieces.append(".*")
        elif char == "?":
            pieces.append(f"[^{_ANY}]")
        elif close > 0:
            members = pattern[at + 1:close]
            negated = members.startswith("!")
            body = _class_members(members[1:] if negated else members)
            if body:
                pieces.append(f"(?!{_ANY})[{'^' if negated else ''}{body}]")
            else:  # (only empty ranges: nothing, or with ! any character)
                pieces.append(f"[^{_ANY}]" if negated else "(?!)")
            at = close
        else:
            pieces.append(re.escape(char))
        at += 1
    compiled = re.compile("(?s:" + "".join(pieces) + r")\Z")
    if len(_globs) >= _COVER_CACHE_LIMIT:
        _globs.clear()
    _globs[pattern] = compiled
    return compiled


def _class_members(members: str) -> str:
    """A ``[...]`` class's members as a regular expression's: single characters and ``a-z`` ranges,
    each escaped; a range whose end is before its start is empty and left out."""
    out: list[str] = []
    at = 0
    while at < len(members):
        if at + 2 < len(members) and members[at + 1] == "-":
            low, high = members[at], members[at + 2]
            if low <= high:
                out.append(f"{re.escape(low)}-{re.escape(high)}")
            at += 3
        else:
            out.append(re.escape(members[at]))
            at += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """Where the ``[...]`` class opened at ``start`` closes (a ``]`` right after ``[`` or ``[!`` is a
    member), -1 when it never does (the ``[`` is then an ordinary character)."""
    at = start + 1
    if pattern[at:at + 1] == "!":
        at += 1
    if pattern[at:at + 1] == "]":
        at += 1
    close = pattern.find("]", at)
    return close


KINDS = ("/queue/", "/topic/", "/temp-queue/", "/temp-topic/", "/remote-temp-queue/", "/remote-temp-topic/")
"""The prefixes of a composite destination's parts (ActiveMQ's comma syntax, :mod:`gateway.broker.composite`)."""


def is_composite(destination: str) -> bool:
    """Whether ``destination`` names several destinations (``/queue/a,/topic/b``)."""
    return "," in destination


def composite_parts(destination: str) -> list[str]:
    """The destinations a (possibly composite) name stands for, in order, without repeats;
    ``[destination]`` when it has no comma.  DestinationError for an empty part."""
    if "," not in destination:
        return [destination]
    parts: list[str] = []
    kind = ""
    for raw in destination.split(","):
        part = raw.strip()
        if not part:
            raise DestinationError(f"composite destination {destination!r} has an empty part")
        prefix = next((k for k in KINDS if part.startswith(k)), None)
        if prefix is None:
            if not kind or part.startswith("/"):
                raise DestinationError(f"composite destination {destination!r}: {part!r} is neither "
                                       "/queue/ nor /topic/ (nor a name after a part that says which)")
            part = kind + part
        else:
            kind = prefix
        if part not in parts:
            parts.append(part)
    return parts
