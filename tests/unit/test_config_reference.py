"""The references generated from the configuration models (JSON Schema, docs key tables), the
example files in etc/, and the one-line errors of the whole document."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gateway.cli import check_config, main
from gateway.config import parse_config
from gateway.config_reference import json_schema, json_schema_text, key_tables
from gateway.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "etc" / "examples").glob("*.toml"))


def test_the_shipped_schema_is_the_generated_one() -> None:
    shipped = (REPO / "etc" / "jmsgateway.schema.json").read_text()
    assert shipped == json_schema_text(), "regenerate: jmsgateway config schema > etc/jmsgateway.schema.json"


def test_config_schema_command_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema"]) == 0
    assert capsys.readouterr().out == json_schema_text()


def test_the_docs_key_tables_are_the_generated_ones() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    documented = page.split("<!-- keys:begin -->\n", 1)[1].split("<!-- keys:end -->", 1)[0]
    assert documented == key_tables(), "regenerate the Keys part of docs/configuration.md: jmsgateway config keys"


def test_every_section_and_connector_kind_is_in_the_schema_and_the_docs() -> None:
    schema = json_schema()
    assert set(schema["properties"]) == {"gateway", "stomp", "broker", "auth", "destinations", "connectors",
                                         "transform", "routing", "bridges", "pipeline", "admin", "authorization"}
    assert {"StompConnectorOptions", "KafkaSettings"} <= set(schema["$defs"])
    tables = key_tables()
    for key in ("`max_retries`", "`ingest_topics`", "`public_health`", "`on_soft_failure`", "`subscription_name`"):
        assert key in tables


def test_there_is_an_example_per_target() -> None:
    assert [path.name for path in EXAMPLES] == ["activemq.toml", "bridges.toml", "embedded.toml",
                                                "kafka-routing.toml", "pipeline-gateway.toml", "pipeline.toml"]


@pytest.mark.parametrize("path", [*EXAMPLES, REPO / "etc" / "jmsgateway.toml"], ids=lambda path: path.name)
def test_examples_pass_check_config(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_config(str(path), [f"gateway.data_dir={tmp_path}"]) == 0, capsys.readouterr().err
    assert "OK" in capsys.readouterr().out


def test_check_config_reports_the_first_problem_in_one_line(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gw.toml"
    path.write_text('[connectors.activemq]\nuri = "stomp://h:61613"\nmax_retry = 3\n')
    assert check_config(str(path), []) == 1
    error = capsys.readouterr().err
    assert error == (f"{path}, key 'connectors.activemq.max_retry': unknown key (did you mean 'max_retries'?)\n")


@pytest.mark.parametrize(
    ("raw", "key", "words"),
    [
        ({"connectors": {"amq": {"uri": "stomp://h:1", "max_retries": "3"}}}, "connectors.amq.max_retries",
         "expected an integer, got a string '3'"),
        ({"connectors": {"amq": {"uri": "stomps://h:1"}}}, "connectors.amq.uri",
         "unknown connector scheme 'stomps' (did you mean 'stomp'?)"),
        ({"connectors": {"amq": {"login": "x"}}}, "connectors.amq.uri", "needs a uri"),
        ({"connectors": {"k": {"uri": "kafka://h:9092", "pause_after": -1}}}, "connectors.k.pause_after",
         "seconds >= 0"),
        ({"connectors": {"embedded": {"uri": "stomp://h:1"}}}, "connectors.embedded", "reserved"),
        ({"transform": {"chain": [{"transformer": "x"}, {"transformer": "y", "on_eror": "drop"}]}},
         "transform.chain[1].on_eror", "did you mean 'on_error'"),
        ({"bridges": [{"source": {"destination": "/queue/a"}, "target": {"destination": "queue/b"}}]},
         "bridges[0].target.destination", "/queue/name"),
        ({"routing": {"routes": [{"name": "a", "topik": "t"}]}}, "routing.routes[0].topik", "did you mean 'topic'"),
        ({"pipeline": {"ingest_topics": "in", "unrouted": "keep"}}, "pipeline.unrouted",
         "must be one of dead-letter, drop"),
        ({"admin": {"listen": 8161}}, "admin.listen", "a string or a list of strings"),
        ({"gateway": {"listen": []}}, "gateway.listen", "at least 1"),
        ({"stomp": {"heartbeat_grace": True}}, "stomp.heartbeat_grace", "expected a number"),
        ({"broker": {"synchronous": "OFF"}}, "broker.synchronous", "'FULL' or 'NORMAL'"),
    ],
)
def test_whole_document_errors_name_the_dotted_key(raw: dict[str, object], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, "gw.toml")
    assert caught.value.key == key and caught.value.path == "gw.toml"
    assert words in caught.value.problem
    assert "\n" not in str(caught.value)


def test_examples_are_valid_toml_with_their_schema_line() -> None:
    for path in EXAMPLES:
        text = path.read_text()
        assert text.startswith("#:schema ../jmsgateway.schema.json\n")
        tomllib.loads(text)
