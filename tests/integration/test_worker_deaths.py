"""A pytest-xdist worker that dies says how (:mod:`tests.support.worker_deaths`), for the two ends that
otherwise print nothing but ``worker 'gwN' crashed while running T``.

Both are run for real in a pytest of their own with one worker: librdkafka 2.16's SIGSEGV in its
``rdk:main`` thread (an in-process consumer whose topic is deleted on Tansu, as the gateway's
consumer host children meet it, docs/kafka.md "The consumer runs in a child process") and
pytest-timeout's thread method.  Without the plugin neither run prints a signal name or a stack;
faulthandler (which pytest enables) does not see the SIGSEGV, since librdkafka blocks every signal
in its threads and the kernel then kills the process as if there were no handler (and without the
"segfault at" line it writes for a process with none, so ``dmesg`` does not show it either).
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kafka import create_topics, kafka_bootstrap, produce, unique_topic
from tests.support.worker_deaths import describe_end

pytestmark = pytest.mark.kafka
__all__ = ["kafka_bootstrap"]

REPO = Path(__file__).resolve().parents[2]

CRASHING = '''
import os, time
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient


def test_a_consumer_whose_topic_is_deleted():
    bootstrap, topic = os.environ["PROBE_BOOTSTRAP"], os.environ["PROBE_TOPIC"]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe-" + topic})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        record = consumer.poll(0.2)
        if record is not None and record.error() is None:
            break
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=15).values():
        future.result(15)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        consumer.poll(0.2)
    consumer.close()
'''

HANGING = '''
import time


def test_hangs():
    time.sleep(60)
'''


def run_worker(tmp_path: Path, source: str, *options: str, plugin: bool = True,
               env: dict[str, str] | None = None) -> str:
    """``source`` as a test file run by a pytest with one xdist worker; its output."""
    (tmp_path / "test_probe.py").write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", *options]
    if plugin:
        command += ["-p", "tests.support.worker_deaths"]
    done = subprocess.run([*command, str(tmp_path / "test_probe.py")], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert "crashed while running" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize("plugin", [True, False], ids=["with-plugin", "without"])
def test_a_librdkafka_segfault_in_a_worker_is_named(tmp_path: Path, kafka_bootstrap: str, plugin: bool) -> None:
    topic = unique_topic("worker-death")
    create_topics(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [{"value": b"one"}])
    output = run_worker(tmp_path, CRASHING, "--timeout=100", plugin=plugin,
                        env={"PROBE_BOOTSTRAP": kafka_bootstrap, "PROBE_TOPIC": topic})
    assert "Fatal Python error" not in output, output[-3000:]  # faulthandler never sees it
    if plugin:
        assert "ended by signal SIGSEGV" in output, output[-3000:]
    else:
        assert "SIGSEGV" not in output, output[-3000:]


def test_a_timeout_in_a_worker_is_named_and_shows_where(tmp_path: Path) -> None:
    output = run_worker(tmp_path, HANGING, "--timeout=4", "--timeout-method=thread", "-o", "faulthandler_timeout=2")
    assert "ended with exit status 1 (pytest-timeout's" in output, output[-3000:]
    assert 'test_probe.py", line 6 in test_hangs' in output, output[-3000:]  # faulthandler_timeout's dump


def test_the_suite_dumps_stacks_before_its_timeout_ends_a_worker() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    pytest_options = config["tool:pytest"]
    assert pytest_options["timeout_method"] == "thread"
    assert 0 < float(pytest_options["faulthandler_timeout"]) < float(pytest_options["timeout"])


def test_describe_end() -> None:
    assert describe_end(-11) == "ended by signal SIGSEGV"
    assert describe_end(-9) == "ended by signal SIGKILL"
    assert describe_end(1).startswith("ended with exit status 1 (pytest-timeout")
    assert describe_end(3) == "ended with exit status 3"
    assert describe_end(None).startswith("still running")
