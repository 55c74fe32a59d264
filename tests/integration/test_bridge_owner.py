"""One owner per bridge (issue 32, defect 3), with the real ActiveMQ and real processes.

* two gateways (own data directories) run one ONCE_AND_ONLY_ONCE bridge over one source
  queue; the first one's source connection stalls 3 s and is then cut: its unacknowledged
  deliveries go to the second, which must not send again what the first already delivered
  (before issue 32: 36-58 duplicates);
* two ``jmsgateway bridge`` processes on one data directory: the second stands by until the
  first is gone, then runs the bridges.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bridge_fault_run import drain_counting
from tests.support.activemq import ActiveMQBroker, activemq
from tests.support.gateway import REPO, GatewayProcess
from tests.support.stomp_clients import Client
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

__all__ = ["activemq"]

pytestmark = pytest.mark.activemq


def fill(port: int, destination: str, count: int, start: int = 0) -> None:
    client = Client(("127.0.0.1", port))
    try:
        events = []
        for index in range(start, start + count):
            receipt = f"r-{uuid.uuid4().hex[:6]}-{index}"
            events.append(client.listener.receipt_event(receipt))
            client.connection.send(destination, f"body {index}",
                                   headers={"seq": f"s-{index}", "persistent": "true", "receipt": receipt})
        assert all(event.wait(60) for event in events), "no receipt from ActiveMQ"
    finally:
        client.disconnect()


def bridge_config(source_port: int, target_port: int, source: str, target: str, tag: str) -> str:
    return (f'[connectors.amq_src]\nuri = "stomp://127.0.0.1:{source_port}"\nfailure_retry_interval = 200\n'
            "send_timeout = 2000\nheartbeat = [1000, 1000]\n"
            f'[connectors.amq_dst]\nuri = "stomp://127.0.0.1:{target_port}"\nfailure_retry_interval = 200\n'
            "[[bridges]]\nname = \"shared\"\n"
            f'source = {{ connector = "amq_src", destination = "{source}" }}\n'
            f'target = {{ connector = "amq_dst", destination = "{target}" }}\n'
            'qos = "ONCE_AND_ONLY_ONCE"\nmax_batch_size = 20\nmax_batch_time = 50\nfailure_retry_interval = 200\n'
            f"# {tag}\n")


def test_two_gateways_on_one_source_queue_do_not_duplicate_when_the_owner_stalls(
        tmp_path: Path, activemq: ActiveMQBroker) -> None:
    tag = uuid.uuid4().hex[:8]
    source, target = f"/queue/own-src-{tag}", f"/queue/own-dst-{tag}"
    total = 1200
    proxy = TcpProxy("127.0.0.1", activemq.stomp_port)
    first = GatewayProcess(tmp_path / "first", bridge_config(proxy.port, activemq.stomp_port, source, target, "1"))
    second = GatewayProcess(tmp_path / "second",
                            bridge_config(activemq.stomp_port, activemq.stomp_port, source, target, "2"))

    def produce() -> None:  # a steady stream across the fault
        for start in range(0, total, 100):
            fill(activemq.stomp_port, source, 100, start)
            time.sleep(0.3)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        first.start()
        first.wait_for_log("bridge shared consuming from", timeout=30)
        second.start()
        second.wait_for_log("bridge shared consuming from", timeout=30)
        producer.start()
        time.sleep(1.5)
        proxy.stall()
        time.sleep(3.0)
        proxy.cut()
        time.sleep(3.0)
        proxy.restore()
        producer.join(120)
        address = ("127.0.0.1", activemq.stomp_port)
        arrived: Counter[str] = Counter()

        def all_there() -> bool:
            arrived.update(drain_counting(address, target, quiet=1.0, timeout=10))
            return len(arrived) >= total

        wait_until(all_there, 120, "every message at the target")
        time.sleep(3.0)
        first.stop()
        second.stop()
        arrived.update(drain_counting(address, target, quiet=1.5))
        left = set(drain_counting(address, source, quiet=1.5))
        duplicated = {seq: n for seq, n in arrived.items() if n > 1}
        logs = f"FIRST:\n{first.log()[-3000:]}\nSECOND:\n{second.log()[-3000:]}"
        assert not duplicated, f"{len(duplicated)} duplicated: {sorted(duplicated)[:10]}\n{logs}"
        assert set(arrived) == {f"s-{i}" for i in range(total)} and not left, logs
    finally:
        first.kill()
        second.kill()
        proxy.close()


STANDALONE = ["-m", "gateway.cli", "bridge", "--config"]


def standalone(config: Path, data: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *STANDALONE, str(config), "--set", f'gateway.data_dir="{data}"'],
                            cwd=config.parent, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def read_until(process: subprocess.Popen[bytes], text: str, timeout: float = 60.0) -> str:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    os.set_blocking(process.stdout.fileno(), False)
    while time.monotonic() < deadline:
        chunk: Any = process.stdout.read()
        if chunk:
            seen.append(chunk.decode(errors="replace"))
            if text in "".join(seen):
                return "".join(seen)
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not printed: {''.join(seen)}")


def test_a_second_bridge_process_on_one_data_dir_stands_by(tmp_path: Path, activemq: ActiveMQBroker) -> None:
    tag = uuid.uuid4().hex[:8]
    source, target = f"/queue/lock-src-{tag}", f"/queue/lock-dst-{tag}"
    config = tmp_path / "bridges.toml"
    config.write_text(bridge_config(activemq.stomp_port, activemq.stomp_port, source, target, tag))
    data = tmp_path / "data"
    first = standalone(config, data)
    second: subprocess.Popen[bytes] | None = None
    try:
        read_until(first, "shared: running")
        second = standalone(config, data)
        read_until(second, "standby")
        fill(activemq.stomp_port, source, 50)
        address = ("127.0.0.1", activemq.stomp_port)
        arrived = drain_counting(address, target, quiet=2.0, timeout=60)
        assert len(arrived) == 50 and max(arrived.values()) == 1
        first.send_signal(signal.SIGKILL)
        first.wait(15)
        read_until(second, "shared: running", timeout=30)
        fill(activemq.stomp_port, source, 50, start=50)
        arrived = drain_counting(address, target, quiet=2.0, timeout=60)
        assert set(arrived) == {f"s-{i}" for i in range(50, 100)} and max(arrived.values()) == 1
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(15)


def collected(gateway: GatewayProcess, destination: str, count: int, what: str) -> Counter[str]:
    """Drain ``destination`` of ``gateway`` until ``count`` distinct seqs came (90 s at most): seq -> how often."""
    counts: Counter[str] = Counter()

    def enough() -> bool:
        counts.update(drain_counting(gateway.address, destination, quiet=0.5, timeout=5))
        return len(counts) >= count

    wait_until(enough, 90, what)
    return counts


def test_two_gateways_with_one_jms_source_bridge_take_turns(tmp_path: Path, activemq: ActiveMQBroker) -> None:
    """A ``jms`` (OpenWire) source with ``exclusive_option`` is one exclusive consumer per bridge too:
    with two gateways running the bridge, everything goes to the first (before: both consumed, each
    into its own embedded broker); SIGKILLed, the second takes over and gets the rest."""
    from tests.integration.test_jms_api_bridge import bridge_toml, connector_toml
    from tests.integration.test_jms_api_bridge import fill as jms_fill

    tag = uuid.uuid4().hex[:8]
    source, target = f"/queue/jmsown.src.{tag}", f"/queue/jmsown.dst.{tag}"
    config = connector_toml(activemq).replace(  # (ActiveMQ 5's destination option for an exclusive consumer)
        "send_timeout = 20000\n", 'send_timeout = 20000\nexclusive_option = "consumer.exclusive=true"\n') + bridge_toml(
        "shared", ("amq", source), ("embedded", target), qos="ONCE_AND_ONLY_ONCE", max_batch_size=20,
        max_batch_time=50, failure_retry_interval=200)
    first = GatewayProcess(tmp_path / "first", config)
    second = GatewayProcess(tmp_path / "second", config)
    try:
        first.start()
        first.wait_for_log("bridge shared consuming from", timeout=60)
        second.start()
        second.wait_for_log("bridge shared consuming from", timeout=60)
        sent = jms_fill(activemq, source, 200, "a")
        at_first = collected(first, target, len(sent), "the 200 messages in the first gateway")
        at_second = drain_counting(second.address, target, quiet=1.5)
        logs = f"FIRST:\n{first.log()[-2000:]}\nSECOND:\n{second.log()[-2000:]}"
        assert not at_second, f"the standby consumed {sum(at_second.values())} messages\n{logs}"
        assert set(at_first) == sent and max(at_first.values()) == 1, logs

        first.kill()
        more = jms_fill(activemq, source, 100, "b")
        taken = collected(second, target, len(more), "the next 100 messages in the second gateway, the first gone")
        assert set(taken) == more and max(taken.values()) == 1, second.log()[-3000:]
    finally:
        first.kill()
        second.kill()
