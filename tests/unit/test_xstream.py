"""ActiveMQ's XStream map forms (:mod:`gateway.message.xstream`).

The expected texts are what a real ActiveMQ 5.17 (XStream 1.4, Jettison 1.5)
wrote for the same maps on this machine; the integration test
``test_map_transformations.py`` compares against a live broker too.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.message.xstream import decode_json, decode_xml, encode_json, encode_xml, java_double_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3.0, "3.0"), (3.5, "3.5"), (1e20, "1.0E20"), (1e-5, "1.0E-5"), (123456789.0, "1.23456789E8"),
        (1e7, "1.0E7"), (9999999.0, "9999999.0"), (0.001, "0.001"), (0.0001, "1.0E-4"), (-0.0, "-0.0"),
        (0.0, "0.0"), (float("nan"), "NaN"), (float("-inf"), "-Infinity"), (-2.5e-10, "-2.5E-10"),
    ],
)
def test_java_double_text(value: float, text: str) -> None:
    assert java_double_text(value) == text


def test_xml_is_written_as_activemq_writes_it() -> None:
    assert encode_xml({"a": "b", "n": 3}) == (
        "<map>\n  <entry>\n    <string>a</string>\n    <string>b</string>\n  </entry>\n"
        "  <entry>\n    <string>n</string>\n    <int>3</int>\n  </entry>\n</map>"
    )
    assert encode_xml({}) == "<map/>"
    assert encode_xml({"nul": None}) == "<map>\n  <entry>\n    <string>nul</string>\n    <null/>\n  </entry>\n</map>"
    assert "<string>a&amp;&lt;&gt;&quot;&apos;\t</string>" in encode_xml({"k": "a&<>\"'\t"})
    assert "<long>9999999999</long>" in encode_xml({"k": 9999999999})
    assert "<double>2.0</double>" in encode_xml({"k": 2.0})
    assert "<boolean>true</boolean>" in encode_xml({"k": True})
    assert "<byte-array>AAEC</byte-array>" in encode_xml({"k": b"\x00\x01\x02"})


def test_json_is_written_as_activemq_writes_it() -> None:
    assert encode_json({"a": "b", "n": 3}) == '{"map":{"entry":[{"string":["a","b"]},{"string":"n","int":3}]}}'
    assert encode_json({"one": "1"}) == '{"map":{"entry":{"string":["one",1]}}}'  # one entry: no list
    assert encode_json({}) == '{"map":""}'
    assert encode_json({"nul": None}) == '{"map":{"entry":{"string":"nul","null":""}}}'
    assert encode_json({"k": 3.0}) == '{"map":{"entry":{"string":"k","double":3}}}'
    assert encode_json({"k": 1e20}) == '{"map":{"entry":{"string":"k","double":1.0E20}}}'
    assert encode_json({"k": 1e-5}) == '{"map":{"entry":{"string":"k","double":"1.0E-5"}}}'
    assert encode_json({"k": float("nan")}) == '{"map":{"entry":{"string":"k","double":"NaN"}}}'
    assert encode_json({"k": "a/b\n"}) == '{"map":{"entry":{"string":["k","a\\/b\\n"]}}}'


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("123", "123"), ("-3", "-3"), ("1.5", "1.5"), ("1.0", "1"), ("2147483648", "2147483648"), ("true", "true"),
        ("false", "false"), ("TRUE", '"TRUE"'), ("007", '"007"'), ("1e5", '"1e5"'), ("-0", '"-0"'), (" 4", '" 4"'),
        ("NaN", '"NaN"'), ("+7", '"+7"'), ("1.", '"1."'), (".5", '".5"'), ("", '""'), ("null", '"null"'),
        ("99999999999999999999", '"99999999999999999999"'), ("-", '"-"'),
    ],
)
def test_json_strings_that_read_back_as_numbers_are_written_as_jettison_does(text: str, written: str) -> None:
    assert encode_json({"k": text}) == f'{{"map":{{"entry":{{"string":["k",{written}]}}}}}}'


MAP: dict[str, Any] = {
    "s": "Dejan", "digits": "123", "i": 5, "l": 2**40, "d": 2.5, "t": True, "f": False, "b": b"\x00\xff",
    "nul": None, "esc": "a&<>\"'\t\r\n/\\ ž €", "": "empty key",
}


def test_round_trips() -> None:
    assert decode_xml(encode_xml(MAP)) == MAP
    assert decode_json(encode_json(MAP)) == MAP
    assert decode_xml(encode_xml({})) == {} and decode_json(encode_json({})) == {}


def test_activemq_inputs_are_read() -> None:
    xml = ("<map><entry><string>sh</string><short>7</short></entry><entry><string>c</string><char>x</char>"
           "</entry><entry><string>fl</string><float>1.25</float></entry><entry><string>e</string><string/>"
           "</entry></map>")
    assert decode_xml(xml) == {"sh": 7, "c": "x", "fl": 1.25, "e": ""}
    assert decode_xml(b"<map/>") == {}
    assert decode_json('{"map":{"entry":[{"string":["a",1]},{"string":"d","double":"2"},'
                       '{"string":"t","boolean":"true"},{"string":"n","long":3}]}}') == {
        "a": "1", "d": 2.0, "t": True, "n": 3}
    assert decode_json('{"map":{"entry":{"string":["a",5]}}}') == {"a": "5"}
    assert decode_json('{"map":""}') == {}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("not xml", "not XML"),
        ("<list/>", "root element is <list>"),
        ("<map><item/></map>", "holds a <item>"),
        ("<map><entry><string>k</string></entry></map>", "a <string> key and one value"),
        ("<map><entry><string>k</string><int>x</int></entry></map>", "'x' is not a int"),
        ("<map><entry><string>k</string><date>1</date></entry></map>", "type 'date'"),
        ('<!DOCTYPE map [<!ENTITY a "b">]><map/>', "DOCTYPE"),
    ],
)
def test_bad_xml_says_what_is_wrong(body: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_xml(body)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("{", "not JSON"),
        ('{"a": 1}', "not an XStream map"),
        ('{"map":{"entry":[{"int":1}]}}', "no string key"),
        ('{"map":{"entry":{"string":"k"}}}', "no single value"),
    ],
)
def test_bad_json_says_what_is_wrong(body: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_json(body)


def test_values_no_jms_map_holds_are_refused() -> None:
    with pytest.raises(ValueError, match="entry 'k': a list value has no JMS map type"):
        encode_json({"k": [1]})
    with pytest.raises(ValueError, match="does not fit a Java long"):
        encode_xml({"k": 2**64})
