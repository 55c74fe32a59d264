"""Bridges across a WAN (issue 32), black-box: real gateway processes, real ActiveMQ 5.17, the
WAN-fault proxy (tests/support/tcp_proxy.py) between a gateway and the broker, and a count by
the message id every body carries (``body a-17``): lost (confirmed at the source, neither at the
target nor left at the source) and duplicated (at the target more than once), per QoS promise
(AT_MOST_ONCE may lose, DUPLICATES_OK may duplicate, ONCE_AND_ONLY_ONCE neither).

* two gateways run the same bridge (own data directories, one shared source queue); gateway 1's
  source connection stalls 3 s, then is cut;
* the gateway is SIGKILLed while the target's answers are dropped (a COMMIT applied, its receipt
  lost), restarted while the target is still unreachable (longer than ``send_timeout``), then
  the target comes back;
* two ``jmsgateway bridge`` processes on one data directory: the second must not consume beside
  the first, and takes over when the first dies.

ONCE_AND_ONLY_ONCE runs with the normal suite; the other modes are part of the long run
(``pytest -m fault_matrix``)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bridge_fault_run import drain_counting
from tests.support.activemq import ActiveMQBroker, activemq
from tests.support.gateway import REPO, GatewayProcess, default_config
from tests.support.ports import free_port
from tests.support.stomp_clients import Client
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

__all__ = ["activemq"]

pytestmark = pytest.mark.activemq

QOS_MODES = ("AT_MOST_ONCE", "DUPLICATES_OK", "ONCE_AND_ONLY_ONCE")
SEND_TIMEOUT = 2000
"""ms: the gateways' ``send_timeout`` towards ActiveMQ; every outage here lasts longer."""


def qos_params() -> list[Any]:
    """ONCE_AND_ONLY_ONCE in the normal suite, the other modes in the long run."""
    return [pytest.param(qos, marks=[] if qos == "ONCE_AND_ONLY_ONCE" else [pytest.mark.fault_matrix], id=qos)
            for qos in QOS_MODES]


@dataclass
class Count:
    """What was confirmed at the source, what reached the target, what is left at the source."""

    confirmed: set[str]
    arrived: Counter[str]
    left: set[str]

    @property
    def lost(self) -> set[str]:
        return self.confirmed - set(self.arrived) - self.left

    @property
    def duplicated(self) -> dict[str, int]:
        return {key: n for key, n in self.arrived.items() if n > 1}

    def summary(self) -> str:
        return (f"confirmed {len(self.confirmed)}, at the target {len(self.arrived)}, left {len(self.left)}, "
                f"lost {len(self.lost)}, duplicated {len(self.duplicated)} "
                f"(e.g. {sorted(self.duplicated.items())[:5]})")

    def check(self, qos: str) -> None:
        print(self.summary())
        assert "?" not in self.arrived, f"a message without an id reached the target: {self.summary()}"
        assert not set(self.arrived) - self.confirmed, f"unknown ids at the target: {self.summary()}"
        if qos != "AT_MOST_ONCE":
            assert not self.lost, f"{qos} lost {sorted(self.lost)[:10]}: {self.summary()}"
        if qos != "DUPLICATES_OK":
            assert not self.duplicated, f"{qos} duplicated: {self.summary()}"


@dataclass
class Queues:
    """A source and a target queue on one ActiveMQ, and a producer into the source."""

    broker: ActiveMQBroker
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    confirmed: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def source(self) -> str:
        return f"/queue/wan-src-{self.tag}"

    @property
    def target(self) -> str:
        return f"/queue/wan-dst-{self.tag}"

    def fill(self, count: int, *, first: int = 0, pace: float = 0.0) -> None:
        """``count`` persistent messages ``body a-<n>`` into the source, a receipt each;
        ``pace`` seconds between sends (a stream rather than a backlog)."""
        client = Client(("127.0.0.1", self.broker.stomp_port))
        try:
            events = []
            for index in range(first, first + count):
                key, receipt = f"a-{index}", f"r-{self.tag}-{index}"
                events.append((key, client.listener.receipt_event(receipt)))
                client.connection.send(self.source, f"body {key}",
                                       headers={"persistent": "true", "receipt": receipt})
                if pace:
                    time.sleep(pace)
            for key, event in events:
                assert event.wait(60), f"no receipt from ActiveMQ for {key}"
                with self.lock:
                    self.confirmed.add(key)
        finally:
            client.disconnect()

    def count(self) -> Count:
        address = ("127.0.0.1", self.broker.stomp_port)
        arrived = drain_counting(address, self.target)
        left = set(drain_counting(address, self.source))
        return Count(set(self.confirmed), arrived, left)


