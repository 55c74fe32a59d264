"""Which evaluation rules a compiled selector follows.

:data:`STOMP` is the default every caller gets: the JMS 1.1 rules, plus the
string-to-number conversion ActiveMQ applies to every selector that arrives
on a STOMP SUBSCRIBE (its STOMP transport prefixes the selector with
``convert_string_expressions:``), because STOMP headers are always strings.

The other switches reproduce ActiveMQ 5.17 behaviour the JMS specification
does not ask for.  They exist so the differential test can show that every
disagreement with ActiveMQ is one of the documented choices
(``docs/selectors.md``); production code has no reason to turn them on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Dialect:
    """Evaluation rules.

    :ivar convert_strings: a string compared with a number (or boolean) is
        converted to the other operand's type the way ActiveMQ does
        (``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``,
        ``Boolean.valueOf``); a string that does not convert makes the
        comparison one of non-like types.
    :ivar mismatch_is_false: a comparison of non-like types (``=``, ``<>``,
        ``<``…, ``[NOT] LIKE``, ``[NOT] BETWEEN``, ``[NOT] IN``, or a
        non-boolean used as a condition) is FALSE, as JMS 1.1 says; when
        off it is UNKNOWN.
    :ivar activemq_negation: ``<>`` and ``NOT LIKE`` are the negation of
        ``=`` and ``LIKE`` (so TRUE for non-like types), and ``IN`` of a
        non-string is UNKNOWN, as in ActiveMQ.
    :ivar null_equality: ActiveMQ's ``=``: NULL = NULL is TRUE, and
        ``x = NULL`` is FALSE when only the right operand is NULL.
    :ivar order_strings: ``< <= > >=`` order strings and booleans (ActiveMQ)
        instead of treating them as non-like types.
    :ivar divide_as_double: ``/`` always divides as double (ActiveMQ)
        instead of integer division for two exact operands.
    :ivar java_double_order: when a float is involved, compare both operands
        as Java doubles with ``Double.compareTo`` (-0.0 < 0.0, NaN equal to
        itself and above +Infinity, longs rounded to double) instead of
        exact IEEE comparison.
    :ivar java_overflow: exact ``+ - *`` and unary minus wrap as Java's int (32 bits, when both
        operands fit in an int) and long (64 bits) arithmetic do, as in ActiveMQ, instead of
        staying exact.
    """

    convert_strings: bool = True
    mismatch_is_false: bool = True
    activemq_negation: bool = False
    null_equality: bool = False
    order_strings: bool = False
    divide_as_double: bool = False
    java_double_order: bool = False
    java_overflow: bool = False


STOMP = Dialect()
"""The default: JMS 1.1 semantics with ActiveMQ's STOMP string conversion."""

JMS = Dialect(convert_strings=False)
"""Strict JMS 1.1: a string property never compares equal to a number."""

_ACTIVEMQ_QUIRKS = {
    "mismatch_is_false": True,
    "activemq_negation": True,
    "null_equality": True,
    "order_strings": True,
    "divide_as_double": True,
    "java_double_order": True,
    "java_overflow": True,
}

ACTIVEMQ_STOMP = Dialect(convert_strings=True, **_ACTIVEMQ_QUIRKS)
"""ActiveMQ 5.17 as a STOMP subscriber sees it (for the differential test)."""

ACTIVEMQ_JMS = Dialect(convert_strings=False, **_ACTIVEMQ_QUIRKS)
"""ActiveMQ 5.17 as an OpenWire/JMS consumer sees it (for the differential test)."""
