"""The syntax tree of a parsed JMS selector.

Plain immutable nodes built by :mod:`gateway.selector.parser` and turned into
a predicate by :mod:`gateway.selector.compiler`; nothing here evaluates.
Each node remembers the column it starts at so later checks can point there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal as TypingLiteral

LiteralKind = TypingLiteral["string", "exact", "approximate", "boolean"]
ComparisonOperator = TypingLiteral["=", "<>", "<", "<=", ">", ">="]
ArithmeticOperator = TypingLiteral["+", "-", "*", "/"]


@dataclass(frozen=True, slots=True)
class Literal:
    """A string, exact numeric (``int``), approximate numeric (``float``) or boolean."""

    value: str | int | float | bool
    kind: LiteralKind
    column: int


@dataclass(frozen=True, slots=True)
class Identifier:
    """A header field (``JMSPriority``…) or property reference; case-sensitive."""

    name: str
    column: int


@dataclass(frozen=True, slots=True)
class Negate:
    """Unary ``-`` (or ``+`` when :attr:`plus`)."""

    operand: Node
    column: int
    plus: bool = False


@dataclass(frozen=True, slots=True)
class Arithmetic:
    """``left op right`` for ``+ - * /``."""

    operator: ArithmeticOperator
    left: Node
    right: Node
    column: int


@dataclass(frozen=True, slots=True)
class Comparison:
    """``left op right`` for ``= <> < <= > >=``."""

    operator: ComparisonOperator
    left: Node
    right: Node
    column: int


@dataclass(frozen=True, slots=True)
class IsNull:
    """``operand IS [NOT] NULL``."""

    operand: Node
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class Like:
    """``operand [NOT] LIKE 'pattern' [ESCAPE 'c']``."""

    operand: Node
    pattern: str
    escape: str | None
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class Between:
    """``operand [NOT] BETWEEN low AND high``."""

    operand: Node
    low: Node
    high: Node
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class In:
    """``identifier [NOT] IN ('a', 'b', …)``."""

    operand: Identifier
    values: tuple[str, ...]
    negated: bool
    column: int


@dataclass(frozen=True, slots=True)
class Not:
    """``NOT operand``."""

    operand: Node
    column: int


@dataclass(frozen=True, slots=True)
class Logical:
    """``op1 AND op2 AND …`` or ``op1 OR op2 OR …`` (flattened, evaluated left to right)."""

    operator: TypingLiteral["AND", "OR"]
    operands: tuple[Node, ...]
    column: int


Node = Literal | Identifier | Negate | Arithmetic | Comparison | IsNull | Like | Between | In | Not | Logical

BOOLEAN_NODES = (Comparison, IsNull, Like, Between, In, Not, Logical)
"""Node types whose value is always a truth value (TRUE, FALSE, UNKNOWN)."""
