"""ActiveMQ's map transformations on the embedded broker, through the real gateway process.

stomp.py clients SEND with ``transformation: jms-map-xml`` / ``jms-map-json``
and SUBSCRIBE asking for a transformation: the message travels as a
MapMessage and comes out in the form the subscriber asked for.  An unknown
transformation and ``jms-object-*`` get an ERROR naming them (never a
receipted frame left unanswered); a subscriber that asked for no
transformation gets the map in the form it was sent (stomp.py's own test; a
map from elsewhere meets the GlassFish rule, test_transform_gateway).  The
differential test sends the same maps to a real ActiveMQ and checks that the
gateway writes the same bodies (parsed: entry order may differ).
"""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ElementTree
from typing import Any

import pytest

from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401 - the broker fixture
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client, StompClients

XML_MAP = """<map>
    <entry>
        <string>name</string>
        <string>Dejan</string>
    </entry>
    <entry>
        <string>city</string>
        <string>Belgrade</string>
    </entry>
</map>"""

JSON_MAP = '{"map":{"entry":[{"string":["name","Dejan"]},{"string":["city","Belgrade"]}]}}'

TYPED_XML = (
    "<map><entry><string>name</string><string>Dejan</string></entry>"
    "<entry><string>digits</string><string>0123</string></entry>"
    "<entry><string>number</string><string>123</string></entry>"
    "<entry><string>age</string><int>5</int></entry>"
    "<entry><string>big</string><long>9999999999</long></entry>"
    "<entry><string>pi</string><double>3.5</double></entry>"
    "<entry><string>whole</string><double>3.0</double></entry>"
    "<entry><string>tiny</string><double>1.0E-5</double></entry>"
    "<entry><string>ok</string><boolean>true</boolean></entry>"
    "<entry><string>esc</string><string>a&amp;b &lt;c&gt; \"q\" 'z' / \\</string></entry>"
    "<entry><string>nothing</string><null/></entry>"
    "</map>"
)


def queue_name() -> str:
    return f"/queue/map.{uuid.uuid4().hex[:8]}"


def xml_entries(body: bytes) -> list[tuple[str, str, str | None]]:
    """(key, value element, text) per entry of an XStream XML map, sorted."""
    root = ElementTree.fromstring(body)
    assert root.tag == "map"
    out = []
    for entry in root:
        key, value = list(entry)
        out.append((key.text or "", value.tag, value.text))
    return sorted(out)


def json_entries(body: bytes) -> list[str]:
    """The entries of an XStream JSON map as canonical JSON texts, sorted."""
    content = json.loads(body)["map"]
    if not content:
        return []
    entries = content["entry"]
    return sorted(json.dumps(entry, sort_keys=True) for entry in (entries if isinstance(entries, list) else [entries]))


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_jms_map_xml_round_trip(stomp: StompClients, version: str) -> None:
    """stomp.py's own broker test: a jms-map-xml SEND (with content-length, as stomp.py sends it)."""
    queue = queue_name()
    consumer = stomp.connect(version)
    consumer.subscribe(queue, transformation="jms-map-xml")
    producer = stomp.connect(version)
    producer.send(queue, XML_MAP, receipt=True, transformation="jms-map-xml")
    message = consumer.message()
    assert message.headers["transformation"] == "jms-map-xml"
    assert xml_entries(message.body) == [("city", "string", "Belgrade"), ("name", "string", "Dejan")]
    assert message.body.startswith(b"<map>\n  <entry>\n    <string>")


def test_jms_map_json_round_trip_and_across_forms(stomp: StompClients) -> None:
    queue = queue_name()
    as_json = stomp.connect()
    as_json.subscribe(queue, "j", transformation="jms-map-json")
    producer = stomp.connect(text=True)
    producer.send(queue, '{"map":{"entry":[{"string":["name","Dejan"]},{"string":"age","int":5}]}}',
                  receipt=True, transformation="jms-map-json")
    producer.send(queue, XML_MAP, receipt=True, transformation="jms-map-xml")
    first, second = as_json.messages(2)
    assert first.headers["transformation"] == "jms-map-json"
    assert json_entries(first.body) == sorted(['{"int": 5, "string": "age"}', '{"string": ["name", "Dejan"]}'])
    assert json_entries(second.body) == sorted(['{"string": ["city", "Belgrade"]}', '{"string": ["name", "Dejan"]}'])


