"""The parser of JMS selectors: tokens -> a checked syntax tree.

A recursive-descent parser for the JMS 1.1 selector grammar (a subset of
SQL-92 conditional expressions).  Precedence, loosest first::

    OR < AND < NOT < = <> IS [NOT] NULL
       < > >= < <= [NOT] LIKE / BETWEEN / IN < + - < * / < unary + -

``NOT`` binds looser than the comparisons, as in SQL-92 and the JMS
specification (``NOT a = 1`` is ``NOT (a = 1)``).  The parser also rejects
what can never be valid at run time - a string literal in ``<``, ``TRUE`` in
arithmetic, a number where a condition is needed - with a message naming the
column and the token.  It does not evaluate anything.
"""

from __future__ import annotations

from typing import Literal as TypingLiteral

from gateway.errors import SelectorError
from gateway.selector.syntax import (
    BOOLEAN_NODES,
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
from gateway.selector.tokens import Token, TokenKind, selector_error, tokenize

StaticKind = TypingLiteral["boolean", "numeric", "string", "any"]

_RELATIONAL = ("<", "<=", ">", ">=")


def parse(text: str) -> Node:
    """Parse a whole selector.

    :raises SelectorError: with the column and the offending token.
    """
    if not text.strip():
        raise selector_error(text, 1, "empty selector (omit the selector to receive every message)")
    return _Parser(text).parse_selector()


def static_kind(node: Node) -> StaticKind:
    """What a node yields, as far as it is known before a message is seen."""
    if isinstance(node, BOOLEAN_NODES):
        return "boolean"
    if isinstance(node, Literal):
        if node.kind == "string":
            return "string"
        return "boolean" if node.kind == "boolean" else "numeric"
    if isinstance(node, (Negate, Arithmetic)):
        return "numeric"
    return "any"


def _describe(node: Node) -> str:
    """How an error message names an operand."""
    if isinstance(node, Literal):
        return {
            "string": "the string literal",
            "boolean": "the boolean literal",
            "exact": "the number",
            "approximate": "the number",
        }[node.kind] + f" {_literal_text(node)}"
    if isinstance(node, (Negate, Arithmetic)):
        return "an arithmetic expression"
    return "a condition"


def _literal_text(node: Literal) -> str:
    if node.kind == "string":
        return "'" + str(node.value).replace("'", "''") + "'"
    if node.kind == "boolean":
        return "TRUE" if node.value else "FALSE"
    return repr(node.value)


class _Parser:
    """One parse of one selector text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0

    # -- token helpers -------------------------------------------------

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        if token.kind is not TokenKind.END:
            self.index += 1
        return token

    def at_keyword(self, *words: str) -> bool:
        token = self.current
        return token.kind is TokenKind.KEYWORD and token.value in words

    def at_operator(self, *operators: str) -> bool:
        token = self.current
        return token.kind is TokenKind.OPERATOR and token.value in operators

    def peek_keyword(self, offset: int, *words: str) -> bool:
        position = min(self.index + offset, len(self.tokens) - 1)
        token = self.tokens[position]
        return token.kind is TokenKind.KEYWORD and token.value in words

    def error(self, expected: str, token: Token | None = None) -> SelectorError:
        token = token or self.current
        return selector_error(self.text, token.column, f"expected {expected}, found {token.describe()}")

    def expect_operator(self, operator: str) -> Token:
        if not self.at_operator(operator):
            raise self.error(repr(operator))
        return self.advance()

    def expect_keyword(self, word: str) -> Token:
        if not self.at_keyword(word):
            raise self.error(word)
        return self.advance()

    def expect_string(self, what: str) -> Token:
        if self.current.kind is not TokenKind.STRING:
            raise self.error(what)
        return self.advance()

    # -- static checks -------------------------------------------------

    def condition(self, node: Node) -> Node:
        """``node`` is used where a truth value is needed."""
        if static_kind(node) not in ("boolean", "any"):
            raise selector_error(
                self.text, node.column, f"expected a condition, found {_describe(node)}"
            )
        return node

    def number_operand(self, node: Node, operator: str) -> Node:
        """``node`` is an operand of arithmetic or of an ordering comparison."""
        kind = static_kind(node)
        if kind in ("numeric", "any"):
            return node
        if kind == "string":
            problem = f"{operator!r} cannot use {_describe(node)}: strings only compare with = and <>"
        elif kind == "boolean" and isinstance(node, Literal):
            problem = f"{operator!r} cannot use {_describe(node)}: booleans only compare with = and <>"
        else:
            problem = f"{operator!r} needs a number, found {_describe(node)}"
        raise selector_error(self.text, node.column, problem)

    # -- grammar -------------------------------------------------------

    def parse_selector(self) -> Node:
        node = self.condition(self.or_expression())
        if self.current.kind is not TokenKind.END:
            expected = "an operator or end of selector"
            if self.at_operator(")"):
                expected = "end of selector (unbalanced ')')"
            raise self.error(expected)
        return node

    def or_expression(self) -> Node:
        first = self.and_expression()
        if not self.at_keyword("OR"):
            return first
        operands = [self.condition(first)]
        while self.at_keyword("OR"):
            self.advance()
            operands.append(self.condition(self.and_expression()))
        return Logical("OR", tuple(operands), first.column)

    def and_expression(self) -> Node:
        first = self.not_expression()
        if not self.at_keyword("AND"):
            return first
        operands = [self.condition(first)]
        while self.at_keyword("AND"):
            self.advance()
            operands.append(self.condition(self.not_expression()))
        return Logical("AND", tuple(operands), first.column)

    def not_expression(self) -> Node:
        if self.at_keyword("NOT"):
            token = self.advance()
            return Not(self.condition(self.not_expression()), token.column)
        return self.equality()

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            if self.at_operator("=", "<>"):
                token = self.advance()
                right = self.comparison()
                self.check_equality(left, right, str(token.value))
                operator: TypingLiteral["=", "<>"] = "=" if token.value == "=" else "<>"
                left = Comparison(operator, left, right, left.column)
            elif self.at_keyword("IS"):
                self.advance()
                negated = False
                if self.at_keyword("NOT"):
                    self.advance()
                    negated = True
                self.expect_keyword("NULL")
                left = IsNull(left, negated, left.column)
            else:
                return left

    def check_equality(self, left: Node, right: Node, operator: str) -> None:
        both_literals = isinstance(left, Literal) and isinstance(right, Literal)
        if both_literals and (static_kind(left) == "boolean") != (static_kind(right) == "boolean"):
            raise selector_error(
                self.text, left.column, f"{operator!r} cannot compare {_describe(left)} with {_describe(right)}"
            )

    def comparison(self) -> Node:
        left = self.additive()
        while True:
            token = self.current
            if self.at_operator(*_RELATIONAL):
                self.advance()
                operator = str(token.value)
                self.number_operand(left, operator)
                right = self.number_operand(self.additive(), operator)
                left = Comparison(operator, left, right, left.column)  # type: ignore[arg-type]
                continue
            negated = False
            if self.at_keyword("NOT") and self.peek_keyword(1, "LIKE", "BETWEEN", "IN"):
                self.advance()
                negated = True
            elif not self.at_keyword("LIKE", "BETWEEN", "IN"):
                return left
            keyword = self.advance()
            if keyword.value == "LIKE":
                left = self.like_rest(left, negated)
            elif keyword.value == "BETWEEN":
                self.number_operand(left, "BETWEEN")
                low = self.number_operand(self.additive(), "BETWEEN")
                self.expect_keyword("AND")
                high = self.number_operand(self.additive(), "BETWEEN")
                left = Between(left, low, high, negated, left.column)
            else:
                left = self.in_rest(left, negated, keyword)

    def like_rest(self, operand: Node, negated: bool) -> Node:
        pattern = self.expect_string("a string literal pattern after LIKE")
        escape: str | None = None
        if self.at_keyword("ESCAPE"):
            self.advance()
            token = self.expect_string("a string literal after ESCAPE")
            escape = str(token.value)
            if len(escape) != 1:
                raise selector_error(
                    self.text,
                    token.column,
                    f"the ESCAPE string must be exactly one character, found {token.describe()}",
                )
        return Like(operand, str(pattern.value), escape, negated, operand.column)

    def in_rest(self, operand: Node, negated: bool, keyword: Token) -> Node:
        if not isinstance(operand, Identifier):
            raise selector_error(
                self.text, operand.column, f"IN needs an identifier on its left, found {_describe(operand)}"
            )
        self.expect_operator("(")
        values = [str(self.expect_string("a string literal in the IN list").value)]
        while self.at_operator(","):
            self.advance()
            values.append(str(self.expect_string("a string literal in the IN list").value))
        if not self.at_operator(")"):
            raise self.error("',' or ')' in the IN list")
        self.advance()
        return In(operand, tuple(values), negated, operand.column)

    def additive(self) -> Node:
        left = self.multiplicative()
        while self.at_operator("+", "-"):
            operator = str(self.advance().value)
            self.number_operand(left, operator)
            right = self.number_operand(self.multiplicative(), operator)
            left = Arithmetic(operator, left, right, left.column)  # type: ignore[arg-type]
        return left

    def multiplicative(self) -> Node:
        left = self.unary()
        while self.at_operator("*", "/"):
            operator = str(self.advance().value)
            self.number_operand(left, operator)
            right = self.number_operand(self.unary(), operator)
            left = Arithmetic(operator, left, right, left.column)  # type: ignore[arg-type]
        return left

    def unary(self) -> Node:
        if self.at_operator("+", "-"):
            token = self.advance()
            operand = self.number_operand(self.unary(), f"unary {token.value}")
            if isinstance(operand, Literal) and token.value == "-":
                return Literal(-operand.value, operand.kind, token.column)  # type: ignore[operator]
            return Negate(operand, token.column, plus=token.value == "+")
        return self.primary()

    def primary(self) -> Node:
        token = self.current
        if token.kind is TokenKind.IDENTIFIER:
            self.advance()
            return Identifier(str(token.value), token.column)
        if token.kind is TokenKind.STRING:
            self.advance()
            return Literal(str(token.value), "string", token.column)
        if token.kind is TokenKind.EXACT:
            self.advance()
            return Literal(token.value, "exact", token.column)  # type: ignore[arg-type]
        if token.kind is TokenKind.APPROXIMATE:
            self.advance()
            return Literal(token.value, "approximate", token.column)  # type: ignore[arg-type]
        if self.at_keyword("TRUE", "FALSE"):
            self.advance()
            return Literal(token.value == "TRUE", "boolean", token.column)
        if self.at_operator("("):
            self.advance()
            node = self.or_expression()
            if not self.at_operator(")"):
                raise self.error("')'")
            self.advance()
            return node
        if self.at_keyword("NULL"):
            raise selector_error(
                self.text, token.column, "NULL is not a value here: write 'x IS NULL' or 'x IS NOT NULL'"
            )
        if self.at_keyword("NOT"):
            raise selector_error(
                self.text, token.column, "NOT needs parentheses here: NOT binds looser than comparisons"
            )
        raise self.error("an identifier, a literal or '('")
