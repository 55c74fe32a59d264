"""``[[bridges]]`` validation: defaults, Artemis spellings, and a clear error naming
the key for every bad value."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.bridges.config import (
    AT_MOST_ONCE,
    DEFAULT_RETRY_INTERVAL_MS,
    DUPLICATES_OK,
    ONCE_AND_ONLY_ONCE,
    parse_bridges,
)
from gateway.errors import ConfigError

CONNECTORS = {"embedded", "kafka", "activemq"}


def entry(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "b1",
        "source": {"connector": "embedded", "destination": "/queue/in"},
        "target": {"connector": "kafka", "destination": "/topic/out"},
    }
    raw.update(overrides)
    return raw


def error_for(raw: list[Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_bridges(raw, "gw.toml", CONNECTORS)
    return caught.value


def test_defaults_follow_the_artemis_bridge() -> None:
    (bridge,) = parse_bridges([entry()], "gw.toml", CONNECTORS)
    assert bridge.name == "b1"
    assert (bridge.source.connector, bridge.source.destination) == ("embedded", "/queue/in")
    assert (bridge.target.connector, bridge.target.destination) == ("kafka", "/topic/out")
    assert bridge.qos == DUPLICATES_OK
    assert bridge.failure_retry_interval == DEFAULT_RETRY_INTERVAL_MS
    assert bridge.max_retries == -1
    assert bridge.max_batch_size == 1
    assert bridge.selector is None
    assert not bridge.durable
    assert bridge.add_message_id_in_header is False
    assert bridge.prefetch >= bridge.max_batch_size
    assert bridge.key == "bridges[0]"


def test_every_parameter_and_camel_case_spellings() -> None:
    raw = {
        "name": "orders",
        "source": {"connector": "activemq", "destination": "/topic/orders"},
        "target": {"connector": "kafka", "destination": "/topic/orders"},
        "sourceUsername": "alice",
        "sourcePassword": "secret",
        "selector": "region = 'EU'",
        "qualityOfServiceMode": "QOS_ONCE_AND_ONLY_ONCE",
        "failureRetryInterval": 250,
        "maxRetries": 3,
        "maxBatchSize": 100,
        "maxBatchTime": -1,
        "subscriptionName": "orders-sub",
        "clientID": "bridge-client",
        "addMessageIDInHeader": True,
        "transformers": ["jms-byte", {"transformer": "header-map", "options": {"a": 1}, "on_error": "drop"}],
    }
    (bridge,) = parse_bridges([raw], "gw.toml", CONNECTORS)
    assert bridge.source.user == "alice" and bridge.source.password == "secret"
    assert bridge.qos == ONCE_AND_ONLY_ONCE
    assert (bridge.failure_retry_interval, bridge.max_retries) == (250, 3)
    assert (bridge.max_batch_size, bridge.max_batch_time) == (100, -1)
    assert (bridge.subscription_name, bridge.client_id) == ("orders-sub", "bridge-client")
    assert bridge.durable and bridge.add_message_id_in_header
    assert [step.transformer for step in bridge.transformers] == ["jms-byte", "header-map"]
    assert bridge.transformers[1].on_error == "drop" and dict(bridge.transformers[1].options) == {"a": 1}
    assert bridge.prefetch >= 200


def test_qos_spellings() -> None:
    for spelling, expected in [("at_most_once", AT_MOST_ONCE), ("QOS_DUPLICATES_OK", DUPLICATES_OK),
                               ("ONCE_AND_ONCE_ONLY", ONCE_AND_ONLY_ONCE)]:
        (bridge,) = parse_bridges([entry(qos=spelling)], "", CONNECTORS)
        assert bridge.qos == expected


def test_durable_client_id_defaults_to_the_bridge_name() -> None:
    raw = entry(source={"connector": "embedded", "destination": "/topic/t"}, subscription_name="s")
    (bridge,) = parse_bridges([raw], "", CONNECTORS)
    assert bridge.client_id == "b1"


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        ({"max_batch_time": 0}, "bridges[0].max_batch_time", "-1 (wait forever) or >= 1"),
        ({"max_batch_time": -5}, "bridges[0].max_batch_time", "-1 (wait forever) or >= 1"),
        ({"max_batch_size": 0}, "bridges[0].max_batch_size", "at least 1"),
        ({"max_retries": -2}, "bridges[0].max_retries", "-1 (retry forever)"),
        ({"failure_retry_interval": 0}, "bridges[0].failure_retry_interval", "at least 1"),
        ({"max_batch_size": "10"}, "bridges[0].max_batch_size", "expected an integer"),
        ({"max_batch_size": True}, "bridges[0].max_batch_size", "expected an integer"),
        ({"qos": "DUPLICATE_OK"}, "bridges[0].qos", "did you mean 'DUPLICATES_OK'"),
        ({"qos": 3}, "bridges[0].qos", "AT_MOST_ONCE"),
        ({"max_batch_sise": 3}, "bridges[0].max_batch_sise", "did you mean 'max_batch_size'"),
        ({"selector": "color = "}, "bridges[0].selector", "invalid JMS selector"),
        ({"add_message_id_in_header": "yes"}, "bridges[0].add_message_id_in_header", "true or false"),
        ({"subscription_name": "s"}, "bridges[0].subscription_name", "needs a topic source"),
        ({"source": {"connector": "kafak", "destination": "/queue/a"}}, "bridges[0].source.connector",
         "did you mean 'kafka'"),
        ({"source": {"connector": "embedded"}}, "bridges[0].source.destination", "missing"),
        ({"source": {"connector": "embedded", "destination": "queue/a"}}, "bridges[0].source.destination",
         "/queue/name"),
        ({"source": {"connector": "embedded", "destination": "/queue/a", "pasword": "x"}},
         "bridges[0].source.pasword", "did you mean 'password'"),
        ({"target": {"connector": "kafka", "destination": "/topic/out", "password": "x"}},
         "bridges[0].target.password", "needs a user"),
        ({"target": {"connector": "embedded", "destination": "/queue/in"}}, "bridges[0].target.destination",
         "same destination"),
        ({"target": "kafka"}, "bridges[0].target", "expected a table"),
        ({"transformers": "jms-byte"}, "bridges[0].transformers", "array"),
        ({"transformers": [{"transformer": "x", "on_error": "dead-letter"}]}, "bridges[0].transformers[0].on_error",
         "dead_letter"),
        ({"duplicate_window": 0}, "bridges[0].duplicate_window", "at least 1"),
        ({"source": {"connector": "embedded", "destination": "/temp-queue/replies"}},
         "bridges[0].source.destination", "is a temporary destination"),
        ({"source": {"connector": "embedded", "destination": "/remote-temp-queue/jmsgw-1.r"}},
         "bridges[0].source.destination", "belongs to the STOMP connection"),
        ({"target": {"connector": "kafka", "destination": "/temp-topic/t"}},
         "bridges[0].target.destination", "is a temporary destination"),
        ({"target": {"connector": "kafka", "destination": "/remote-temp-topic/jmsgw-2.t"}},
         "bridges[0].target.destination", "is a temporary destination"),
    ],
)
def test_bad_values_name_their_key(overrides: dict[str, Any], key: str, words: str) -> None:
    error = error_for([entry(**overrides)])
    assert error.key == key
    assert words in str(error)
    assert "gw.toml" in str(error)


def test_missing_source_and_duplicate_names() -> None:
    raw = entry()
    del raw["source"]
    assert error_for([raw]).key == "bridges[0].source"
    error = error_for([entry(), entry(target={"connector": "embedded", "destination": "/queue/x"})])
    assert error.key == "bridges[1].name" and "already used by bridges[0]" in str(error)


def test_not_a_list_or_not_a_table() -> None:
    assert error_for({"name": "x"}).key == "bridges"  # type: ignore[arg-type]
    assert error_for(["x"]).key == "bridges[0]"
    assert parse_bridges([], "", CONNECTORS) == []
