"""Syntax errors: every bad selector gives a SelectorError naming the column
and the token, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError, SelectorError
from gateway.selector import compile_selector

ERRORS = [
    # (selector, column, words the message must contain)
    ("color = 'red' AND (weight > 2", 30, ["expected ')'", "end of selector"]),
    ("a = 'x' AND AND b", 13, ["expected an identifier, a literal or '('", "'AND'"]),
    ("", 1, ["empty selector"]),
    ("   \t ", 1, ["empty selector"]),
    ("a =", 4, ["expected an identifier", "end of selector"]),
    ("a = 1 b", 7, ["expected an operator or end of selector", "'b'"]),
    ("(a = 1))", 8, ["unbalanced ')'"]),
    ("a != 1", 3, ["unexpected character '!'", "'<>'"]),
    ("a == 1", 4, ["expected an identifier", "'='"]),
    ('a = "x"', 5, ["unexpected character '\"'", "single quotes"]),
    ("a = 'open", 5, ["unterminated string literal"]),
    ("a = 1 /* no end", 7, ["unterminated comment"]),
    ("a = 08", 5, ["malformed numeric literal '08'"]),
    ("a = 0x", 5, ["malformed numeric literal '0x'"]),
    ("a = 1.0e", 5, ["malformed numeric literal '1.0e'"]),
    ("a = 12abc", 5, ["malformed numeric literal '12abc'"]),
    ("a = 9223372036854775808", 5, ["out of range"]),
    ("a > 'x'", 5, ["'>' cannot use the string literal 'x'", "= and <>"]),
    ("'x' <= a", 1, ["'<=' cannot use the string literal 'x'"]),
    ("a < TRUE", 5, ["booleans only compare with = and <>"]),
    ("a > 1 > 0", 1, ["'>' needs a number, found a condition"]),
    ("a BETWEEN 'a' AND 'z'", 11, ["BETWEEN", "string literal 'a'"]),
    ("a + 'x' = 1", 5, ["'+' cannot use the string literal 'x'"]),
    ("-TRUE = 1", 2, ["unary -", "boolean literal TRUE"]),
    ("TRUE = 1", 1, ["cannot compare the boolean literal TRUE with the number 1"]),
    ("1 = FALSE", 1, ["cannot compare the number 1 with the boolean literal FALSE"]),
    ("a = NULL", 5, ["NULL is not a value here", "IS NULL"]),
    ("a IS 5", 6, ["expected NULL", "'5'"]),
    ("a IS NOT", 9, ["expected NULL", "end of selector"]),
    ("5", 1, ["expected a condition, found the number 5"]),
    ("'x'", 1, ["expected a condition, found the string literal 'x'"]),
    ("a + 1", 1, ["expected a condition, found an arithmetic expression"]),
    ("a = 1 AND 5", 11, ["expected a condition, found the number 5"]),
    ("NOT 'x'", 5, ["expected a condition"]),
    ("a IN ()", 7, ["expected a string literal in the IN list", "')'"]),
    ("a IN (1, 2)", 7, ["expected a string literal in the IN list", "'1'"]),
    ("a IN ('x' 'y')", 11, ["expected ',' or ')' in the IN list"]),
    ("a IN 'x'", 6, ["expected '('"]),
    ("a + 1 IN ('x')", 1, ["IN needs an identifier"]),
    ("a LIKE b", 8, ["expected a string literal pattern after LIKE", "'b'"]),
    ("a LIKE 'x' ESCAPE 'ab'", 19, ["exactly one character", "'ab'"]),
    ("a LIKE 'x' ESCAPE ''", 19, ["exactly one character"]),
    ("a BETWEEN 1", 12, ["expected AND", "end of selector"]),
    ("a BETWEEN 1 OR 2", 13, ["expected AND", "'OR'"]),
    ("a = NOT b", 5, ["NOT needs parentheses here"]),
    ("a NOT b", 3, ["expected an operator or end of selector", "'NOT'"]),
    ("a % 2 = 1", 3, ["unexpected character '%'"]),
    ("a.b = 1", 2, ["unexpected character '.'"]),
    ("a = 1 ;", 7, ["unexpected character ';'"]),
]


@pytest.mark.parametrize(("text", "column", "words"), ERRORS)
def test_syntax_errors_point_at_column_and_token(text: str, column: int, words: list[str]) -> None:
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    error = caught.value
    assert isinstance(error, GatewayError)
    assert error.column == column, str(error)
    assert error.selector == text
    message = str(error)
    assert message.startswith(f"selector error at column {column}: "), message
    for word in words:
        assert word in message, message


def test_issue_example_message() -> None:
    with pytest.raises(SelectorError, match=r"^selector error at column 14: expected '\)', found 'color'$"):
        compile_selector("( weight > 2 color = 'red')")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab1 '()=<>+-*/%._!NOTANDORINLIKEISNULLBETWEENESCAPE", max_size=30))
def test_garbage_gives_selector_error_or_a_selector(text: str) -> None:
    """No input makes the compiler raise anything but SelectorError."""
    try:
        selector = compile_selector(text)
    except SelectorError as error:
        assert 1 <= error.column <= len(text) + 1
    else:
        assert selector.text == text