def test_jms_byte_makes_a_bytes_message(stomp: StompClients) -> None:
    queue = queue_name()
    consumer = stomp.connect()
    consumer.subscribe(queue)
    producer = stomp.connect(text=True)  # no content-length: a TextMessage without the transformation
    producer.send(queue, "raw", receipt=True, transformation="jms-byte")
    message = consumer.message()
    assert message.body == b"raw" and message.headers["content-length"] == "3"


@pytest.mark.parametrize("name", ["no-such-transformation", "jms-object-xml", "jms-object-json"])
def test_refused_transformations_get_an_error_naming_them(stomp: StompClients, name: str) -> None:
    queue = queue_name()
    consumer = stomp.connect()
    consumer.subscribe(queue)
    producer = stomp.connect()
    receipt = uuid.uuid4().hex
    producer.connection.send(queue, "<string>payload</string>", headers={"transformation": name, "receipt": receipt})
    error = producer.error(timeout=10)
    assert error is not None, "neither RECEIPT nor ERROR"
    assert error.headers["receipt-id"] == receipt
    assert name.encode() in error.body
    if name.startswith("jms-object"):
        assert b"object messages are not supported" in error.body
    else:
        assert b"unknown transformation" in error.body
    assert consumer.no_message()


def test_a_bad_map_body_gets_an_error_naming_the_transformation(stomp: StompClients) -> None:
    producer = stomp.connect()
    producer.connection.send(queue_name(), "not xml", headers={"transformation": "jms-map-xml", "receipt": "r"})
    error = producer.error(timeout=10)
    assert error is not None and error.headers["receipt-id"] == "r"
    assert b"jms-map-xml: the body is not a map" in error.body


@pytest.mark.parametrize("form", ["jms-map-xml", "jms-map-json"])
def test_a_subscriber_without_transformation_gets_the_map_as_it_was_sent(stomp: StompClients, form: str) -> None:
    """stomp.py's own broker test (TestMessageTransform): an auto-ack subscriber that asks for no
    transformation gets the map in the form it was sent, with the ``transformation`` header saying
    which, as ActiveMQ hands it back; the RECEIPT comes too."""
    queue = queue_name()
    plain = stomp.connect()
    plain.subscribe(queue)
    body = XML_MAP if form == "jms-map-xml" else JSON_MAP
    stomp.connect().send(queue, body, receipt=True, transformation=form)
    message = plain.message()
    assert message.headers["transformation"] == form
    if form == "jms-map-xml":
        assert xml_entries(message.body) == [("city", "string", "Belgrade"), ("name", "string", "Dejan")]
    else:
        expected = ['{"string": ["city", "Belgrade"]}', '{"string": ["name", "Dejan"]}']
        assert json_entries(message.body) == expected
    assert plain.error(timeout=0.2) is None


# -- the same bodies as a real ActiveMQ ----------------------------------------------------------


def bodies_from(address: tuple[str, int], body: str, send_as: str) -> dict[str, Any]:
    """Send ``body`` once per subscriber form and collect what each subscriber got."""
    out: dict[str, Any] = {}
    for form in ("jms-map-xml", "jms-map-json"):
        queue = queue_name()
        consumer = Client(address)
        producer = Client(address, text=True)  # ActiveMQ makes a BytesMessage of a SEND with content-length
        try:
            consumer.subscribe(queue, transformation=form)
            producer.send(queue, body, receipt=True, transformation=send_as)
            message = consumer.message()
            out[form] = (message.headers.get("transformation"), message.body)
        finally:
            producer.disconnect()
            consumer.disconnect()
    return out


@pytest.mark.parametrize("body", [XML_MAP, TYPED_XML, "<map/>",
                                  "<map><entry><string>one</string><string>1</string></entry></map>"])
def test_map_bodies_match_activemq(activemq: ActiveMQBroker, gateway: GatewayProcess,  # noqa: F811
                                   body: str) -> None:
    host, port = activemq.stomp_uri.split("//")[1].split(":")
    theirs = bodies_from((host, int(port)), body, "jms-map-xml")
    ours = bodies_from(gateway.address, body, "jms-map-xml")
    assert ours["jms-map-xml"][0] == theirs["jms-map-xml"][0] == "jms-map-xml"
    assert ours["jms-map-json"][0] == theirs["jms-map-json"][0] == "jms-map-json"
    assert xml_entries(ours["jms-map-xml"][1]) == xml_entries(theirs["jms-map-xml"][1])
    assert json_entries(ours["jms-map-json"][1]) == json_entries(theirs["jms-map-json"][1])
    if body.count("<entry>") <= 1:  # one entry or none: no order to differ, the bytes are the same
        assert ours == theirs
