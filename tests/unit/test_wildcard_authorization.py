"""A wildcard subscription is authorized on every name it can receive (docs/security.md): the
glob coverage of :func:`gateway.message.destinations.wildcard_covered` and the authorizer's use of it.

The holes this closes were found by tests/integration/test_feature_authorization_attacks.py: a
grant on ``/queue/shard.?`` opened ``SUBSCRIBE /queue/shard.*`` (every shard name), and one on
``/queue/public.*`` opened ``/queue/public.>``, which also receives ``/queue/public``.
"""

from __future__ import annotations

import pytest

from gateway.message.destinations import is_wildcard, wildcard_covered
from gateway.security.authorization import DestinationAuthorizer, parse_authorization


@pytest.mark.parametrize(("destination", "patterns", "covered"), [
    ("/queue/shard.*", ["/queue/shard.?"], False),          # '?' matches the character '*' only
    ("/queue/shard.*", ["/queue/shard.[*]"], False),
    ("/queue/shard.*", ["/queue/shard.[!x]*"], False),      # not a segment starting with x
    ("/queue/shard.*", ["/queue/shard.*"], True),
    ("/queue/shard.*", ["/*"], True),
    ("/queue/a.*.b", ["/queue/a*b"], True),
    ("/topic/orders.*.eu", ["/topic/orders.*"], True),
    ("/topic/orders.*.eu", ["/topic/orders.?.eu"], False),
    ("/queue/public.>", ["/queue/public.*"], False),        # '>' matches /queue/public too
    ("/queue/public.>", ["/queue/public.*", "/queue/public"], True),  # two entries together
    ("/queue/public.>", ["/queue/public*"], True),
    ("/queue/>", ["/queue/*"], True),
    ("/queue/orders.>", ["/queue/orders.eu.*"], False),
    ("/queue/a*.b", ["/queue/a[*].b"], True),               # not a wildcard: '*' inside a segment
    ("/queue/x", ["/queue/?"], True),
    ("/queue/x", [], False),
])
def test_wildcard_covered(destination: str, patterns: list[str], covered: bool) -> None:
    assert wildcard_covered(destination, patterns) is covered


def test_is_wildcard() -> None:
    assert is_wildcard("/topic/a.*") and is_wildcard("/queue/a.>") and is_wildcard("/queue/>")
    assert not is_wildcard("/queue/a*") and not is_wildcard("/temp-queue/a.>") and not is_wildcard("/queue/a.b")


def test_authorizer_judges_wildcard_reads_on_every_name_and_sends_on_the_literal_name() -> None:
    entries = parse_authorization([
        {"destination": "/queue/shard.?", "read": ["eve"], "write": ["eve"]},
        {"destination": "/queue/public.*", "read": ["eve"], "admin": ["eve"]},
        {"destination": "/topic/news.*", "read": ["eve"]},
        {"destination": "/topic/news", "read": ["eve"]},
    ], {})
    authorizer = DestinationAuthorizer(entries)
    assert not authorizer.permits("eve", "read", "/queue/shard.*")
    assert authorizer.permits("eve", "read", "/queue/shard.7")
    assert authorizer.permits("eve", "write", "/queue/shard.*")  # (the queue named 'shard.*' itself)
    assert not authorizer.permits("eve", "read", "/queue/public.>")
    assert not authorizer.permits("eve", "admin", "/queue/public.>")
    assert authorizer.permits("eve", "read", "/queue/public.*")
    assert authorizer.permits("eve", "read", "/topic/news.>")  # both forms granted, by two entries
    assert not authorizer.permits("alice", "read", "/topic/news.>")


def test_the_cover_check_reads_a_glob_as_fnmatch_does() -> None:
    """``wildcard_covered``'s own glob reading (only a ``*`` covers a whole segment) agrees with
    ``fnmatch.fnmatchcase`` on ordinary names, for 60,000 seeded random globs and names over the characters
    globs treat specially (a class holding a range that ends before it starts is left out: fnmatch reads
    what follows it its own way; the cover check then refuses, the safe side)."""
    import fnmatch
    import random
    import re

    from gateway.message.destinations import _glob_regex

    chooser = random.Random(20261129)
    compared = 0
    for alphabet in ("ab.-*?[]!/\\^", "ab-[]!", "az-[]!^&~|"):
        for _ in range(20_000):
            glob = "".join(chooser.choice(alphabet) for _ in range(chooser.randint(0, 9)))
            name = "".join(chooser.choice(alphabet + "cz") for _ in range(chooser.randint(0, 6)))
            if any(low > high for low, high in re.findall(r"(.)-(.)", glob)):
                continue
            assert (_glob_regex(glob).match(name) is not None) == fnmatch.fnmatchcase(name, glob), (glob, name)
            compared += 1
    assert compared > 30_000
