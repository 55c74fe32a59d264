"""ActiveMQ's XStream forms of a JMS map body: XML (``jms-map-xml``) and JSON (``jms-map-json``).

ActiveMQ 5 turns a ``javax.jms.MapMessage`` into text with XStream: XML
written by XStream's pretty printer, or JSON written through Jettison's
"mapped" convention.  This module reads both forms into a Python map and
writes a map back the way ActiveMQ writes it, so a STOMP client written
for ActiveMQ parses what the gateway sends (checked against a real
ActiveMQ in ``tests/integration/test_map_transformations.py``):

* XML: ``<map>`` with one ``<entry>`` per key, the key as ``<string>``
  and the value as ``<string>``, ``<int>``, ``<long>``, ``<double>``,
  ``<boolean>``, ``<byte-array>`` (base64) or ``<null/>``; two-space
  indentation, an empty map is ``<map/>``.
* JSON: ``{"map":{"entry":[...]}}``; a string entry is
  ``{"string":[key,value]}``, any other ``{"string":key,"<type>":value}``;
  one entry is not wrapped in a list; an empty map is ``{"map":""}``.
  Jettison writes every text that reads back as the same number or
  boolean as a JSON number or boolean (``"123"`` becomes ``123``, but
  ``"007"`` and ``"1e5"`` stay strings); :func:`encode_json` does the same.

Python values map to Java types as ActiveMQ's do: ``str`` -> String,
``bool`` -> Boolean, ``int`` -> Integer (Long outside 32 bits), ``float``
-> Double, ``bytes`` -> byte[], ``None`` -> null.  Reading, Java's narrow
types widen: short and byte become ``int``, float becomes ``float``, char
becomes ``str``.  Everything here is a pure function; a body that is not
a map in the expected form raises :class:`ValueError` saying what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

_INT32 = range(-(2**31), 2**31)
_INT64 = range(-(2**63), 2**63)

# -- Java's text for values ----------------------------------------------------------------


def java_double_text(value: float) -> str:
    """``Double.toString(value)``: the text XStream writes for a Java double.

    Plain decimals for 10^-3 <= |value| < 10^7 (always with a fraction:
    ``3.0``), otherwise ``d.dddE<exponent>`` (``1.0E20``, ``1.0E-5``);
    ``NaN``, ``Infinity``, ``-0.0``.  The digits are the shortest that read
    back as the same double, as Python's ``repr`` gives them.
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits_tuple = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digits_tuple.digits)).rstrip("0") or "0"
    assert isinstance(digits_tuple.exponent, int)
    # value = 0.DIGITS x 10^point
    point = len(digits_tuple.digits) + digits_tuple.exponent
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        whole, fraction = digits[:point].ljust(point, "0"), digits[point:]
        return f"{sign}{whole}.{fraction or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def _value_element(value: Any) -> tuple[str, str | None]:
    """The XStream element name and text of one map value (None text: ``<null/>``)."""
    if value is None:
        return "null", None
    if isinstance(value, str):
        return "string", value
    if isinstance(value, bool):
        return "boolean", "true" if value else "false"
    if isinstance(value, int):
        if value in _INT32:
            return "int", str(value)
        if value in _INT64:
            return "long", str(value)
        raise ValueError(f"integer {value} does not fit a Java long")
    if isinstance(value, float):
        return "double", java_double_text(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "byte-array", base64.b64encode(bytes(value)).decode("ascii")
    raise ValueError(f"a {type(value).__name__} value has no JMS map type")


def _entries(entries: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    """(key, element name, text) per entry; ValueError naming the key of a bad value."""
    out = []
    for key, value in entries.items():
        try:
            kind, text = _value_element(value)
        except ValueError as error:
            raise ValueError(f"entry {key!r}: {error}") from None
        out.append((str(key), kind, text))
    return out


def _typed(kind: str, text: str | None, key: str) -> Any:
    """The Python value of an XStream element ``kind`` holding ``text``."""
    if kind == "null":
        return None
    text = "" if text is None else text
    try:
        if kind in ("string", "char"):
            return text
        if kind in ("int", "long", "short", "byte"):
            return int(text.strip())
        if kind in ("double", "float"):
            return float(text.strip())
        if kind == "boolean":
            return text.strip().lower() == "true"
        if kind == "byte-array":
            return base64.b64decode(text.strip(), validate=False)
    except (ValueError, binascii.Error):
        raise ValueError(f"entry {key!r}: {text[:40]!r} is not a {kind}") from None
    raise ValueError(f"entry {key!r} has the type {kind!r}, which a JMS map cannot hold")


# -- XML -------------------------------------------------------------------------------------

_XML_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;", "\r": "&#xd;"}
_XML_SPECIAL = re.compile(r"[&<>\"'\r\x00-\x08\x0b\x0c\x0e-\x1f]")


def _xml_text(text: str) -> str:
    return _XML_SPECIAL.sub(lambda m: _XML_ESCAPES.get(m.group(), f"&#x{ord(m.group()):x};"), text)


def encode_xml(entries: Mapping[str, Any]) -> str:
    """The map as ActiveMQ's ``jms-map-xml`` body; ValueError for a value no JMS map holds."""
    rows = _entries(entries)
    if not rows:
        return "<map/>"
    lines = ["<map>"]
    for key, kind, text in rows:
        lines.append("  <entry>")
        lines.append(f"    <string>{_xml_text(key)}</string>")
        lines.append(f"    <{kind}/>" if text is None else f"    <{kind}>{_xml_text(text)}</{kind}>")
        lines.append("  </entry>")
    lines.append("</map>")
    return "\n".join(lines)


def decode_xml(body: str | bytes) -> dict[str, Any]:
    """The map a ``jms-map-xml`` body holds; ValueError if it is not one."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    if b"<!DOCTYPE" in data.upper():
        raise ValueError("a DOCTYPE is not allowed in a map body")
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as error:
        raise ValueError(f"not XML ({error})") from None
    if root.tag != "map":
        raise ValueError(f"the root element is <{root.tag}>, not <map>")
    result: dict[str, Any] = {}
    for entry in root:
        if entry.tag != "entry":
            raise ValueError(f"<map> holds a <{entry.tag}>, not an <entry>")
        parts = list(entry)
        if len(parts) != 2 or parts[0].tag != "string":
            raise ValueError("an <entry> must hold a <string> key and one value")
        key = parts[0].text or ""
        result[key] = _typed(parts[1].tag, parts[1].text, key)
    return result


# -- JSON (Jettison's mapped convention) -----------------------------------------------------

_INTEGER = re.compile(r"-?[0-9]+")
_DECIMAL_CHARS = re.compile(r"-?[0-9.eE]+")


def _jettison_scalar(text: str) -> Any:
    """What Jettison writes for the XML text ``text``: a number or boolean when
    the text reads back as exactly that, else the string."""
    if not text:
        return text
    if not (text[0].isdigit() or text[0] == "-"):
        return {"true": True, "false": False}.get(text, text)
    if _INTEGER.fullmatch(text) and len(text.lstrip("-")) <= 19:
        number = int(text)
        if number in _INT64:
            return number if str(number) == text else text
    if (_DECIMAL_CHARS.fullmatch(text) and text.count(".") <= 1
            and text.count("e") + text.count("E") <= 1 and text != "-"):
        try:
            value = float(text)
        except ValueError:
            return text
        if math.isfinite(value) and java_double_text(value) == text:
            return value
    return text


def _json_number(value: float) -> str:
    """A double as Jettison writes it: Java's text without a trailing ``.0``."""
    text = java_double_text(value)
    if "." in text and "E" not in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _json_string(text: str) -> str:
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\/':
            out.append("\\" + char)
        elif char in "\b\t\n\f\r":
            out.append(json.dumps(char)[1:-1])
        elif code < 0x20 or 0x80 <= code < 0xA0 or 0x2000 <= code < 0x2100:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _json_value(text: str | None) -> str:
    if text is None:
        return '""'
    value = _jettison_scalar(text)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_number(value)
    return _json_string(value)


def encode_json(entries: Mapping[str, Any]) -> str:
    """The map as ActiveMQ's ``jms-map-json`` body; ValueError for a value no JMS map holds."""
    rows = _entries(entries)
    if not rows:
        return '{"map":""}'
    items = []
    for key, kind, text in rows:
        if kind == "string":
            items.append(f'{{"string":[{_json_value(key)},{_json_value(text)}]}}')
        else:
            items.append(f'{{"string":{_json_value(key)},"{kind}":{_json_value(text)}}}')
    joined = items[0] if len(items) == 1 else "[" + ",".join(items) + "]"
    return f'{{"map":{{"entry":{joined}}}}}'


def _java_text(value: Any) -> str:
    """The XML text Jettison reads for a JSON scalar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_text(value)
    if value is None:
        return ""
    if isinstance(value, str | int):
        return str(value)
    raise ValueError(f"{json.dumps(value)[:40]} is not a JSON scalar")


def is_xstream_json(document: Any) -> bool:
    """Whether a parsed JSON document has the XStream map form (``{"map": ...}``)."""
    if not isinstance(document, dict) or list(document) != ["map"]:
        return False
    content = document["map"]
    return content in ("", None) or (isinstance(content, dict) and set(content) <= {"entry"})


def decode_json_document(document: Any) -> dict[str, Any]:
    """The map a parsed ``jms-map-json`` document holds; ValueError if it is not one."""
    if not is_xstream_json(document):
        raise ValueError('not an XStream map ({"map":{"entry":[...]}})')
    content = document["map"]
    if not content:
        return {}
    found = content.get("entry", [])
    entries: Iterable[Any] = [found] if isinstance(found, dict) else found
    if not isinstance(entries, list):
        raise ValueError('"entry" is neither an object nor a list')
    result: dict[str, Any] = {}
    for entry in entries:
        if not isinstance(entry, dict) or "string" not in entry:
            raise ValueError(f"map entry {json.dumps(entry)[:60]} has no string key")
        strings = entry["string"]
        if isinstance(strings, list):
            if len(strings) != 2 or len(entry) != 1:
                raise ValueError(f"map entry {json.dumps(entry)[:60]} is not a key and a value")
            result[_java_text(strings[0])] = _java_text(strings[1])
            continue
        key = _java_text(strings)
        others = [(kind, value) for kind, value in entry.items() if kind != "string"]
        if len(others) != 1:
            raise ValueError(f"map entry {key!r} has no single value")
        kind, value = others[0]
        result[key] = _typed(kind, None if kind == "null" else _java_text(value), key)
    return result


def decode_json(body: str | bytes) -> dict[str, Any]:
    """The map a ``jms-map-json`` body holds; ValueError if it is not one."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"not JSON ({error})") from None
    return decode_json_document(document)
