"""ConsumerProcess: a confluent-kafka Consumer in a child process (no broker needed:
building a consumer and polling it does not connect successfully to anything)."""

from __future__ import annotations

import os
import signal

import pytest

from gateway.connectors.kafka_consumer_host import ConsumerCallFailed, ConsumerCrashed, ConsumerProcess
from tests.support.ports import free_port


def config() -> dict[str, object]:
    return {"bootstrap.servers": f"127.0.0.1:{free_port()}", "group.id": "g", "log_level": 0}


def test_calls_cross_the_process_and_close_ends_the_child() -> None:
    consumer = ConsumerProcess(config(), label="topic t (group g)")
    assert consumer.pid is not None and consumer.pid != os.getpid()
    consumer.subscribe(["t"], on_assign=lambda *_: None)
    assert consumer.consume(num_messages=10, timeout=0.05) == []
    with pytest.raises(ConsumerCallFailed):
        consumer.commit(offsets=[])  # librdkafka refuses an empty commit; the error comes back as one
    consumer.close()
    assert not consumer._process.is_alive()


def test_a_crashed_child_fails_calls_with_the_signal_and_the_label() -> None:
    consumer = ConsumerProcess(config(), label="topic gone (group g)")
    assert consumer.pid is not None
    os.kill(consumer.pid, signal.SIGSEGV)
    with pytest.raises(ConsumerCrashed, match=r"topic gone \(group g\) crashed \(killed by SIGSEGV\)"):
        consumer.consume(num_messages=1, timeout=0.05)
    consumer.close()  # reaps, does not raise


def test_bad_settings_fail_at_once() -> None:
    with pytest.raises(ConsumerCallFailed, match="bad consumer settings"):
        ConsumerProcess({"no.such.setting": 1}, label="x")
