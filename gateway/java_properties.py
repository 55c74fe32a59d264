r"""Java ``.properties`` text, read as Java reads it (the ``javaproperties`` library).

One reader for the two places that take the format: ``[routing]`` routes in the Confluent
JMS-Bridge syntax (:mod:`gateway.routing.config`) and ``jndi.properties`` files of the ``jms``
connector (:mod:`gateway.connectors.jms_settings`).  A malformed ``\uXXXX`` escape is a
:class:`~gateway.errors.ConfigError` naming the file and key; nothing else here can fail.
"""

from __future__ import annotations

import javaproperties

from gateway.errors import ConfigError


def parse_properties(text: str, *, path: str = "", key: str = "") -> list[tuple[str, str]]:
    r"""``(key, value)`` pairs of ``text`` in order, duplicates kept (a caller lets the later win).

    Comments (``#``, ``!``), the ``=``, ``:`` and blank separators, trailing-backslash
    continuations and the escapes ``\t \n \r \f \uXXXX`` as in ``java.util.Properties``.
    """
    try:
        pairs: list[tuple[str, str]] = javaproperties.loads(text, object_pairs_hook=list)
    except javaproperties.InvalidUEscapeError as error:
        raise ConfigError(f"not Java properties text: {error}", path=path, key=key) from None
    return pairs


def read_properties_file(path: str, *, key: str = "") -> dict[str, str]:
    """The properties of the file at ``path`` (ISO 8859-1, as Java reads it); OSError if unreadable."""
    with open(path, encoding="latin-1") as handle:
        return dict(parse_properties(handle.read(), path=path, key=key))
