"""How selector values compare, convert and combine: SQL three-valued logic.

A value is ``None`` (NULL; as a truth value: UNKNOWN), ``bool``, ``int``
(Java int/long), ``float`` (Java float/double) or ``str``; anything else a
property may hold (``bytes``) only ever mismatches.  The functions here are
built once per compiled operator (:func:`comparator`, :func:`arithmetic`,
:func:`like_matcher`) so evaluation does no dispatch on operator names.

This module must stay free of message and syntax knowledge.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

from gateway.selector.dialect import Dialect

Value = str | int | float | bool | bytes | None
Truth = bool | None
Comparator = Callable[[Value, Value], Truth]
Combiner = Callable[[Value, Value], Value]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

PYTHON_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

_NO_CONVERSION = object()
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_JAVA_DOUBLE = re.compile(
    r"[\x00-\x20]*(?:([+-]?(?:NaN|Infinity))|([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)"
    r"[\x00-\x20]*\Z"
)


def mismatch_value(dialect: Dialect) -> Truth:
    """The truth value of a comparison of non-like types."""
    return False if dialect.mismatch_is_false else None


def convert_string(text: str, like: object) -> object:
    """``text`` converted to the type of ``like`` as ActiveMQ does, or a sentinel.

    ``Boolean.valueOf`` for a boolean (anything but ``true`` in any case is
    FALSE), ``Integer.valueOf`` / ``Long.valueOf`` for an exact number
    (depending on whether ``like`` fits a Java int), ``Double.valueOf`` for
    an approximate number.
    """
    kind = type(like)
    if kind is bool:
        return text.lower() == "true"
    if kind is int:
        if not _JAVA_INTEGER.match(text):
            return _NO_CONVERSION
        number = int(text)
        low, high = (INT_MIN, INT_MAX) if INT_MIN <= like <= INT_MAX else (LONG_MIN, LONG_MAX)  # type: ignore[operator]
        return number if low <= number <= high else _NO_CONVERSION
    if kind is float:
        match = _JAVA_DOUBLE.match(text)
        if not match:
            return _NO_CONVERSION
        return float(match.group(1) or match.group(2))
    return _NO_CONVERSION


def java_double_key(number: float) -> tuple[float, float]:
    """A sort key ordering doubles as Java's ``Double.compareTo`` does."""
    if math.isnan(number):
        return (math.inf, 2.0)
    return (number, math.copysign(1.0, number))


