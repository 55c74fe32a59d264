"""One owner per bridge (issue 32): the data directory's bridge-store lock makes a second
process stand by, and a bridge's source subscription asks to be the exclusive consumer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.task import Clock

from gateway.bridges.config import parse_bridge
from gateway.bridges.ownership import LOCK_FILE, BridgeStoreLock
from gateway.bridges.service import build_bridge_service
from gateway.broker.broker import EmbeddedBroker
from gateway.connectors.stomp_subscription import BrokerSubscription
from gateway.interfaces import SubscriptionSpec
from tests.unit.test_bridge import Rig


@pytest.fixture
def other_process(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``<tmp_path>/bridges.lock`` until its stdin closes."""
    code = textwrap.dedent(f"""
        import fcntl, os, sys
        fd = os.open({str(tmp_path / LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT)
        fcntl.lockf(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        sys.stdin.read()
    """)
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "locked"
    yield process
    if process.poll() is None:
        process.kill()
        process.wait(5)


def test_the_lock_is_refused_while_another_process_holds_it(tmp_path: Path,
                                                            other_process: subprocess.Popen[str]) -> None:
    lock = BridgeStoreLock(str(tmp_path))
    assert not lock.try_acquire()
    other_process.kill()
    other_process.wait(5)
    assert lock.try_acquire() and lock.held
    lock.release()


def test_a_second_process_on_one_data_dir_stands_by_until_the_first_goes(
        tmp_path: Path, other_process: subprocess.Popen[str]) -> None:
    clock = Clock()
    broker = EmbeddedBroker(clock)
    broker.start()
    config = parse_bridge({"name": "b", "source": {"connector": "embedded", "destination": "/queue/src"},
                           "target": {"connector": "embedded", "destination": "/queue/dst"}},
                          0, "t.toml", {"embedded"})
    service = build_bridge_service([config], {"embedded": broker}, clock, registry=CollectorRegistry(),
                                   data_dir=str(tmp_path), owner_lock=True)
    service.startService()
    assert service.standby
    assert service.bridge("b").state == "stopped", "no bridge runs while another process owns the store"
    clock.advance(3)
    assert service.bridge("b").state == "stopped"
    other_process.kill()
    other_process.wait(5)
    clock.advance(1)
    assert not service.standby
    assert service.bridge("b").state == "running"
    service.stopService()
    clock.advance(1)
    assert not service.lock.held


def test_a_bridge_subscribes_as_the_exclusive_consumer() -> None:
    rig = Rig()
    assert rig.bridge.subscription.spec().exclusive


def test_a_bridge_with_a_selector_leaves_the_queue_shared() -> None:
    """An exclusive consumer takes the whole queue: what the selector leaves would wait for ever."""
    rig = Rig(selector="color = 'red'")
    assert rig.bridge.subscription.spec().selector == "color = 'red'"
    assert not rig.bridge.subscription.spec().exclusive


def test_activemq_gets_the_exclusive_header_for_a_queue_only() -> None:
    class Connector:
        subscribe_transformation = ""

    def headers(spec: SubscriptionSpec) -> dict[str, str]:
        return BrokerSubscription(Connector(), "s-1", spec, None).headers()  # type: ignore[arg-type]

    assert headers(SubscriptionSpec("/queue/a", exclusive=True))["activemq.exclusive"] == "true"
    assert "activemq.exclusive" not in headers(SubscriptionSpec("/queue/a"))
    assert "activemq.exclusive" not in headers(SubscriptionSpec("/topic/a", exclusive=True))
