"""JMS 1.1 message selectors: parse once, compile to a fast predicate.

A plain library shared by the STOMP session (the ``selector`` header on
SUBSCRIBE), the embedded broker, bridges and routes::

    from gateway.selector import compile_selector, Selector
    selector = compile_selector("color = 'red' AND weight > 2")
    selector.matches(message)  # -> bool; UNKNOWN counts as no match

A bad selector raises :class:`gateway.errors.SelectorError` naming the column
and the token.  Semantics, the STOMP header mapping and every deliberate
difference from ActiveMQ are documented in ``docs/selectors.md``.
"""

from gateway.selector.compiler import CACHE_SIZE, Selector, clear_cache, compile_selector
from gateway.selector.dialect import ACTIVEMQ_JMS, ACTIVEMQ_STOMP, JMS, STOMP, Dialect

__all__ = [
    "ACTIVEMQ_JMS",
    "ACTIVEMQ_STOMP",
    "CACHE_SIZE",
    "JMS",
    "STOMP",
    "Dialect",
    "Selector",
    "clear_cache",
    "compile_selector",
]
