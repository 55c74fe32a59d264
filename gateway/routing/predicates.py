"""Route predicates: which messages a route includes.

Two forms, both pure (no I/O, no Twisted) so the Spark pipeline reuses them:

* the JMS-Bridge's equality, ``msg.address == foo-topic`` or
  ``msg.header.CorrelationId == 'abc'`` (quotes optional, spaces optional);
* any JMS selector, compiled with :func:`gateway.selector.compile_selector`.

``msg.address`` is the destination: a value starting with ``/`` is compared
with the whole destination (``/queue/orders``), any other value with the
destination's name without its ``/queue/``, ``/topic/``, ``/temp-queue/`` or
``/temp-topic/`` prefix.  ``msg.header.X`` compares the text form of JMS
header ``X`` (``CorrelationId``, ``JMSType`` …) or property ``X``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.errors import SelectorError
from gateway.message.kafka_records import header_value, text_of
from gateway.message.model import Message

DESTINATION_PREFIXES = ("/queue/", "/topic/", "/temp-queue/", "/temp-topic/")

_EQUALITY = re.compile(
    r"""^\s*msg\.(?:(?P<address>address)|header\.(?P<header>[^\s=!]+))\s*==\s*
        (?:'(?P<single>[^']*)'|"(?P<double>[^"]*)"|(?P<bare>\S+))\s*$""",
    re.VERBOSE,
)


def destination_name(destination: str) -> str:
    """``/topic/foo`` -> ``foo``; other destinations unchanged."""
    for prefix in DESTINATION_PREFIXES:
        if destination.startswith(prefix):
            return destination[len(prefix) :]
    return destination


@dataclass(frozen=True, slots=True)
class Predicate:
    """A compiled include predicate.

    :ivar text: the predicate as written.
    :ivar kind: ``address``, ``header`` or ``selector``.
    """

    text: str
    kind: str
    test: Callable[[Message], bool] = field(repr=False, compare=False)

    def matches(self, message: Message) -> bool:
        """Whether ``message`` satisfies the predicate."""
        return self.test(message)


def address_equals(value: str) -> Callable[[Message], bool]:
    """A test for ``msg.address == value``."""
    if value.startswith("/"):
        return lambda message: message.destination == value
    return lambda message: destination_name(message.destination) == value


def header_equals(name: str, value: str) -> Callable[[Message], bool]:
    """A test for ``msg.header.<name> == value`` (text comparison)."""

    def test(message: Message) -> bool:
        actual = header_value(message, name)
        return actual is not None and text_of(actual) == value

    return test


def compile_predicate(text: str) -> Predicate:
    """Compile an include predicate: the equality form if it is one, else a JMS selector.

    :raises SelectorError: the text is neither form.
    """
    match = _EQUALITY.match(text)
    if match is not None:
        value = next(v for v in (match["single"], match["double"], match["bare"]) if v is not None)
        if match["address"]:
            return Predicate(text, "address", address_equals(value))
        return Predicate(text, "header", header_equals(match["header"], value))
    if text.strip().startswith("msg."):
        raise SelectorError(
            f"cannot read predicate {text!r}: expected msg.address == VALUE or msg.header.NAME == VALUE",
            selector=text,
        )
    return compile_selector_predicate(text)


def compile_selector_predicate(text: str) -> Predicate:
    """Compile a JMS selector as a predicate (raises SelectorError)."""
    from gateway.selector import compile_selector

    selector = compile_selector(text)
    return Predicate(text, "selector", selector.matches)