def _java_numeric(python_operator: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """``python_operator`` on numbers with Java's double ordering when a float is involved."""

    def compare(left: Any, right: Any) -> bool:
        if type(left) is float or type(right) is float:
            return python_operator(java_double_key(float(left)), java_double_key(float(right)))
        return python_operator(left, right)

    return compare


def number_operator(operator_symbol: str, dialect: Dialect) -> Callable[[Any, Any], bool]:
    """The two-valued operator comparing two numbers under ``dialect``."""
    python_operator = PYTHON_OPERATORS[operator_symbol]
    return _java_numeric(python_operator) if dialect.java_double_order else python_operator


def comparator(operator_symbol: str, dialect: Dialect) -> Comparator:
    """A three-valued comparison for ``= <> < <= > >=``.

    NULL on either side is UNKNOWN; non-like types give the dialect's
    mismatch value (FALSE in JMS 1.1).
    """
    python_operator = number_operator(operator_symbol, dialect)
    mismatch = mismatch_value(dialect)
    equality = operator_symbol in ("=", "<>")
    orders_all = equality or dialect.order_strings
    convert = dialect.convert_strings
    null_equality = operator_symbol == "=" and dialect.null_equality

    def compare(left: Value, right: Value) -> Truth:
        if left is None or right is None:
            if null_equality:
                if left is None:
                    return True if right is None else None
                return False
            return None
        left_type = type(left)
        right_type = type(right)
        if left_type is int or left_type is float:
            if right_type is int or right_type is float:
                return python_operator(left, right)
        elif left_type is right_type and (left_type is str or left_type is bool):
            return python_operator(left, right) if orders_all else mismatch
        if not convert:
            return mismatch
        if left_type is str and right_type in (int, float, bool):
            left = convert_string(left, right)  # type: ignore[assignment, arg-type]
            if left is _NO_CONVERSION:
                return mismatch
        elif right_type is str and left_type in (int, float, bool):
            right = convert_string(right, left)  # type: ignore[assignment, arg-type]
            if right is _NO_CONVERSION:
                return mismatch
        else:
            return mismatch
        if type(left) is bool and not orders_all:
            return mismatch
        return python_operator(left, right)

    return compare


def not_truth(value: Truth) -> Truth:
    """SQL NOT: UNKNOWN stays UNKNOWN."""
    return None if value is None else not value


def _java_divide(left: float, right: float) -> float:
    """IEEE division as Java does it (no exception on zero)."""
    if right == 0:
        if left == 0 or math.isnan(left):
            return math.nan
        return math.copysign(math.inf, left) * math.copysign(1.0, right)
    return left / right


def _integer_divide(left: int, right: int) -> int | None:
    """Java integer division, truncating toward zero; by zero is UNKNOWN."""
    if right == 0:
        return None
    quotient = abs(left) // abs(right)
    return quotient if (left < 0) == (right < 0) else -quotient


def java_wrap(number: int, *operands: int) -> int:
    """``number``, an exact result of ``operands``, wrapped the way Java's arithmetic overflows:
    in 32 bits when every operand is a Java int, else in 64 bits (a long).

    An exact value counts as an int when it fits in 32 bits: ActiveMQ makes every literal
    that fits an ``Integer`` and the differential test sets such properties with
    ``setIntProperty``.  (A Java long whose value fits in 32 bits is the case this cannot tell:
    see docs/selectors.md.)"""
    if all(INT_MIN <= operand <= INT_MAX for operand in operands):
        if INT_MIN <= number <= INT_MAX:
            return number
        return (number - INT_MIN) % 2**32 + INT_MIN
    if LONG_MIN <= number <= LONG_MAX:
        return number
    return (number - LONG_MIN) % 2**64 + LONG_MIN


def arithmetic(operator_symbol: str, dialect: Dialect) -> Combiner:
    """``+ - * /`` with Java numeric promotion; non-numbers and NULL give NULL.

    Exact arithmetic wraps at 32/64 bits only with :attr:`Dialect.java_overflow` (see
    docs/selectors.md).
    """
    if dialect.java_overflow:
        exact = _exact_arithmetic(operator_symbol, dialect)

        def wrapping(left: Value, right: Value) -> Value:
            result = exact(left, right)
            if type(result) is int and type(left) is int and type(right) is int:
                return java_wrap(result, left, right)
            return result

        return wrapping
    return _exact_arithmetic(operator_symbol, dialect)


def _exact_arithmetic(operator_symbol: str, dialect: Dialect) -> Combiner:
    divide_as_double = dialect.divide_as_double

    def combine(left: Value, right: Value) -> Value:
        left_type = type(left)
        right_type = type(right)
        if (left_type is not int and left_type is not float) or (
            right_type is not int and right_type is not float
        ):
            return None
        try:
            if operator_symbol == "+":
                return left + right  # type: ignore[operator]
            if operator_symbol == "-":
                return left - right  # type: ignore[operator]
            if operator_symbol == "*":
                return left * right  # type: ignore[operator]
            if left_type is int and right_type is int and not divide_as_double:
                return _integer_divide(left, right)  # type: ignore[arg-type]
            return _java_divide(float(left), float(right))  # type: ignore[arg-type]
        except OverflowError:
            return None

    return combine


def negate(value: Value) -> Value:
    """Unary minus; NULL and non-numbers give NULL."""
    kind = type(value)
    if kind is int or kind is float:
        return -value  # type: ignore[operator]
    return None


def java_negate(value: Value) -> Value:
    """Unary minus wrapping as Java's (``-Integer.MIN_VALUE`` is itself, so is ``-Long.MIN_VALUE``)."""
    result = negate(value)
    if type(result) is int and type(value) is int:
        return java_wrap(result, value)
    return result


def unary_plus(value: Value) -> Value:
    """Unary plus; NULL and non-numbers give NULL."""
    kind = type(value)
    return value if kind is int or kind is float else None


def like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """A function telling whether a string matches a LIKE pattern.

    ``%`` is any sequence, ``_`` any one character; the escape character
    makes a following ``%``, ``_`` or escape character literal and is
    itself literal before anything else (as in ActiveMQ).  Plain prefix,
    suffix, infix and exact patterns avoid regular expressions.
    """
    parts: list[str | None] = []  # None stands for %, "" never appears
    regex: list[str] = []
    literal: list[str] = []
    simple = True
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == escape and index + 1 < len(pattern) and pattern[index + 1] in ("%", "_", escape):
            literal.append(pattern[index + 1])
            regex.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        if char == "%":
            if literal:
                parts.append("".join(literal))
                literal = []
            if not parts or parts[-1] is not None:
                parts.append(None)
            regex.append(".*")
        elif char == "_":
            simple = False
            regex.append(".")
        else:
            literal.append(char)
            regex.append(re.escape(char))
        index += 1
    if literal:
        parts.append("".join(literal))
    if simple:
        fast = _fast_like(parts)
        if fast is not None:
            return fast
    compiled = re.compile("".join(regex), re.DOTALL)
    fullmatch = compiled.fullmatch
    return lambda text: fullmatch(text) is not None


def _fast_like(parts: list[str | None]) -> Callable[[str], bool] | None:
    """String methods for patterns made of one literal and ``%`` around it."""
    if not parts:
        return lambda text: text == ""
    if parts == [None]:
        return lambda text: True
    if len(parts) == 1:
        exact = parts[0]
        return lambda text: text == exact
    if len(parts) == 2:
        first, second = parts
        if first is None and second is not None:
            return lambda text: text.endswith(second)
        if second is None and first is not None:
            return lambda text: text.startswith(first)
    if len(parts) == 3 and parts[0] is None and parts[2] is None and parts[1] is not None:
        inner = parts[1]
        return lambda text: inner in text
    return None
