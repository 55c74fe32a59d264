"""Table-driven tests of selector evaluation: the JMS 1.1 examples, every
operator, SQL three-valued logic and UNKNOWN propagation, STOMP string
conversion, header fields and the cache."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.message.model import BytesMessage, Message, TextMessage
from gateway.selector import ACTIVEMQ_STOMP, JMS, STOMP, Dialect, Selector, clear_cache, compile_selector

UNKNOWN = None

# properties every table row sees, unless the row brings its own
BASE: dict[str, Any] = {
    "t": True,
    "f": False,
    "s": "red",
    "i": 5,
    "big": 3_000_000_000,
    "d": 2.5,
    "zero": 0,
    "num_text": "10",
    "float_text": "2.5",
    "bool_text": "true",
    "quote": "it's",
    "raw": b"bytes",
}


def message(**properties: Any) -> TextMessage:
    return TextMessage(properties={**BASE, **properties})


def evaluate(text: str, dialect: Any = STOMP, **properties: Any) -> bool | None:
    result = compile_selector(text, dialect=dialect).evaluate(message(**properties))
    assert result is None or isinstance(result, bool)
    return result


# -- the examples of JMS 1.1 section 3.8.1.1 ---------------------------------------

SPEC_EXAMPLES = [
    ("JMSType = 'car' AND color = 'blue' AND weight > 2500", {"color": "blue", "weight": 3000}, True),
    ("JMSType = 'car' AND color = 'blue' AND weight > 2500", {"color": "blue", "weight": 2500}, False),
    ("phone LIKE '12%3'", {"phone": "123"}, True),
    ("phone LIKE '12%3'", {"phone": "12993"}, True),
    ("phone LIKE '12%3'", {"phone": "1234"}, False),
    ("word LIKE 'l_se'", {"word": "lose"}, True),
    ("word LIKE 'l_se'", {"word": "loose"}, False),
    ("underscored LIKE '\\_%' ESCAPE '\\'", {"underscored": "_foo"}, True),
    ("underscored LIKE '\\_%' ESCAPE '\\'", {"underscored": "bar"}, False),
    ("phone NOT LIKE '12%3'", {"phone": "123"}, False),
    ("phone NOT LIKE '12%3'", {"phone": "12993"}, False),
    ("phone NOT LIKE '12%3'", {"phone": "1234"}, True),
    ("age BETWEEN 15 AND 19", {"age": 15}, True),
    ("age BETWEEN 15 AND 19", {"age": 19}, True),
    ("age BETWEEN 15 AND 19", {"age": 20}, False),
    ("age NOT BETWEEN 15 AND 19", {"age": 14}, True),
    ("age NOT BETWEEN 15 AND 19", {"age": 17}, False),
    ("Country IN ('UK', 'US', 'France')", {"Country": "UK"}, True),
    ("Country IN ('UK', 'US', 'France')", {"Country": "Peru"}, False),
    ("Country NOT IN ('UK', 'US', 'France')", {"Country": "UK"}, False),
    ("Country NOT IN ('UK', 'US', 'France')", {"Country": "Peru"}, True),
    ("prop_name IS NULL", {}, True),
    ("prop_name IS NULL", {"prop_name": "x"}, False),
    ("prop_name IS NOT NULL", {"prop_name": "x"}, True),
    ("prop_name IS NOT NULL", {}, False),
    # "if identifier of a LIKE / IN is NULL, the value of the operation is unknown"
    ("missing LIKE 'a%'", {}, UNKNOWN),
    ("missing NOT LIKE 'a%'", {}, UNKNOWN),
    ("missing IN ('a')", {}, UNKNOWN),
    ("missing NOT IN ('a')", {}, UNKNOWN),
]


@pytest.mark.parametrize(("text", "properties", "expected"), SPEC_EXAMPLES)
def test_specification_examples(text: str, properties: dict[str, Any], expected: bool | None) -> None:
    msg = TextMessage(properties=properties, type="car")
    selector = compile_selector(text)
    assert selector.evaluate(msg) is expected
    assert selector.matches(msg) is (expected is True)


def test_string_property_in_arithmetic_comparison_strict_jms() -> None:
    # JMS 1.1: setStringProperty("NumberOfOrders", "2"); "NumberOfOrders > 1" is false
    msg = TextMessage(properties={"NumberOfOrders": "2"})
    assert compile_selector("NumberOfOrders > 1", dialect=JMS).matches(msg) is False
    # ... but STOMP headers are always strings: the default converts, as ActiveMQ's STOMP does
    assert compile_selector("NumberOfOrders > 1").matches(msg) is True


# -- three-valued logic -------------------------------------------------------------

# t is TRUE, f is FALSE, u (missing) is UNKNOWN
TRUTH_TABLES = [
    ("t AND t", True), ("t AND f", False), ("t AND u", UNKNOWN),
    ("f AND t", False), ("f AND f", False), ("f AND u", False),
    ("u AND t", UNKNOWN), ("u AND f", False), ("u AND u", UNKNOWN),
    ("t OR t", True), ("t OR f", True), ("t OR u", True),
    ("f OR t", True), ("f OR f", False), ("f OR u", UNKNOWN),
    ("u OR t", True), ("u OR f", UNKNOWN), ("u OR u", UNKNOWN),
    ("NOT t", False), ("NOT f", True), ("NOT u", UNKNOWN),
    ("t AND t AND u", UNKNOWN), ("f OR f OR u OR t", True), ("u AND u AND f", False),
    ("NOT (t AND u)", UNKNOWN), ("NOT (f AND u)", True), ("NOT NOT u", UNKNOWN),
    ("TRUE", True), ("FALSE", False), ("NOT FALSE", True), ("true AND tRuE", True),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), TRUTH_TABLES)
def test_three_valued_logic(text: str, expected: bool | None) -> None:
    selector = compile_selector(text)
    msg = message()
    assert selector.evaluate(msg) is expected
    assert selector.matches(msg) is (expected is True)


# -- every operator, with UNKNOWN propagation -----------------------------------

OPERATORS = [
    # equality on every type
    ("s = 'red'", True), ("s = 'Red'", False), ("s <> 'red'", False), ("s <> 'blue'", True),
    ("quote = 'it''s'", True), ("i = 5", True), ("i = 5.0", True), ("i <> 5", False),
    ("d = 2.5", True), ("big = 3000000000", True), ("t = TRUE", True), ("f = TRUE", False),
    ("t <> f", True), ("(i > 1) = TRUE", True), ("(i > 1) = (d > 1)", True),
    ("missing = 1", UNKNOWN), ("missing <> 1", UNKNOWN), ("missing = missing", UNKNOWN),
    ("1 = missing", UNKNOWN), ("(missing = 1) = TRUE", UNKNOWN),
    # ordering
    ("i > 4", True), ("i > 5", False), ("i >= 5", True), ("i < 5", False), ("i <= 5", True),
    ("i < 5.5", True), ("d > 2", True), ("d >= 2.5", True), ("d < i", True), ("big > i", True),
    ("missing > 1", UNKNOWN), ("missing <= 1", UNKNOWN), ("i < missing", UNKNOWN),
    # arithmetic and numeric promotion
    ("i + 1 = 6", True), ("i - 7 = -2", True), ("i * 2 = 10", True), ("i / 2 = 2", True),
    ("-i / 2 = -2", True), ("i / 2.0 = 2.5", True), ("d * 2 = 5", True), ("d * 2 = 5.0", True),
    ("i + d = 7.5", True), ("1 + 2 * 3 = 7", True), ("(1 + 2) * 3 = 9", True), ("10 - 4 - 3 = 3", True),
    ("12 / 3 / 2 = 2", True), ("-i = -5", True), ("- -i = 5", True), ("+i = 5", True), ("-(i) < 0", True),
    ("i / zero = 1", UNKNOWN), ("i / 0.0 > 1000", True), ("-i / 0.0 < -1000", True),
    ("missing + 1 = 1", UNKNOWN), ("missing * 0 = 0", UNKNOWN), ("-missing = 0", UNKNOWN),
    ("0x1F = 31", True), ("0X1f = 31", True), ("010 = 8", True), ("7L = 7", True), ("7l = 7", True),
    ("1e3 = 1000", True), ("1E+3 = 1000", True), ("25e-1 = d", True), (".5 * 5 = d", True),
    ("5. = 5", True), ("2.5f = d", True), ("2.5D = d", True), ("0 = 0", True),
    ("9223372036854775807 > 0", True), ("-9223372036854775807 < 0", True),
    # BETWEEN
    ("i BETWEEN 1 AND 5", True), ("i BETWEEN 6 AND 9", False), ("i BETWEEN 5 AND 1", False),
    ("d BETWEEN 2 AND 3", True), ("i BETWEEN 2 + 2 AND i * 1", True), ("i NOT BETWEEN 1 AND 5", False),
    ("i NOT BETWEEN 6 AND 9", True), ("missing BETWEEN 1 AND 5", UNKNOWN),
    ("missing NOT BETWEEN 1 AND 5", UNKNOWN), ("i BETWEEN missing AND 10", UNKNOWN),
    ("i BETWEEN missing AND 1", False), ("i NOT BETWEEN missing AND 1", True),
    # IN
    ("s IN ('red')", True), ("s IN ('blue', 'red', 'green')", True), ("s IN ('blue')", False),
    ("s NOT IN ('blue')", True), ("s NOT IN ('red', 'x')", False), ("quote IN ('it''s')", True),
    ("i IN ('5')", False), ("i NOT IN ('5')", False), ("missing IN ('red')", UNKNOWN),
    # LIKE
    ("s LIKE 'red'", True), ("s LIKE 're%'", True), ("s LIKE '%ed'", True), ("s LIKE '%e%'", True),
    ("s LIKE '%'", True), ("s LIKE '___'", True), ("s LIKE '__'", False), ("s LIKE 'r_d'", True),
    ("s LIKE 'R%'", False), ("s LIKE 'r%d%'", True), ("s LIKE 'x%'", False), ("s NOT LIKE 'x%'", True),
    ("s LIKE ''", False), ("quote LIKE 'it''%'", True), ("s LIKE '.*'", False), ("s LIKE 'r[e]d'", False),
    ("pct LIKE '100!%' ESCAPE '!'", True), ("pct LIKE '100!%%' ESCAPE '!'", True),
    ("pct LIKE '1!00%' ESCAPE '!'", False), ("pct LIKE '100%' ESCAPE '!'", True),
    ("bang LIKE 'a!!b' ESCAPE '!'", True), ("bang LIKE 'a!b' ESCAPE '!'", True),
    ("bang LIKE 'a!_b' ESCAPE '!'", False), ("under LIKE 'a!_b' ESCAPE '!'", True),
    ("multi LIKE 'a%b'", True), ("multi LIKE 'a_b'", True), ("i LIKE '5'", False), ("i NOT LIKE '5'", False),
    # IS [NOT] NULL
    ("s IS NULL", False), ("s IS NOT NULL", True), ("missing IS NULL", True), ("missing IS NOT NULL", False),
    ("missing + 1 IS NULL", True), ("i + 1 IS NOT NULL", True), ("(missing = 1) IS NULL", True),
    # identifiers as conditions
    ("t", True), ("f", False), ("missing", UNKNOWN), ("(t)", True), ("s", False), ("NOT s", True),
    # comparisons of non-like types are FALSE (JMS 1.1), never errors; arithmetic on them is NULL
    ("s = 5", False), ("s > 5", False), ("s <> 5", False), ("t = 1", False), ("t > 0", False),
    ("s < quote", False), ("t < f", False), ("s + 1 = 1", UNKNOWN), ("-s = 1", UNKNOWN),
    ("raw = 'bytes'", False), ("raw <> 'bytes'", False), ("raw IS NULL", False), ("NOT (s > 5)", True),
    ("s = i", False), ("s BETWEEN 1 AND 9", False), ("s NOT BETWEEN 1 AND 9", False), ("NOT (s = 5)", True),
    # keywords are case-insensitive, identifiers are not
    ("s like 'r%' and i between 1 And 9 oR FALSE", True), ("S = 'red'", UNKNOWN), ("i is not null", True),
    # NOT binds looser than comparisons (SQL-92 / JMS), tighter than AND
    ("NOT i = 4", True), ("NOT i = 5 OR t", True), ("NOT f AND f", False), ("NOT s IN ('x')", True),
    # comments are whitespace (as in ActiveMQ)
    ("i /* five */ = 5", True),
]  # fmt: skip

EXTRA = {"pct": "100%", "bang": "a!b", "under": "a_b", "multi": "a\nb"}


@pytest.mark.parametrize(("text", "expected"), OPERATORS)
def test_operators(text: str, expected: bool | None) -> None:
    selector = compile_selector(text)
    msg = message(**EXTRA)
    assert selector.evaluate(msg) is expected
    assert selector.matches(msg) is (expected is True)


# -- STOMP headers are strings: conversion as ActiveMQ's STOMP transport does ------

STRING_CONVERSION = [
    ("num_text > 5", True), ("num_text = 10", True), ("num_text = 10.0", True), ("num_text < 10.5", True),
    ("num_text BETWEEN 1 AND 20", True), ("num_text = '10'", True), ("float_text = 2.5", True),
    ("float_text > 2", False),  # Integer.valueOf("2.5") fails: non-like types
    ("bool_text = TRUE", True), ("s = FALSE", True),  # Boolean.valueOf: anything but "true" is false
    ("i = '5'", True), ("i = '5.0'", False), ("d = '2.5'", True), ("t = 'TRUE'", True),
    ("spaced = 7", False), ("spaced = 7.0", True),  # Double.valueOf trims, Integer.valueOf does not
    ("plus = 4", True), ("suffixed = 1.5", True), ("huge = 5", False), ("huge = 3000000000", True),
    ("num_text + 1 = 11", UNKNOWN),  # no conversion in arithmetic
    ("num_text > s", False), ("num_text IN ('10')", True), ("s > 5", False), ("s <> 5", False),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), STRING_CONVERSION)
def test_stomp_string_conversion(text: str, expected: bool | None) -> None:
    extra = {"spaced": " 7 ", "plus": "+4", "suffixed": "1.5d", "huge": "3000000000"}
    assert evaluate(text, **extra) is expected


@pytest.mark.parametrize(
    "text", ["num_text > 5", "num_text = 10", "bool_text = TRUE", "i = '5'", "float_text = 2.5"]
)
def test_strict_jms_does_not_convert(text: str) -> None:
    assert evaluate(text, JMS) is False


# -- JMS header fields ---------------------------------------------------------------


def test_header_fields() -> None:
    msg = Message(
        message_id="ID:abc-1",
        correlation_id="corr",
        type="order",
        persistent=True,
        priority=7,
        timestamp=1_700_000_000_000,
        expiration=0,
        redelivered=True,
        redelivery_count=2,
        properties={"JMSPriority_shadow": 1},
    )
    for text in [
        "JMSDeliveryMode = 'PERSISTENT'",
        "JMSPriority = 7",
        "JMSPriority > 4",
        "JMSMessageID = 'ID:abc-1'",
        "JMSMessageID LIKE 'ID:%'",
        "JMSTimestamp > 1600000000000",
        "JMSCorrelationID = 'corr'",
        "JMSType = 'order'",
        "JMSExpiration = 0",
        "JMSRedelivered",
        "JMSXDeliveryCount = 3",
    ]:
        assert compile_selector(text).matches(msg), text
    plain = Message()
    for text in ["JMSDeliveryMode = 'NON_PERSISTENT'", "JMSPriority = 4", "JMSCorrelationID IS NULL",
                 "JMSType IS NULL", "JMSMessageID IS NULL", "NOT JMSRedelivered"]:  # fmt: skip
        assert compile_selector(text).matches(plain), text
    assert compile_selector("jmspriority IS NULL").matches(plain)  # identifiers are case-sensitive


def test_works_on_every_message_type() -> None:
    selector = compile_selector("kind = 'x'")
    assert selector.matches(BytesMessage(properties={"kind": "x"}, body=b"\x00"))
    assert selector.matches(TextMessage(properties={"kind": "x"}, text="hi"))
    assert not selector.matches(Message())


# -- dialects and the API ----------------------------------------------------------------


def test_mismatch_can_be_unknown() -> None:
    """The reading of the issue text: non-like types make UNKNOWN (not the default)."""
    unknown = Dialect(mismatch_is_false=False)
    assert evaluate("s > 5", unknown) is UNKNOWN
    assert evaluate("NOT (s > 5)", unknown) is UNKNOWN
    assert evaluate("s NOT LIKE 'x'", unknown, s=5) is UNKNOWN
    assert evaluate("NOT s", unknown) is UNKNOWN


def test_activemq_dialect_reproduces_activemq() -> None:
    msg = message()
    assert compile_selector("s <> 5", dialect=ACTIVEMQ_STOMP).evaluate(msg) is True
    assert compile_selector("i NOT LIKE 'x'", dialect=ACTIVEMQ_STOMP).evaluate(msg) is True
    assert compile_selector("i IN ('x')", dialect=ACTIVEMQ_STOMP).evaluate(msg) is None
    assert compile_selector("NOT (s > 5)", dialect=ACTIVEMQ_STOMP).evaluate(msg) is True
    assert compile_selector("missing = missing", dialect=ACTIVEMQ_STOMP).evaluate(msg) is True
    assert compile_selector("'x' = missing", dialect=ACTIVEMQ_STOMP).evaluate(msg) is False
    assert compile_selector("i / 2 = 2.5", dialect=ACTIVEMQ_STOMP).evaluate(msg) is True
    assert compile_selector("s > quote", dialect=ACTIVEMQ_STOMP).evaluate(msg) is True  # "red" > "it's"


@pytest.mark.parametrize(("text", "properties", "activemq", "default"), [
    ("0 < -(n * (3000000000 * 3000000000))", {"n": 2}, True, False),  # a long wraps at 64 bits (issue 38)
    ("2147483647 + 1 < 0", {}, True, False),  # int op int wraps at 32 bits
    ("n * 2147483647 < 0", {"n": 2}, True, False),
    ("n * 3000000000 > 0", {"n": 2}, True, True),  # int op long: a long, no 32-bit wrap
    ("-n < 0", {"n": -(2**31)}, True, False),  # -Integer.MIN_VALUE is itself
    ("-n < 0", {"n": -(2**63)}, True, False),  # -Long.MIN_VALUE is itself
    ("n + 1.0 > 0", {"n": 2**31 - 1}, True, True),  # double arithmetic never wraps
])
def test_the_activemq_dialect_wraps_exact_arithmetic_as_java(text: str, properties: dict[str, Any],
                                                             activemq: bool, default: bool) -> None:
    msg = TextMessage(properties=properties)
    assert compile_selector(text, dialect=ACTIVEMQ_STOMP).evaluate(msg) is activemq
    assert compile_selector(text).evaluate(msg) is default


def test_selector_keeps_text_and_is_cached() -> None:
    clear_cache()
    first = compile_selector("color = 'red' AND weight > 2")
    assert isinstance(first, Selector)
    assert first.text == "color = 'red' AND weight > 2"
    assert compile_selector("color = 'red' AND weight > 2") is first
    assert compile_selector("color = 'red' AND weight > 2", dialect=JMS) is not first
    assert repr(first) == "Selector(\"color = 'red' AND weight > 2\")"
    clear_cache()
    assert compile_selector("color = 'red' AND weight > 2") is not first


def test_matches_returns_plain_bools() -> None:
    msg = TextMessage(properties={"color": "red", "weight": "3"})
    for text in ["color = 'red' AND weight > 2", "missing = 1", "color = 'red'", "NOT color = 'red'"]:
        assert compile_selector(text).matches(msg) in (True, False)
    assert compile_selector("color = 'red' AND weight > 2").matches(msg) is True
