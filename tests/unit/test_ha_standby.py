"""The store lock, the role and the role gate of :mod:`gateway.ha`, on real files and locks in one process
(``flock`` belongs to an open file, so two opens of one file exclude each other as two processes do)."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from gateway.admin.site import admin_resource
from gateway.broker.store.sqlite_store import SqliteStore
from gateway.errors import GatewayError
from gateway.ha.role import ACTIVE, STANDBY, GatewayRole
from gateway.ha.standby import RoleGate
from gateway.ha.store_lock import LocksNotEnforced, StoreLock
from tests.unit.test_admin import call, gateway_for


def test_the_lock_excludes_a_second_holder_until_released(tmp_path: Path) -> None:
    path = str(tmp_path / "data" / "broker.sqlite")
    first, second = StoreLock(path), StoreLock(path)
    assert first.try_acquire()
    assert not second.try_acquire()
    first.release()
    assert second.try_acquire()
    second.release()


def test_wait_blocks_until_the_holder_lets_go(tmp_path: Path) -> None:
    path = str(tmp_path / "broker.sqlite")
    holder, waiter = StoreLock(path), StoreLock(path)
    assert holder.try_acquire()
    got = threading.Event()

    def wait_then_tell() -> None:
        waiter.wait()
        got.set()

    thread = threading.Thread(target=wait_then_tell, daemon=True)
    thread.start()
    assert not got.wait(0.3), "the waiter got a lock that is held"
    holder.release()
    assert got.wait(10)
    assert waiter.fd is not None
    fd = waiter.hand_over()
    assert waiter.fd is None and not StoreLock(path).try_acquire()  # the handed descriptor keeps it
    os.close(fd)
    assert StoreLock(path).try_acquire()


def test_a_file_system_that_does_not_enforce_locks_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(fcntl, "flock", lambda fd, operation: None)
    with pytest.raises(LocksNotEnforced, match="does not enforce file locks"):
        StoreLock(str(tmp_path / "broker.sqlite")).try_acquire()


def test_a_file_system_that_refuses_locks_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    def refuse(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    with pytest.raises(LocksNotEnforced, match=r"refuses file locks \(No locks available\).*high-availability"):
        StoreLock(str(tmp_path / "broker.sqlite")).try_acquire()


def test_a_store_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the data directory should be")
    with pytest.raises(GatewayError, match=r"message store .*/data/broker.sqlite cannot be opened: "):
        StoreLock(str(tmp_path / "data" / "broker.sqlite")).try_acquire()


def test_role_status_and_metrics() -> None:
    registry = CollectorRegistry()
    role = GatewayRole(registry, wall_clock=lambda: 1000.0)
    assert registry.get_sample_value("jmsgateway_role", {"role": ACTIVE}) == 1
    role.become_standby("/d/broker.sqlite")
    assert role.standby and registry.get_sample_value("jmsgateway_role", {"role": STANDBY}) == 1
    assert registry.get_sample_value("jmsgateway_role", {"role": ACTIVE}) == 0
    assert registry.get_sample_value("jmsgateway_last_takeover_duration_seconds") is None
    role.took_over("/d/broker.sqlite", 999.5, 1.25, 42)
    assert role.status() == {"role": ACTIVE, "since": 1000.0, "store_lock": "/d/broker.sqlite", "takeovers": 1,
                             "last_takeover": {"at": 999.5, "duration_seconds": 1.25, "recovered_messages": 42}}
    assert registry.get_sample_value("jmsgateway_takeovers_total") == 1
    assert registry.get_sample_value("jmsgateway_last_takeover_duration_seconds") == 1.25
    assert registry.get_sample_value("jmsgateway_last_takeover_recovered_messages") == 42


class ThreadCalls:
    """A reactor's ``callFromThread`` that queues the calls for the test to run."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, tuple[Any, ...]]] = []

    def callFromThread(self, f: Any, *args: Any) -> None:
        self.calls.append((f, args))

    def run_when_called(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.calls:
            assert time.monotonic() < deadline, "nothing called from the thread"
            time.sleep(0.01)
        f, args = self.calls.pop(0)
        f(*args)


def gate_for(path: str, reactor: ThreadCalls, started: list[str]) -> tuple[RoleGate, Any]:
    store = SqliteStore(path, reactor)
    gateway = SimpleNamespace(store=store, role=GatewayRole(), broker=SimpleNamespace(queues={"/queue/a": [1, 2]},
                                                                                    durables={"d": [3]}))

    def activate() -> Deferred[Any]:
        started.append("active")
        return succeed(None)

    failures: list[Failure] = []
    gate = RoleGate(gateway, reactor, activate=activate, standby_opened=lambda: started.append("standby"),
                    failed=failures.append)
    return gate, gateway


def test_the_gate_starts_active_on_a_free_lock_and_hands_it_to_the_store(tmp_path: Path) -> None:
    path, started = str(tmp_path / "broker.sqlite"), list[str]()
    gate, gateway = gate_for(path, ThreadCalls(), started)
    gate.start()
    assert started == ["active"] and gate.activated and gateway.role.role == ACTIVE
    assert gateway.store._lock_fd is not None
    assert not StoreLock(path).try_acquire()
    gateway.store._unlock()


def test_the_gate_waits_as_standby_and_takes_over_when_the_lock_is_free(tmp_path: Path) -> None:
    path, started, reactor = str(tmp_path / "broker.sqlite"), list[str](), ThreadCalls()
    holder = StoreLock(path)
    assert holder.try_acquire()
    gate, gateway = gate_for(path, reactor, started)
    gate.start()
    assert started == ["standby"] and gateway.role.standby and not gate.activated
    time.sleep(0.2)
    assert reactor.calls == []
    holder.release()  # the active gateway died
    reactor.run_when_called()
    assert started == ["standby", "active"] and gateway.role.role == ACTIVE
    assert gateway.role.last_takeover is not None and gateway.role.last_takeover.recovered_messages == 3
    assert gateway.store._lock_fd is not None
    gateway.store._unlock()


def test_a_stopped_standby_does_not_take_over(tmp_path: Path) -> None:
    path, started, reactor = str(tmp_path / "broker.sqlite"), list[str](), ThreadCalls()
    holder = StoreLock(path)
    assert holder.try_acquire()
    gate, gateway = gate_for(path, reactor, started)
    gate.start()
    gate.stop()
    holder.release()
    reactor.run_when_called()
    assert started == ["standby"] and gateway.role.standby
    assert StoreLock(path).try_acquire()  # released again


def test_the_admin_endpoint_of_a_standby_says_standby_everywhere() -> None:
    gateway = gateway_for({})
    gateway.started_at = None
    gateway.role.become_standby("/d/broker.sqlite")
    site = admin_resource(gateway, gateway.admin)
    code, document = call(site, "GET", "/readyz")
    assert code == 503 and document["reasons"] == [
        "standby: another gateway holds the message store's lock (gateway.ha)"]
    code, document = call(site, "GET", "/health")
    assert (code, document["status"], document["reason"], document["role"]) == (503, "DOWN", "standby", STANDBY)
    assert call(site, "GET", "/livez")[0] == 200
    code, document = call(site, "GET", "/status")
    assert (code, document["role"], document["store_lock"], document["last_takeover"]) == (
        200, STANDBY, "/d/broker.sqlite", None)
    gateway.role.took_over("/d/broker.sqlite", 1.0, 0.5, 7)
    gateway.started_at = 2.0
    assert call(site, "GET", "/status")[1]["last_takeover"] == {"at": 1.0, "duration_seconds": 0.5,
                                                                "recovered_messages": 7}
    assert call(site, "GET", "/health")[1].get("reason") is None