def connector_toml(name: str, port: int) -> str:
    return (f'[connectors.{name}]\nuri = "stomp://127.0.0.1:{port}"\nfailure_retry_interval = 200\n'
            f"send_timeout = {SEND_TIMEOUT}\n")


def bridge_toml(queues: Queues, qos: str, batch: int, name: str = "wan") -> str:
    return ("[[bridges]]\n"
            f'name = "{name}"\n'
            f'source = {{ connector = "amq_src", destination = "{queues.source}" }}\n'
            f'target = {{ connector = "amq_dst", destination = "{queues.target}" }}\n'
            f'qos = "{qos}"\nmax_batch_size = {batch}\nmax_batch_time = 20\nfailure_retry_interval = 200\n')


def admin_toml(port: int) -> str:
    return f'[admin]\nlisten = ["tcp:{port}:interface=127.0.0.1"]\n'


def status(admin_port: int, name: str = "wan") -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/bridges/{name}", timeout=5) as answer:
            found: dict[str, Any] = json.loads(answer.read())
            return found
    except (OSError, ValueError):
        return {}


def forwarded(admin_port: int) -> int:
    return int(status(admin_port).get("forwarded") or 0)


def settle(admin_ports: list[int], quiet: float = 3.0, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Wait until no bridge forwarded anything new for ``quiet`` seconds, each running (or
    failed, or the gateway gone), nothing pending."""
    deadline = time.monotonic() + timeout
    last: object = None
    since = time.monotonic()
    statuses: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        statuses = [status(port) for port in admin_ports]
        mark = [(s.get("forwarded"), s.get("pending"), s.get("in_flight"), s.get("state")) for s in statuses]
        if mark != last:
            last, since = mark, time.monotonic()
        elif time.monotonic() - since >= quiet and all(
                not s or s.get("state") == "failed" or (s.get("state") == "running" and not s.get("pending"))
                for s in statuses):
            return statuses
        time.sleep(0.2)
    return statuses


def print_logs(*gateways: GatewayProcess) -> None:
    for gateway in gateways:
        lines = [line for line in gateway.log().splitlines() if "GET /bridges" not in line]
        print(f"--- {gateway.workdir.name} ---\n" + "\n".join(lines)[-6000:])


@pytest.fixture
def source_proxy(activemq: ActiveMQBroker) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", activemq.stomp_port, seed=32) as proxy:
        yield proxy


@pytest.mark.parametrize("qos", qos_params())
def test_two_gateways_running_the_same_bridge(tmp_path: Path, activemq: ActiveMQBroker, source_proxy: TcpProxy,
                                              qos: str) -> None:
    """Defect 3: gateway 1 consumes the shared source queue through a link that stalls 3 s and is
    then cut; what it had not acknowledged goes back to ActiveMQ.  Gateway 2, the same bridge on
    its own data directory, must not send again what gateway 1 delivered."""
    queues = Queues(activemq)
    ports = [free_port(), free_port()]
    first = GatewayProcess(tmp_path / "gw1", admin_toml(ports[0]) + connector_toml("amq_src", source_proxy.port)
                           + connector_toml("amq_dst", activemq.stomp_port) + bridge_toml(queues, qos, 50))
    second = GatewayProcess(tmp_path / "gw2", admin_toml(ports[1]) + connector_toml("amq_src", activemq.stomp_port)
                            + connector_toml("amq_dst", activemq.stomp_port) + bridge_toml(queues, qos, 50))
    producer = threading.Thread(target=queues.fill, args=(1000,), daemon=True)
    try:
        first.start()
        wait_until(lambda: status(ports[0]).get("state") == "running", 60, "gateway 1's bridge to run")
        second.start()
        wait_until(lambda: bool(status(ports[1])), 60, "gateway 2's admin endpoint")
        producer.start()
        wait_until(lambda: forwarded(ports[0]) + forwarded(ports[1]) >= 50, 60, "the bridge to move")
        source_proxy.stall("both")
        time.sleep(3.0)
        source_proxy.cut()
        time.sleep(1.0)
        source_proxy.heal()  # the link is back: no stall, new connections forwarded
        producer.join(120)
        statuses = settle(ports)
        print(statuses)
        first.stop()
        second.stop()
        count = queues.count()
    except BaseException:
        print_logs(first, second)
        raise
    finally:
        first.kill()
        second.kill()
    try:
        count.check(qos)
    except AssertionError:
        print_logs(first, second)
        raise


@pytest.mark.parametrize("outage", ["refused", pytest.param("silent", marks=pytest.mark.fault_matrix)])
@pytest.mark.parametrize("qos", qos_params())
def test_a_kill_during_an_outage_of_the_target(tmp_path: Path, activemq: ActiveMQBroker, qos: str,
                                               outage: str) -> None:
    """Defect 2: the target's answers are dropped (a COMMIT applied, its receipt lost), the gateway
    is SIGKILLed 1.5 s later and started again while the target stays unreachable for three times
    ``send_timeout`` (``refused``: connections reset; ``silent``: accepted, never answered, nothing
    reaching the broker), then the target is back.  The batch in doubt must not be sent twice."""
    queues = Queues(activemq)
    admin = free_port()
    with TcpProxy("127.0.0.1", activemq.stomp_port, seed=32) as target_proxy:
        gateway = GatewayProcess(tmp_path / "gw", admin_toml(admin) + connector_toml("amq_src", activemq.stomp_port)
                                 + connector_toml("amq_dst", target_proxy.port) + bridge_toml(queues, qos, 20))
        queues.fill(400)
        try:
            gateway.start()
            wait_until(lambda: forwarded(admin) >= 40, 60, "the bridge to move")
            target_proxy.mute()
            wait_until(lambda: bool(status(admin).get("in_flight")), 10, "a batch in flight, its answer dropped")
            time.sleep(1.5)
            gateway.kill()
            if outage == "refused":
                target_proxy.cut()
            else:
                target_proxy.vanish()
            target_proxy.unmute()
            outage_ends = threading.Timer(3 * SEND_TIMEOUT / 1000, target_proxy.heal)
            outage_ends.start()
            try:
                gateway.start(timeout=60)  # may open its listeners only once the target answers
            finally:
                outage_ends.join()
            settle([admin])
            gateway.stop()
            count = queues.count()
        except BaseException:
            print_logs(gateway)
            raise
        finally:
            gateway.kill()
    try:
        count.check(qos)
    except AssertionError:
        print_logs(gateway)
        raise


def test_two_bridge_processes_on_one_data_directory(tmp_path: Path, activemq: ActiveMQBroker,
                                                    source_proxy: TcpProxy) -> None:
    """Two ``jmsgateway bridge`` processes with one config and one data directory: when the first
    is SIGKILLed the second takes over and everything arrives exactly once; while the first runs
    the second must not consume beside it, nor keep trying to: no connection to the source (on
    main it opens one every ``failure_retry_interval``, which ActiveMQ refuses for the client id
    the first holds)."""
    queues = Queues(activemq)
    config = tmp_path / "bridges.toml"
    config.write_text(default_config() + "\n" + connector_toml("amq_src", source_proxy.port)
                      + connector_toml("amq_dst", activemq.stomp_port)
                      + bridge_toml(queues, "ONCE_AND_ONLY_ONCE", 20))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "gateway.cli", "bridge", "--config", str(config),
               "--set", f'gateway.data_dir="{tmp_path / "data"}"']
    processes: list[subprocess.Popen[bytes]] = []
    outputs: list[Path] = []

    def launch(index: int) -> subprocess.Popen[bytes]:
        log = tmp_path / f"bridge{index}.log"
        outputs.append(log)
        with log.open("wb") as sink:
            process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT)
        processes.append(process)
        return process

    def show() -> str:
        return "\n".join(f"--- {log.name} ---\n{log.read_text(errors='replace')[-4000:]}" for log in outputs)

    try:
        first = launch(1)
        queues.fill(100)
        wait_until(lambda: source_proxy.open_connections > 0, 60, "the first process's source connection")
        time.sleep(2.0)
        opened = source_proxy.connections
        time.sleep(3.0)
        assert source_proxy.connections == opened, "the first process alone keeps its source connection"
        launch(2)
        time.sleep(6.0)
        beside = source_proxy.connections - opened
        first.send_signal(signal.SIGKILL)
        first.wait(15)
        queues.fill(100, first=100)
        wait_until(lambda: not drain_peek(activemq, queues), 90, "the second process to take the source over")
        count = queues.count()
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(15)
    print(show()[-3000:])
    count.check("ONCE_AND_ONLY_ONCE")
    assert beside == 0, (
        f"while the first process ran, the second opened {beside} connection(s) to the source on the same data "
        f"directory (a standby, like an ActiveMQ slave, connects to nothing; with one data directory both have "
        f"one gateway id, so ActiveMQ refuses the second's client id and it reconnects every "
        f"failure_retry_interval)\n{show()}")


def drain_peek(broker: ActiveMQBroker, queues: Queues) -> list[str]:
    """The ids still in the source queue, browsed (not consumed)."""
    client = Client(("127.0.0.1", broker.stomp_port))
    found: list[str] = []
    try:
        client.subscribe(queues.source, f"peek-{uuid.uuid4().hex[:6]}", ack="auto", browser="true")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                frame = client.listener.messages.get(timeout=0.5)
            except queue.Empty:
                break
            if frame.headers.get("browser") == "end":
                break
            found.append(frame.body if isinstance(frame.body, str) else frame.body.decode())
    finally:
        client.disconnect()
    return found
