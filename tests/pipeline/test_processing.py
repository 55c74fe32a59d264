"""One record through the pipeline's processor (no Spark, no Kafka): the same decisions
as the in-process router, the pipeline's own policies, replay, offsets planning,
progress summaries and settings validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.message.kafka_records import dead_letter_record, message_to_record
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage
from gateway.pipeline.kafka_source import KafkaRange, next_end, ranges
from gateway.pipeline.processing import PipelineStopped, RecordProcessor, process_arrow
from gateway.pipeline.progress import offsets_lag, summarize
from gateway.pipeline.settings import PipelineSpec, parse_pipeline_settings, pipeline_spec
from gateway.routing.config import parse_routing_config
from gateway.routing.router import Router
from gateway.transform.chain import DEAD_LETTER_CAUSE, DEAD_LETTER_TRANSFORMER, ORIGINAL_DESTINATION

ROUTES = """
routing.dead-letter.topic=dlq
routes.orders.in.include=msg.address==orders
routes.orders.out.topic=orders
routes.orders.conv.key=msg.header.CorrelationId
routes.orders.on-soft-failure=dead-letter
routes.audit.in.include=msg.address==audit
routes.audit.out.topic=audit
routes.audit.conv.key=msg.header.CorrelationId
routes.audit.on-soft-failure=skip
routes.strict.in.include=msg.address==strict
routes.strict.out.topic=strict
routes.strict.conv.key=msg.header.CorrelationId
"""
NO_PLUGINS = {"plugin_dirs": [], "load_entry_points": False}


def spec(routes: str = ROUTES, transform: dict[str, Any] | None = None, **kwargs: Any) -> PipelineSpec:
    return PipelineSpec(routing={"properties": routes}, transform=transform or NO_PLUGINS, origin="gw-pipe",
                        **kwargs)


def ingest(message: Message, origin: str = "gw-ingest") -> tuple[bytes, bytes, list[Any]]:
    return message_to_record(message, None, origin)


def text(destination: str, correlation: str | None = "c1", **properties: Any) -> TextMessage:
    return TextMessage(destination=destination, message_id="ID:t-1", correlation_id=correlation, text="héllo",
                       properties=properties)


def test_routed_record_equals_the_routers_decision() -> None:
    processor = RecordProcessor(spec())
    message = text("/queue/orders", n=3, ratio=0.5, ok=True, raw=b"\x00\xff", none=None)
    output = processor.process(processor.message_of(*ingest(message)))
    decision = Router(parse_routing_config({"properties": ROUTES}), "gw-pipe").route(message)
    assert (output.outcome, output.topic, output.key, output.value) == ("routed", "orders", b"c1", "héllo".encode())
    assert output.headers == decision.headers
    assert dict(output.headers)["jmsbridge.origin"] == b"gw-pipe"


def test_ingest_origin_is_not_a_cycle_and_not_a_property() -> None:
    processor = RecordProcessor(spec())
    message = processor.message_of(*ingest(text("/queue/orders"), origin="gw-pipe"))
    assert "jmsbridge.origin" not in message.properties
    assert processor.process(message).outcome == "routed"


def test_soft_failures_follow_the_route_policy() -> None:
    processor = RecordProcessor(spec())
    dead = processor.process(processor.message_of(*ingest(text("/queue/orders", correlation="no spaces!"))))
    assert dead.outcome == "dead-lettered" and dead.topic == "dlq" and dead.key == b"ID:t-1"
    assert dict(dead.headers)["jmsbridge.route"] == b"orders"
    skipped = processor.process(processor.message_of(*ingest(text("/queue/audit", correlation=None))))
    assert skipped.outcome == "skipped" and skipped.topic is None
    with pytest.raises(PipelineStopped, match="route strict stopped"):
        processor.process(processor.message_of(*ingest(text("/queue/strict", correlation=None))))


def test_unrouted_messages_are_dead_lettered_or_counted() -> None:
    dead = RecordProcessor(spec()).process(text("/queue/elsewhere"))
    assert dead.outcome == "unrouted" and dead.topic == "dlq"
    assert b"no route includes destination /queue/elsewhere" in (dict(dead.headers)["jmsbridge.error"] or b"")
    dropped = RecordProcessor(spec(unrouted="drop")).process(text("/queue/elsewhere"))
    assert dropped.outcome == "unrouted" and dropped.topic is None


def test_transformers_run_before_routing_and_rejections_are_dead_lettered() -> None:
    chain = {**NO_PLUGINS, "chain": [{"transformer": "jms-byte", "destinations": ["/queue/orders"]},
                                     {"transformer": "jms-map-json", "destinations": ["/queue/audit"]}]}
    processor = RecordProcessor(spec(transform=chain))
    output = processor.process(processor.message_of(*ingest(text("/queue/orders"))))
    assert dict(output.headers)["jms.MessageType"] == b"bytes"
    rejected = processor.process(processor.message_of(*ingest(text("/queue/audit"))))  # not JSON
    assert rejected.outcome == "rejected" and rejected.topic == "dlq"
    assert (dict(rejected.headers)["jmsbridge.error"] or b"").startswith(b"transform-rejected: ")


def test_replay_undoes_dead_lettering() -> None:
    original = text("/queue/orders", correlation=None, n=1)
    key, value, headers = dead_letter_record(original, "no-key: missing", "orders", "gw-pipe")
    fixed_routes = ROUTES.replace("routes.orders.conv.key=msg.header.CorrelationId\n", "")
    processor = RecordProcessor(spec(fixed_routes, replay=True))
    message = processor.message_of(key, value, headers)
    assert message.properties == {"n": 1}
    output = processor.process(message)
    expected = Router(parse_routing_config({"properties": fixed_routes}), "gw-pipe").route(original)
    assert (output.outcome, output.topic, output.key, output.headers) == (
        "routed", "orders", b"ID:t-1", expected.headers)


def test_replay_restores_a_transform_dead_letters_destination() -> None:
    original = BytesMessage(destination="/queue/DLQ.transform", message_id="ID:b-1", correlation_id="k", body=b"\x01",
                            properties={DEAD_LETTER_CAUSE: "boom", DEAD_LETTER_TRANSFORMER: "t",
                                        ORIGINAL_DESTINATION: "/queue/orders"})
    processor = RecordProcessor(spec(replay=True, transform_replayed=False))
    message = processor.message_of(*message_to_record(original, None, "gw-pipe"))
    assert message.destination == "/queue/orders" and message.properties == {}
    assert processor.process(message).topic == "orders"


def test_non_routable_body_types_dead_letter_like_the_router() -> None:
    message = MapMessage(destination="/queue/orders", message_id="ID:m-1", correlation_id="c", map={"a": 1})
    output = RecordProcessor(spec()).process(message)
    assert output.outcome == "dead-lettered" and output.value == b'{"a": 1}'


def test_process_arrow_keeps_rows_and_schema() -> None:
    import pyarrow as pa

    key, value, headers = ingest(text("/queue/orders"))
    rows = [{"key": key, "value": value, "topic": "in", "partition": 0, "offset": 5, "timestamp": None,
             "timestampType": 0, "headers": [{"key": k, "value": v} for k, v in headers]}] * 3
    (batch,) = list(process_arrow(spec(), iter([pa.RecordBatch.from_pylist(rows)])))
    assert batch.num_rows == 3 and batch.column("topic").to_pylist() == ["orders"] * 3
    assert batch.schema.field("headers").type.value_type.field(0).name == "key"


def test_batches_share_the_limit_between_partitions() -> None:
    start = {"t": {"0": 0, "1": 100}}
    latest = {"t": {"0": 300, "1": 200, "2": 100}}
    assert next_end(start, latest, None) == latest
    limited = next_end(start, latest, 100)
    taken = sum(limited["t"][p] - start["t"].get(p, 0) for p in limited["t"])
    assert taken == 100 and limited["t"]["0"] == 60
    assert ranges(start, limited) == [KafkaRange("t", 0, 0, 60), KafkaRange("t", 1, 100, 120),
                                      KafkaRange("t", 2, 0, 20)]
    assert next_end(latest, latest, 100) == latest


def test_progress_reports_lag_rates_and_outcomes() -> None:
    progress = {
        "batchId": 4, "numInputRows": 10, "inputRowsPerSecond": 5.0, "processedRowsPerSecond": 20.0,
        "durationMs": {"triggerExecution": 500},
        "sources": [{"endOffset": json.dumps({"t": {"0": 10, "1": 5}}),
                     "latestOffset": json.dumps({"t": {"0": 15, "1": 5}})}],
        "observedMetrics": {"jmsgateway": {"messages": 10, "routed": 9, "skipped": 1}},
    }
    batch = summarize(progress)
    assert (batch.batch, batch.rows, batch.lag, batch.processed_rate) == (4, 10, 5, 20.0)
    assert batch.outcomes == {"messages": 10, "routed": 9, "skipped": 1}
    assert offsets_lag("not json", "{}") is None


def test_settings_are_validated_with_file_and_key() -> None:
    config = parse_config({"gateway": {"id": "gw"}, "pipeline": {"ingest_topics": ["in"], "bootstrap": "h:1"}},
                          "p.toml")
    settings = parse_pipeline_settings(config)
    assert (settings.origin, settings.kafka_access, settings.checkpoint) == ("gw", "auto", "var/pipeline-checkpoint")
    for raw, key in (
        ({"ingest_topic": ["in"]}, "pipeline.ingest_topic"),
        ({"ingest_topics": []}, "pipeline.ingest_topics"),
        ({"ingest_topics": ["in"], "bootstrap": "h:1", "kafka_access": "java"}, "pipeline.kafka_access"),
        ({"ingest_topics": ["in"], "bootstrap": "h:1", "starting_offsets": "{bad"}, "pipeline.starting_offsets"),
        ({"ingest_topics": ["in"]}, "pipeline.bootstrap"),
    ):
        with pytest.raises(ConfigError) as caught:
            parse_pipeline_settings(parse_config({"pipeline": raw}, "p.toml"))
        assert caught.value.key == key and caught.value.path == "p.toml"


def test_spec_inlines_the_properties_file(tmp_path: Any) -> None:
    (tmp_path / "bridge.properties").write_text("routes.a.in.include=msg.address==a\nroutes.a.out.topic=ta\n")
    config = parse_config({"routing": {"properties_file": "bridge.properties"},
                           "pipeline": {"ingest_topics": ["in"], "bootstrap": "h:1"}}, str(tmp_path / "gw.toml"))
    recipe = pipeline_spec(config, parse_pipeline_settings(config))
    assert "properties_file" not in recipe.routing
    assert RecordProcessor(recipe).process(text("/queue/a")).topic == "ta"


def test_cli_reports_a_bad_config_without_starting_spark(tmp_path: Any, capsys: Any) -> None:
    from gateway.commands.pipeline import main

    bad = tmp_path / "gw.toml"
    bad.write_text('[pipeline]\ningest_topics = ["in"]\nbootstrap = "h:1"\nmax_offsets = 5\n')
    assert main(["--config", str(bad)]) == 1
    assert "pipeline.max_offsets" in capsys.readouterr().err
    assert main(["replay", "--config", str(bad), "--topic", "dlq"]) == 1
