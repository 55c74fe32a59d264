"""Compile a selector's syntax tree into nested closures, once.

Every node becomes a function of the message: a *value* function (the SQL
value; for conditions TRUE/FALSE/UNKNOWN as ``True``/``False``/``None``)
and, for conditions, a *truth* function that answers only "is it TRUE?" -
what delivery needs, and cheaper, since ``a AND b`` is TRUE exactly when
both are TRUE.  Comparisons of a property with a literal get specialised
closures.  Nothing walks the tree at evaluation time.

:func:`compile_selector` is the public entry point; it caches compiled
selectors by text in a bounded LRU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gateway.message.model import Message
from gateway.selector.dialect import STOMP, Dialect
from gateway.selector.identifiers import header_getter
from gateway.selector.parser import parse
from gateway.selector.syntax import (
    Arithmetic,
    Between,
    Comparison,
    Identifier,
    In,
    IsNull,
    Like,
    Literal,
    Logical,
    Negate,
    Node,
    Not,
)
from gateway.selector.values import (
    Truth,
    Value,
    arithmetic,
    comparator,
    java_negate,
    like_matcher,
    mismatch_value,
    negate,
    not_truth,
    number_operator,
    unary_plus,
)

ValueFunction = Callable[[Message], Value]
TruthFunction = Callable[[Message], bool]

CACHE_SIZE = 1024
"""How many compiled selectors :func:`compile_selector` keeps."""


class Selector:
    """A compiled JMS selector.

    :ivar text: the selector as written.
    :ivar dialect: the evaluation rules it was compiled with.
    :ivar matches: ``matches(message) -> bool``: whether the selector is
        TRUE for the message (FALSE and UNKNOWN both mean "no").
    :ivar evaluate: ``evaluate(message) -> True | False | None``: the
        three-valued result, ``None`` being UNKNOWN.
    """

    __slots__ = ("dialect", "evaluate", "matches", "text", "tree")

    text: str
    dialect: Dialect
    tree: Node
    matches: TruthFunction
    evaluate: ValueFunction

    def __init__(self, text: str, tree: Node, dialect: Dialect = STOMP) -> None:
        compiler = _Compiler(dialect)
        self.text = text
        self.dialect = dialect
        self.tree = tree
        self.matches = compiler.truth(tree)
        self.evaluate = compiler.condition(tree)

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


def compile_selector(text: str, *, dialect: Dialect = STOMP) -> Selector:
    """Parse and compile ``text`` (cached by text and dialect).

    :raises gateway.errors.SelectorError: for a blank or invalid selector;
        the message names the column and the token.
    """
    return _compile_cached(text, dialect)


@lru_cache(maxsize=CACHE_SIZE)
def _compile_cached(text: str, dialect: Dialect) -> Selector:
    return Selector(text, parse(text), dialect)


def clear_cache() -> None:
    """Forget every cached selector (tests, reconfiguration)."""
    _compile_cached.cache_clear()


@dataclass(slots=True)
class _Operand:
    """A compiled value plus what is known about it at compile time."""

    function: ValueFunction
    constant: Value = None
    is_constant: bool = False
    property_name: str | None = None


def _constant(value: Value) -> _Operand:
    return _Operand(lambda message: value, value, True)


class _Compiler:
    """Turns nodes into closures under one :class:`Dialect`."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.mismatch = mismatch_value(dialect)
        # `<>` and NOT LIKE of non-like types: FALSE (JMS) or TRUE (ActiveMQ negates)
        self.negated_mismatch = not_truth(self.mismatch) if dialect.activemq_negation else self.mismatch
        # IN of a non-string: FALSE (JMS) or UNKNOWN (ActiveMQ)
        self.in_mismatch = None if dialect.activemq_negation else self.mismatch

    # -- values ----------------------------------------------------------

    def operand(self, node: Node) -> _Operand:
        if isinstance(node, Literal):
            return _constant(node.value)
        if isinstance(node, Identifier):
            getter = header_getter(node.name)
            if getter is not None:
                return _Operand(getter)
            name = node.name

            def get_property(message: Message) -> Value:
                return message.properties.get(name)

            return _Operand(get_property, property_name=name)
        if isinstance(node, Negate):
            inner = self.operand(node.operand)
            unary = unary_plus if node.plus else java_negate if self.dialect.java_overflow else negate
            if inner.is_constant:
                return _constant(unary(inner.constant))
            inner_function = inner.function
            return _Operand(lambda message: unary(inner_function(message)))
        if isinstance(node, Arithmetic):
            combine = arithmetic(node.operator, self.dialect)
            left = self.operand(node.left)
            right = self.operand(node.right)
            if left.is_constant and right.is_constant:
                return _constant(combine(left.constant, right.constant))
            left_function, right_function = left.function, right.function
            return _Operand(lambda message: combine(left_function(message), right_function(message)))
        return _Operand(self.condition(node))

    def value(self, node: Node) -> ValueFunction:
        return self.operand(node).function

    # -- conditions (three-valued) ----------------------------------------

    def condition(self, node: Node) -> ValueFunction:
        """The three-valued result of ``node`` used as a condition."""
        if isinstance(node, Literal):
            result = node.value
            return lambda message: result
        if isinstance(node, Identifier):
            getter = self.value(node)
            mismatch = self.mismatch

            def boolean_cast(message: Message) -> Truth:
                value = getter(message)
                if value is None or value.__class__ is bool:
                    return value
                return mismatch

            return boolean_cast
        if isinstance(node, Comparison):
            return self.comparison(node, truth=False)
        if isinstance(node, Logical):
            return self.logical(node)
        if isinstance(node, Not):
            inner = self.condition(node.operand)
            return lambda message: not_truth(inner(message))  # type: ignore[arg-type]
        if isinstance(node, IsNull):
            return self.is_null(node)
        if isinstance(node, Like):
            return self.like(node)
        if isinstance(node, Between):
            return self.between(node)
        if isinstance(node, In):
            return self.in_list(node)
        raise AssertionError(f"not a condition: {node!r}")  # the parser prevents this

    def logical(self, node: Logical) -> ValueFunction:
        operands = tuple(self.condition(operand) for operand in node.operands)
        if node.operator == "AND":

            def conjunction(message: Message) -> Truth:
                result: Truth = True
                for operand in operands:
                    value = operand(message)
                    if value is False:
                        return False
                    if value is None:
                        result = None
                return result

            return conjunction

        def disjunction(message: Message) -> Truth:
            result: Truth = False
            for operand in operands:
                value = operand(message)
                if value is True:
                    return True
                if value is None:
                    result = None
            return result

        return disjunction

    def is_null(self, node: IsNull) -> ValueFunction:
        operand = self.operand(node.operand)
        name = operand.property_name
        if node.negated:
            if name is not None:
                return lambda message: message.properties.get(name) is not None
            function = operand.function
            return lambda message: function(message) is not None
        if name is not None:
            return lambda message: message.properties.get(name) is None
        function = operand.function
        return lambda message: function(message) is None

    def like(self, node: Like) -> ValueFunction:
        matcher = like_matcher(node.pattern, node.escape)
        function = self.value(node.operand)
        negated = node.negated
        mismatch = self.negated_mismatch if negated else self.mismatch

        def like(message: Message) -> Truth:
            value = function(message)
            if value.__class__ is str:
                return matcher(value) is not negated
            if value is None:
                return None
            return mismatch

        return like

    def between(self, node: Between) -> ValueFunction:
        function = self.value(node.operand)
        low_function = self.value(node.low)
        high_function = self.value(node.high)
        if node.negated:  # a < low OR a > high
            below, above = comparator("<", self.dialect), comparator(">", self.dialect)

            def not_between(message: Message) -> Truth:
                value = function(message)
                first = below(value, low_function(message))
                if first is True:
                    return True
                second = above(value, high_function(message))
                if second is True:
                    return True
                return None if first is None or second is None else False

            return not_between
        at_least, at_most = comparator(">=", self.dialect), comparator("<=", self.dialect)

        def between(message: Message) -> Truth:
            value = function(message)
            first = at_least(value, low_function(message))
            if first is False:
                return False
            second = at_most(value, high_function(message))
            if second is False:
                return False
            return None if first is None or second is None else True

        return between

    def in_list(self, node: In) -> ValueFunction:
        function = self.value(node.operand)
        values = frozenset(node.values)
        negated = node.negated
        mismatch = self.in_mismatch

        def in_list(message: Message) -> Truth:
            value = function(message)
            if value.__class__ is str:
                return (value in values) is not negated
            return None if value is None else mismatch

        return in_list

    def comparison(self, node: Comparison, *, truth: bool) -> Callable[[Message], Truth]:
        if node.operator == "<>" and self.dialect.activemq_negation:
            equal = self.comparison(Comparison("=", node.left, node.right, node.column), truth=False)
            if truth:
                return lambda message: equal(message) is False
            return lambda message: not_truth(equal(message))
        compare = comparator(node.operator, self.dialect)
        left = self.operand(node.left)
        right = self.operand(node.right)
        if left.is_constant and right.is_constant:
            result = compare(left.constant, right.constant)
            if truth:
                return lambda message: result is True
            return lambda message: result
        if left.property_name is not None and right.is_constant:
            return _property_versus_constant(
                left.property_name,
                right.constant,
                compare,
                number_operator(node.operator, self.dialect),
                operator=node.operator,
                truth=truth,
            )
        left_function, right_function = left.function, right.function
        if truth:
            return lambda message: compare(left_function(message), right_function(message)) is True
        return lambda message: compare(left_function(message), right_function(message))

    # -- truth (is it TRUE?) ---------------------------------------------

    def property_test_truth(self, node: Like | In | IsNull, name: str) -> TruthFunction:
        """LIKE, IN and IS NULL on a property, read straight from the properties."""
        if isinstance(node, IsNull):
            if node.negated:
                return lambda message: message.properties.get(name) is not None
            return lambda message: message.properties.get(name) is None
        if isinstance(node, In):
            values = frozenset(node.values)  # a non-string is FALSE or UNKNOWN: never TRUE
            if node.negated:

                def not_in_truth(message: Message) -> bool:
                    value = message.properties.get(name)
                    return value.__class__ is str and value not in values

                return not_in_truth

            def in_truth(message: Message) -> bool:
                value = message.properties.get(name)
                return value.__class__ is str and value in values

            return in_truth
        matcher = like_matcher(node.pattern, node.escape)
        if node.negated:
            mismatch_truth = self.negated_mismatch is True

            def not_like_truth(message: Message) -> bool:
                value = message.properties.get(name)
                if value.__class__ is str:
                    return not matcher(value)
                return value is not None and mismatch_truth

            return not_like_truth

        def like_truth(message: Message) -> bool:
            value = message.properties.get(name)
            return value.__class__ is str and matcher(value)

        return like_truth

    def truth(self, node: Node) -> TruthFunction:
        """Whether ``node`` is TRUE for a message."""
        if isinstance(node, Comparison):
            return self.comparison(node, truth=True)  # type: ignore[return-value]
        if isinstance(node, Logical):
            operands = [self.truth(operand) for operand in node.operands]
            return _all_true(operands) if node.operator == "AND" else _any_true(operands)
        if isinstance(node, (Like, In, IsNull)) and isinstance(node.operand, Identifier):
            name = node.operand.name
            if header_getter(name) is None:
                return self.property_test_truth(node, name)
        if isinstance(node, Not):
            inner = self.condition(node.operand)
            return lambda message: inner(message) is False
        if isinstance(node, Literal):
            result = node.value is True
            return lambda message: result
        return self.generic_truth(node)

    def generic_truth(self, node: Node) -> TruthFunction:
        value = self.condition(node)
        return lambda message: value(message) is True


