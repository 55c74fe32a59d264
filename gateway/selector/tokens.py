"""The lexer of JMS selectors: selector text -> a list of :class:`Token`.

It owns the lexical rules of JMS 1.1 section 3.8.1.1 (string literals with
``''`` escaping, exact numerics in decimal, hex and octal, approximate
numerics, case-insensitive keywords, Java identifiers) and reports a bad
character or literal as a :class:`~gateway.errors.SelectorError` naming the
column.  It knows nothing of precedence or types: that is the parser's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from gateway.errors import SelectorError

KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "NULL", "TRUE", "FALSE"}
)
"""Reserved words; case-insensitive, never identifiers (JMS 1.1 3.8.1.1)."""

LONG_MAX = 2**63 - 1


class TokenKind(Enum):
    """What a token is."""

    IDENTIFIER = "identifier"
    KEYWORD = "keyword"
    STRING = "string literal"
    EXACT = "exact numeric literal"
    APPROXIMATE = "approximate numeric literal"
    OPERATOR = "operator"
    END = "end of selector"


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its kind, its value and where it starts.

    :ivar value: the keyword in upper case, the operator, the identifier,
        the decoded string, or the number (``int`` / ``float``).
    :ivar text: the token as written (for error messages).
    :ivar column: 1-based column of the token's first character.
    """

    kind: TokenKind
    value: object
    text: str
    column: int

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind is TokenKind.END:
            return "end of selector"
        return repr(self.text) if len(self.text) <= 40 else repr(self.text[:37] + "...")


def selector_error(text: str, column: int, problem: str) -> SelectorError:
    """The one way errors are worded: ``selector error at column N: problem``."""
    return SelectorError(f"selector error at column {column}: {problem}", selector=text, column=column)


_SKIP = re.compile(r"(?:[ \t\n\r\f]+|/\*.*?\*/)+", re.DOTALL)
_IDENTIFIER = re.compile(r"(?:[^\W\d]|\$)[\w$]*")
_APPROXIMATE = re.compile(
    r"(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)[fFdD]?|\d+[fFdD]"
)
_HEX = re.compile(r"0[xX][0-9a-fA-F]+[lL]?")
_OCTAL = re.compile(r"0[0-7]*[lL]?")
_DECIMAL = re.compile(r"[1-9]\d*[lL]?")
_NUMBER_TAIL = re.compile(r"[\w$.]")
_NUMBER_RUN = re.compile(r"[\w$.]*")
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, the last one of kind :attr:`TokenKind.END`.

    :raises SelectorError: on a character or literal that is not JMS syntax.
    """
    tokens: list[Token] = []
    position = 0
    length = len(text)
    while True:
        skipped = _SKIP.match(text, position)
        if skipped:
            position = skipped.end()
        if text.startswith("/*", position):
            raise selector_error(text, position + 1, "unterminated comment '/*'")
        if position >= length:
            tokens.append(Token(TokenKind.END, None, "", length + 1))
            return tokens
        column = position + 1
        char = text[position]
        if char == "'":
            token, position = _string(text, position)
        elif char.isdigit() or (char == "." and position + 1 < length and text[position + 1].isdigit()):
            token, position = _number(text, position)
        elif (match := _IDENTIFIER.match(text, position)) is not None:
            word = match.group()
            upper = word.upper()
            if upper in KEYWORDS and word.isascii():
                token = Token(TokenKind.KEYWORD, upper, word, column)
            else:
                token = Token(TokenKind.IDENTIFIER, word, word, column)
            position = match.end()
        else:
            for operator in _OPERATORS:
                if text.startswith(operator, position):
                    token = Token(TokenKind.OPERATOR, operator, operator, column)
                    position += len(operator)
                    break
            else:
                hint = ""
                if text.startswith(("!=", "=="), position):
                    hint = " (JMS selectors write '<>' for not equal and '=' for equal)"
                elif char == '"':
                    hint = " (string literals are in single quotes)"
                raise selector_error(text, column, f"unexpected character {char!r}{hint}")
        tokens.append(token)


def _string(text: str, start: int) -> tuple[Token, int]:
    """A string literal starting at ``start`` (the opening quote)."""
    parts: list[str] = []
    position = start + 1
    while True:
        end = text.find("'", position)
        if end < 0:
            raise selector_error(text, start + 1, "unterminated string literal")
        parts.append(text[position:end])
        if text.startswith("''", end):
            parts.append("'")
            position = end + 2
            continue
        position = end + 1
        return Token(TokenKind.STRING, "".join(parts), text[start:position], start + 1), position


def _number(text: str, start: int) -> tuple[Token, int]:
    """A numeric literal starting at ``start``."""
    column = start + 1
    kind = TokenKind.EXACT
    value: int | float
    if match := _APPROXIMATE.match(text, start):
        kind = TokenKind.APPROXIMATE
        value = float(match.group().rstrip("fFdD"))
    elif match := _HEX.match(text, start):
        value = int(match.group().rstrip("lL")[2:], 16)
    elif match := _DECIMAL.match(text, start):
        value = int(match.group().rstrip("lL"))
    else:
        match = _OCTAL.match(text, start)
        assert match is not None  # a digit that is not 1-9 is 0
        value = int(match.group().rstrip("lL"), 8)
    end = match.end()
    if end < len(text) and _NUMBER_TAIL.match(text, end):
        bad = text[start : _NUMBER_RUN.match(text, start).end()]  # type: ignore[union-attr]
        raise selector_error(text, column, f"malformed numeric literal {bad!r}")
    if kind is TokenKind.EXACT and value > LONG_MAX:
        raise selector_error(
            text, column, f"exact numeric literal {match.group()!r} is out of range (largest is {LONG_MAX})"
        )
    return Token(kind, value, match.group(), column), end
