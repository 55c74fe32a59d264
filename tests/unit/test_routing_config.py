"""Routing configuration: TOML routes, the JMS-Bridge properties syntax, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import ConfigError
from gateway.java_properties import parse_properties
from gateway.message.model import TextMessage
from gateway.routing.config import parse_routing_config

BRIDGE_PROPERTIES = """
# from the JMS-Bridge documentation
routing.dead-letter-topic=jms-bridge-to-kafka-dead-letter-topic
routes.fooRoute.name=fooRoute
routes.fooRoute.in.include=msg.address==foo-topic
routes.fooRoute.out.topic=foobar-topic
routes.fooRoute.conv.key=msg.header.CorrelationId
routes.barRoute.name=barRoute
routes.barRoute.in.include=msg.address==bar-topic
routes.barRoute.out.topic=foobar-topic
routes.barRoute.map.key=msg.header.CorrelationId
"""


def test_properties_reader_handles_separators_comments_and_continuations() -> None:
    text = "a=1\n! comment\n  b : two words \nc three\nd=x\\\n   y\ne=\\u0041\\tz\nf\n"
    assert parse_properties(text) == [
        ("a", "1"),
        ("b", "two words "),  # Java keeps trailing blanks
        ("c", "three"),
        ("d", "xy"),
        ("e", "A\tz"),
        ("f", ""),
    ]


def test_value_may_contain_equals_signs() -> None:
    assert parse_properties("routes.r.in.include=msg.address==foo") == [("routes.r.in.include", "msg.address==foo")]


def test_jms_bridge_properties_are_accepted_unchanged() -> None:
    config = parse_routing_config({"properties": BRIDGE_PROPERTIES}, "gw.toml")
    assert [r.name for r in config.routes] == ["fooRoute", "barRoute"]
    assert config.dead_letter_topic == "jms-bridge-to-kafka-dead-letter-topic"
    foo, bar = config.routes
    assert foo.topic == "foobar-topic" and foo.key == "msg.header.CorrelationId"
    assert bar.key == "msg.header.CorrelationId"  # map.key is an alias of conv.key
    assert foo.matches(TextMessage(destination="/topic/foo-topic"))
    assert not foo.matches(TextMessage(destination="/topic/bar-topic"))
    assert config.on_soft_failure == "stop"


def test_dotted_dead_letter_key_is_accepted() -> None:
    config = parse_routing_config({"properties": "routing.dead-letter.topic=dlq"})
    assert config.dead_letter_topic == "dlq"


def test_later_keys_override_earlier_ones_and_order_is_first_appearance() -> None:
    text = (
        "routes.a.in.include=msg.address==x\nroutes.a.out.topic=first\n"
        "routes.b.in.include=msg.address==y\nroutes.b.out.topic=tb\n"
        "routes.a.out.topic=second\n"
    )
    config = parse_routing_config({"properties": text})
    assert [(r.name, r.topic) for r in config.routes] == [("a", "second"), ("b", "tb")]


def test_toml_routes_come_before_property_routes() -> None:
    raw = {
        "routes": [{"name": "t1", "include": "msg.address == 'orders'", "topic": "orders-topic", "key": "Type"}],
        "properties": "routes.p1.in.include=msg.address==foo\nroutes.p1.out.topic=foo-topic\n",
        "on_soft_failure": "skip",
    }
    config = parse_routing_config(raw)
    assert [r.name for r in config.routes] == ["t1", "p1"]
    assert config.routes[0].key == "Type"
    assert config.on_soft_failure == "skip"


def test_properties_file_is_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "jms-bridge.properties").write_text(BRIDGE_PROPERTIES + "bridge.id=ignored\n")
    config = parse_routing_config({"properties_file": "jms-bridge.properties"}, str(tmp_path / "gw.toml"))
    assert len(config.routes) == 2


def test_missing_properties_file_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_routing_config({"properties_file": "nope.properties"}, str(tmp_path / "gw.toml"))
    assert info.value.key == "routing.properties_file"
    assert "gw.toml" in str(info.value)


def test_per_route_policy_and_aliases() -> None:
    text = (
        "routing.dead-letter-topic=dlq\nrouting.on-soft-failure=log-and-skip\n"
        "routes.a.in.include=msg.address==x\nroutes.a.out.topic=t\nroutes.a.on-soft-failure=log-and-dead-letter\n"
        "routes.b.in.include=msg.address==y\nroutes.b.out.topic=t\n"
    )
    config = parse_routing_config({"properties": text})
    a, b = config.routes
    assert config.policy_for(a) == "dead-letter"
    assert config.policy_for(b) == "skip"


@pytest.mark.parametrize(
    ("raw", "key", "words"),
    [
        ({"routs": []}, "routing.routs", "did you mean 'routes'"),
        ({"properties": "routes.a.out.topik=t"}, "routes.a.out.topik", "did you mean 'out.topic'"),
        ({"properties": "routing.dead-leter-topic=x"}, "routing.dead-leter-topic", "unknown routing property"),
        ({"properties": "routes.a.in.include=msg.address==x"}, "routes.a.out.topic", "has no topic"),
        ({"properties": "routes.a.out.topic=t"}, "routes.a.in.include", "no include predicate"),
        ({"routes": [{"name": "a", "include": "msg.address == x", "topic": "t", "colour": "x"}]},
         "routing.routes[0].colour", "unknown key"),
        ({"routes": [{"name": "a", "include": "msg.adress == x", "topic": "t"}]},
         "routing.routes[0].include", "bad include predicate"),
        ({"routes": [{"name": "a", "selector": "color = ", "topic": "t"}]},
         "routing.routes[0].selector", "bad selector"),
        ({"on_soft_failure": "explode"}, "routing.on_soft_failure", "expected one of stop, skip, dead-letter"),
        ({"on_soft_failure": "dead-letter", "routes": [{"name": "a", "include": "msg.address==x", "topic": "t"}]},
         "routing.dead_letter_topic", "no dead-letter topic"),
        ({"routes": [{"name": "a", "include": "msg.address==x", "topic": "t"}],
          "properties": "routes.a.in.include=msg.address==y\nroutes.a.out.topic=t2"},
         "routing.routes", "used twice"),
    ],
)
def test_bad_config_names_the_key(raw: dict[str, object], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_routing_config(raw, "etc/gw.toml")
    assert info.value.key == key
    assert words in str(info.value)
    assert "etc/gw.toml" in str(info.value)


def _escape(text: str, *, key: bool) -> str:
    """Write ``text`` as java.util.Properties.store would (the parts we read)."""
    out = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char in "=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif ord(char) > 126 or ord(char) < 32:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


@given(st.lists(st.tuples(
    st.text(alphabet=st.characters(codec="utf-16", exclude_categories=["Cs"], max_codepoint=0xFFFF), min_size=1,
            max_size=15),
    st.text(alphabet=st.characters(codec="utf-16", exclude_categories=["Cs"], max_codepoint=0xFFFF), max_size=30),
), max_size=6))
def test_properties_reader_reads_what_java_writes(pairs: list[tuple[str, str]]) -> None:
    text = "\n".join(f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in pairs)
    assert parse_properties(text) == pairs


def test_a_malformed_unicode_escape_is_a_config_error_naming_the_key() -> None:
    r"""Java refuses ``\u`` without four hex digits (IllegalArgumentException); so does the gateway,
    naming where, instead of reading the text some other way."""
    with pytest.raises(ConfigError) as caught:
        parse_routing_config({"properties": "routes.r.out.topic=t\\u12"}, "gw.toml")
    assert caught.value.key == "routing.properties" and "\\u12" in caught.value.problem
