"""How a configured destination pattern matches a destination name.

One rule for ``[[destinations]]`` (:mod:`gateway.routing.destination_map`) and ``[[authorization]]``
(:mod:`gateway.security.authorization`), so a pattern means the same in both.
"""

from __future__ import annotations

import fnmatch


def destination_matches(destination: str, pattern: str) -> bool:
    """Whether ``destination`` matches the glob ``pattern`` (``*``, ``?``, ``[...]``; case-sensitive),
    as ``[[destinations]]`` and ``[[authorization]]`` patterns are read."""
    return fnmatch.fnmatchcase(destination, pattern)
