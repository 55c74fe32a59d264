"""Replay: a range of the dead-letter topic, run again (a Spark batch job) through fixed routes,
lands where the in-process router would put the original messages."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.message.kafka_records import dead_letter_record
from gateway.message.model import BytesMessage, Message, TextMessage
from gateway.pipeline.job import PipelineJob
from gateway.pipeline.settings import parse_pipeline_settings, pipeline_spec
from gateway.routing.config import parse_routing_config
from gateway.routing.router import Router
from tests.support.kafka import create_topics, produce, read_records

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_replay_a_dead_letter_range_through_fixed_routes(spark: Any, kafka_bootstrap: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    dlq, orders = f"dlq-{suffix}", f"orders-{suffix}"
    create_topics(kafka_bootstrap, dlq, orders)
    originals: list[Message] = []
    for index in range(20):
        message: Message = (TextMessage(text=f"t{index}") if index % 2 else BytesMessage(body=bytes([index, 255])))
        message.destination, message.message_id, message.properties = "/queue/orders", f"ID:r-{index}", {"i": index}
        originals.append(message)
    records = []
    for message in originals:  # what the pipeline dead-lettered: the key header was missing
        key, value, headers = dead_letter_record(message, "no-key: no CorrelationId", "orders", "gw-pipe")
        records.append({"key": key, "value": value, "headers": headers})
    produce(kafka_bootstrap, dlq, records)

    fixed = f"routes.orders.in.include=msg.address==orders\nroutes.orders.out.topic={orders}\n" \
            f"routing.dead-letter.topic={dlq}\n"
    config = parse_config({"gateway": {"id": "gw-pipe"}, "routing": {"properties": fixed},
                           "transform": {"plugin_dirs": [], "load_entry_points": False},
                           "pipeline": {"ingest_topics": ["unused"], "bootstrap": kafka_bootstrap}}, "replay.toml")
    settings = parse_pipeline_settings(config, kafka_access="python")
    job = PipelineJob(spark, settings, pipeline_spec(config, settings, replay=True))
    report = job.replay(dlq, json.dumps({dlq: {"0": 5}}), json.dumps({dlq: {"0": 15}}))

    assert report.records == 10 and report.outcomes == {"routed": 10}
    router = Router(parse_routing_config({"properties": fixed}), "gw-pipe")
    expected = [router.route(message) for message in originals[5:15]]
    replayed = read_records(kafka_bootstrap, orders, 10, timeout=30, settle=1.0)
    assert sorted((r.key(), r.value(), tuple(r.headers())) for r in replayed) == sorted(
        (d.key, d.value, d.headers) for d in expected
    )


def test_replay_command(kafka_bootstrap: str, tmp_path: Any) -> None:
    import subprocess
    import sys
    from pathlib import Path

    suffix = uuid.uuid4().hex[:8]
    dlq, orders = f"dlq-{suffix}", f"orders-{suffix}"
    create_topics(kafka_bootstrap, dlq, orders)
    message = TextMessage(destination="/queue/orders", message_id="ID:cli-1", text="again")
    key, value, headers = dead_letter_record(message, "no-key: missing", "orders", "gw-pipe")
    produce(kafka_bootstrap, dlq, [{"key": key, "value": value, "headers": headers}] * 3)
    config = tmp_path / "gw.toml"
    config.write_text(
        '[gateway]\nid = "gw-pipe"\n[transform]\nplugin_dirs = []\nload_entry_points = false\n'
        f"[routing]\nproperties = '''\nroutes.o.in.include=msg.address==orders\nroutes.o.out.topic={orders}\n'''\n"
        f'[pipeline]\ningest_topics = ["unused"]\nbootstrap = "{kafka_bootstrap}"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "gateway.commands.pipeline", "replay", "--config", str(config), "--topic", dlq,
         "--master", "local[1]", "--to", json.dumps({dlq: {"0": 2}})],
        capture_output=True, text=True, timeout=240, cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"replayed 2 record(s) of {dlq}: routed 2" in done.stdout
    replayed = read_records(kafka_bootstrap, orders, 2, timeout=20, settle=1.0)
    assert [r.value() for r in replayed] == [b"again", b"again"]
