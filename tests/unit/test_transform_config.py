"""parse_transform_config: defaults, the documented shape, and one clear error per mistake."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.transform.config import ChainEntry, TransformConfig, parse_transform_config

EXAMPLE = """
[transform]
plugin_dirs = ["plugins", "/opt/gw/plugins"]
blocked = ["route"]
on_error = "skip"

[transform.options.compress]
algorithm = "zlib"

[[transform.chain]]
transformer = "header-map"
destinations = ["/queue/orders.*"]
direction = "both"
on_error = "reject"
options = { rename = { "X-Old" = "x-new" } }

[[transform.chain]]
transformer = "compress"
destinations = ["/queue/big.*", "/topic/big"]
direction = "inbound"
on_error = "dead-letter"
dead_letter = "/queue/DLQ.transform"
options = { level = 9 }

[[transform.chain]]
transformer = "enrich"
"""


def parse(text: str) -> TransformConfig:
    return parse_transform_config(tomllib.loads(text).get("transform"), "gw.toml")


def error_of(raw: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_transform_config(raw, "gw.toml")
    return info.value


def test_absent_section_gives_defaults() -> None:
    config = parse_transform_config(None, "gw.toml")
    assert config.model_dump() == TransformConfig().model_dump() and config.path == "gw.toml"
    assert config.plugin_dirs == ("plugins",)
    assert config.blocked == ()
    assert config.load_entry_points is True
    assert config.transformation_header is True
    assert config.on_error == "reject"
    assert config.chain == ()
    assert parse_transform_config({}, "gw.toml").chain == ()


def test_documented_example_parses() -> None:
    config = parse(EXAMPLE)
    assert config.plugin_dirs == ("plugins", "/opt/gw/plugins")
    assert config.blocked == ("route",)
    assert config.on_error == "skip"
    assert dict(config.options["compress"]) == {"algorithm": "zlib"}
    header_map, compress, enrich = config.chain
    assert header_map.transformer == "header-map"
    assert header_map.destinations == ("/queue/orders.*",)
    assert header_map.on_error == "reject"
    assert dict(header_map.options) == {"rename": {"X-Old": "x-new"}}
    assert header_map.key == "transform.chain[0]"
    assert compress.direction == "inbound"
    assert compress.on_error == "dead-letter"
    assert compress.dead_letter == "/queue/DLQ.transform"
    # entries without their own policy take the section's
    assert enrich.on_error == "skip"
    assert enrich.destinations == ("*",)
    assert enrich.direction == "both"


def test_entry_options_merge_over_transformer_defaults() -> None:
    config = parse(EXAMPLE)
    compress = config.chain[1]
    assert dict(config.options_for("compress", compress)) == {"algorithm": "zlib", "level": 9}
    assert dict(config.options_for("compress")) == {"algorithm": "zlib"}
    assert dict(config.options_for("enrich", config.chain[2])) == {}


def test_globs_and_direction_match() -> None:
    entry = ChainEntry(transformer="x", destinations=("/queue/orders.*", "/topic/a"), direction="inbound")
    assert entry.matches("inbound", "/queue/orders.new")
    assert entry.matches("inbound", "/topic/a")
    assert not entry.matches("inbound", "/topic/ab")
    assert not entry.matches("inbound", "/queue/other")
    assert not entry.matches("outbound", "/queue/orders.new")
    assert ChainEntry(transformer="x").matches("outbound", "/anything/at/all")


@pytest.mark.parametrize(
    ("raw", "key", "words"),
    [
        ({"plugin_dir": ["x"]}, "transform.plugin_dir", "did you mean 'plugin_dirs'"),
        ({"plugin_dirs": "plugins"}, "transform.plugin_dirs", "array of strings"),
        ({"blocked": [1]}, "transform.blocked[0]", "expected a string"),
        ({"load_entry_points": "yes"}, "transform.load_entry_points", "true or false"),
        ({"on_error": "explode"}, "transform.on_error", "reject, dead-letter, skip, drop"),
        ({"on_error": "dead-letter"}, "transform.on_error", "needs a dead_letter"),
        ({"options": {"compress": 3}}, "transform.options.compress", "expected a table"),
        ({"chain": {"transformer": "x"}}, "transform.chain", "array of tables"),
        ({"chain": [{"destinations": ["*"]}]}, "transform.chain[0].transformer", "missing"),
        ({"chain": [{"transformer": ""}]}, "transform.chain[0].transformer", "empty"),
        ({"chain": [{"transformer": 5}]}, "transform.chain[0].transformer", "string"),
        ({"chain": [{"transformer": "x", "direction": "sideways"}]}, "transform.chain[0].direction", "inbound"),
        ({"chain": [{"transformer": "x", "destinations": []}]}, "transform.chain[0].destinations", "at least"),
        ({"chain": [{"transformer": "x", "destination": ["*"]}]}, "transform.chain[0].destination", "destinations"),
        (
            {"chain": [{"transformer": "x"}, {"transformer": "y", "on_error": "dead-letter"}]},
            "transform.chain[1].on_error",
            "dead_letter",
        ),
        (
            {"chain": [{"transformer": "x", "dead_letter": "/queue/dlq"}]},
            "transform.chain[0].dead_letter",
            "only used with",
        ),
        ({"chain": [{"transformer": "x", "options": []}]}, "transform.chain[0].options", "table"),
        ({"timeout": -1}, "transform.timeout", "seconds"),
        ({"timeout": "5s"}, "transform.timeout", "seconds"),
        ({"chain": [{"transformer": "x", "timeout": True}]}, "transform.chain[0].timeout", "seconds"),
    ],
)
def test_each_mistake_names_its_key(raw: dict[str, Any], key: str, words: str) -> None:
    error = error_of(raw)
    assert error.key == key
    assert error.path == "gw.toml"
    assert words in error.problem
    assert str(error).startswith("gw.toml, key ")


def test_timeouts() -> None:
    assert parse_transform_config(None).timeout == 30.0
    config = parse_transform_config(
        {"timeout": 2, "chain": [{"transformer": "x"}, {"transformer": "y", "timeout": 0.5}]}
    )
    assert config.timeout == 2.0
    assert [entry.timeout for entry in config.chain] == [None, 0.5]


def test_dead_letter_default_comes_from_the_section() -> None:
    config = parse_transform_config(
        {"dead_letter": "/queue/DLQ", "chain": [{"transformer": "x", "on_error": "dead-letter"}]}, "gw.toml"
    )
    assert config.chain[0].dead_letter == "/queue/DLQ"


def test_whole_document_by_mistake_is_named() -> None:
    error = error_of({"transform": {}})
    assert error.key == "transform.transform"