def _all_true(functions: list[TruthFunction]) -> TruthFunction:
    """``f1(m) and f2(m) and …`` without a loop or generator per call."""
    if len(functions) == 1:
        return functions[0]
    if len(functions) == 2:
        first, second = functions
        return lambda message: first(message) and second(message)
    if len(functions) == 3:
        first, second, third = functions
        return lambda message: first(message) and second(message) and third(message)
    first, second, third = functions[:3]
    rest = _all_true(functions[3:])
    return lambda message: first(message) and second(message) and third(message) and rest(message)


def _any_true(functions: list[TruthFunction]) -> TruthFunction:
    """``f1(m) or f2(m) or …`` without a loop or generator per call."""
    if len(functions) == 1:
        return functions[0]
    if len(functions) == 2:
        first, second = functions
        return lambda message: first(message) or second(message)
    if len(functions) == 3:
        first, second, third = functions
        return lambda message: first(message) or second(message) or third(message)
    first, second, third = functions[:3]
    rest = _any_true(functions[3:])
    return lambda message: first(message) or second(message) or third(message) or rest(message)


def _property_versus_constant(
    name: str,
    constant: Value,
    compare: Callable[[Value, Value], Truth],
    python_operator: Callable[[Any, Any], bool],
    *,
    operator: str,
    truth: bool,
) -> Callable[[Message], Truth]:
    """``property op literal``, the common case, without generic dispatch.

    ``compare`` is the full three-valued comparison; ``python_operator`` the
    operator for two numbers (or strings, for ``=`` and ``<>``).  Both come
    from the same dialect.
    """
    constant_type = type(constant)
    if operator == "<>" and constant_type is str:
        if truth:

            def string_differ_truth(message: Message) -> Truth:
                value = message.properties.get(name)
                if value.__class__ is str:
                    return value != constant
                return compare(value, constant) is True

            return string_differ_truth

        def string_differ(message: Message) -> Truth:
            value = message.properties.get(name)
            if value.__class__ is str:
                return value != constant
            return compare(value, constant)

        return string_differ
    if operator == "=" and constant_type is str:
        if truth:

            def string_equal_truth(message: Message) -> Truth:
                value = message.properties.get(name)
                if value.__class__ is str:
                    return value == constant
                return compare(value, constant) is True

            return string_equal_truth

        def string_equal(message: Message) -> Truth:
            value = message.properties.get(name)
            if value.__class__ is str:
                return value == constant
            return compare(value, constant)

        return string_equal
    if constant_type is int or constant_type is float:
        if truth:

            def number_compare_truth(message: Message) -> Truth:
                value = message.properties.get(name)
                kind = value.__class__
                if kind is int or kind is float:
                    return python_operator(value, constant)
                return compare(value, constant) is True

            return number_compare_truth

        def number_compare(message: Message) -> Truth:
            value = message.properties.get(name)
            kind = value.__class__
            if kind is int or kind is float:
                return python_operator(value, constant)
            return compare(value, constant)

        return number_compare
    if truth:
        return lambda message: compare(message.properties.get(name), constant) is True
    return lambda message: compare(message.properties.get(name), constant)
