"""A queue created in the admin console stays until the console deletes it (docs/stomp.md "Inactive
queues", docs/admin.md), as one created through Artemis's management or ActiveMQ's web console does: real
gateway processes, real HTTP calls to ``/console/api``, ``[broker] inactive_queue_timeout = 1`` so that an
ordinary empty queue would go within about a second.  After a restart (SIGTERM and SIGKILL), a standby's
takeover and a backup restored elsewhere, the queue is listed in the console and ``/metrics`` with zero
messages and is not collected; once deleted, a restart does not bring it back; a start that finds more
recorded queues than ``max_destinations`` keeps them and says so in the log."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.integration.test_admin import http
from tests.integration.test_console import ALICE, USERS, WEAK, api
from tests.integration.test_operations_backup import jmsgateway
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.standby import accepts, gateway_pair
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

TIMEOUT = ["--set=broker.inactive_queue_timeout=1"]
"""An empty auto-created queue goes 1 to 1.2 s after it became inactive."""

CONSOLE = """
users = ["alice"]
roles = { alice = "administrator" }
"""


def console_config(admin: int) -> str:
    return f'[admin]\nlisten = ["tcp:{admin}:interface=127.0.0.1"]\n{CONSOLE}'


def start(make_gateway: Callable[..., GatewayProcess], *args: str) -> tuple[GatewayProcess, int]:
    admin = free_port()
    gateway = make_gateway(console_config(admin), args=[USERS, WEAK, *TIMEOUT, *args])
    wait_for_port(admin, timeout=10)
    return gateway, admin


def restart(gateway: GatewayProcess, admin: int, kill: bool = False) -> None:
    if kill:
        gateway.kill()
    else:
        gateway.stop()
    gateway.start()
    wait_for_port(admin, timeout=10)


def create(admin: int, name: str) -> None:
    status, answer = api(admin, "create", body={"destination": name})
    assert (status, answer.get("result")) == (200, True), answer


def listed(admin: int) -> dict[str, int]:
    """The console's queues: name -> pending messages."""
    status, document = api(admin, "destinations")
    assert status == 200, document
    return {row["name"]: row["pending"] for row in document["queues"]}


def metric(admin: int, name: str) -> float | None:
    """``jmsgateway_broker_destination_messages`` of the queue ``name`` (None: no series)."""
    status, text, _ = http(admin, "GET", "/metrics", ALICE)
    assert status == 200
    series = f'jmsgateway_broker_destination_messages{{destination="{name}"}} '
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(series)), None)


def make_empty(gateway: GatewayProcess, name: str) -> None:
    """An auto-created queue, empty and unused (the collection's prey, for comparison)."""
    client = Client(gateway.address, login="alice", passcode="secret")
    try:
        client.subscribe(name)
        client.unsubscribe()
    finally:
        client.disconnect()


def test_a_created_queue_survives_restarts_empty_and_is_not_collected(
        make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway, admin = start(make_gateway)
    create(admin, "/queue/kept.ops")
    for kill in (False, True):
        restart(gateway, admin, kill)
        assert listed(admin).get("/queue/kept.ops") == 0, listed(admin)
        assert metric(admin, "/queue/kept.ops") == 0
        make_empty(gateway, "/queue/kept.auto")
        wait_until(lambda: "/queue/kept.auto" not in listed(admin), 10, "the auto-created queue's collection")
        time.sleep(2)  # (twice the timeout: sweeps every 0.1 s)
        assert listed(admin).get("/queue/kept.ops") == 0, "a console-created queue was collected after a restart"
    assert "1 queues the console created" in gateway.log()


def test_a_deleted_queue_does_not_come_back_after_a_restart(make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway, admin = start(make_gateway)
    create(admin, "/queue/gone.ops")
    create(admin, "/queue/gone.kept")
    status, answer = api(admin, "remove", body={"destination": "/queue/gone.ops"})
    assert (status, answer.get("result")) == (200, 0), answer
    restart(gateway, admin, kill=True)
    queues = listed(admin)
    assert "/queue/gone.ops" not in queues and queues.get("/queue/gone.kept") == 0, queues


def test_a_standby_that_takes_over_lists_the_queue(tmp_path: Path) -> None:
    active, active_admin, standby, standby_admin = gateway_pair(tmp_path, [USERS, WEAK, *TIMEOUT],
                                                                extra_config=CONSOLE)
    try:
        create(active_admin, "/queue/ha.ops")
        status, answer = api(standby_admin, "create", body={"destination": "/queue/ha.early"})
        assert status == 503 and answer["error"].startswith("this gateway is a standby"), answer
        assert active.process is not None
        active.process.kill()
        active.process.wait(15)
        wait_until(lambda: accepts(standby.port), 60, "the standby's STOMP listener")
        assert listed(standby_admin).get("/queue/ha.ops") == 0
        assert "/queue/ha.early" not in listed(standby_admin)
        make_empty(standby, "/queue/ha.auto")
        wait_until(lambda: "/queue/ha.auto" not in listed(standby_admin), 10, "the auto-created queue's collection")
        time.sleep(2)
        assert listed(standby_admin).get("/queue/ha.ops") == 0, "collected after the takeover"
        assert metric(standby_admin, "/queue/ha.ops") == 0
    finally:
        active.kill()
        standby.kill()


def test_a_backup_carries_the_queue(make_gateway: Callable[..., GatewayProcess], tmp_path: Path) -> None:
    """``jmsgateway backup`` of a running gateway, ``restore`` into another data directory: the queue is there."""
    live, live_admin = start(make_gateway)
    create(live_admin, "/queue/backed.ops")
    destination = tmp_path / "backup"
    result = jmsgateway("backup", str(destination), "--config", str(live.config_path), "--data-dir", str(live.data_dir))
    assert result.returncode == 0, result.stderr
    live.kill()
    admin = free_port()
    restored = GatewayProcess(tmp_path / "restored", console_config(admin), args=[USERS, WEAK, *TIMEOUT])
    done = jmsgateway("restore", str(destination), "--config", str(restored.config_path), "--data-dir",
                      str(restored.data_dir))
    assert done.returncode == 0, done.stderr
    try:
        restored.start()
        wait_for_port(admin, timeout=10)
        time.sleep(2)
        assert listed(admin).get("/queue/backed.ops") == 0, listed(admin)
    finally:
        restored.kill()


def test_a_start_past_max_destinations_keeps_the_recorded_queues_and_says_so(
        make_gateway: Callable[..., GatewayProcess]) -> None:
    gateway, admin = start(make_gateway, "--set=broker.max_destinations=5")
    for name in ("a", "b", "c"):
        create(admin, f"/queue/cap.{name}")
    gateway.stop()
    gateway.args = [*(arg for arg in gateway.args if "max_destinations" not in arg), "--set=broker.max_destinations=2"]
    gateway.start()
    wait_for_port(admin, timeout=10)
    assert {name for name in listed(admin) if name.startswith("/queue/cap.")} == {
        "/queue/cap.a", "/queue/cap.b", "/queue/cap.c"}
    log = gateway.wait_for_log("more than [broker] max_destinations = 2")
    assert "holds 3 destinations (3 queues the console created" in log
    status, answer = api(admin, "create", body={"destination": "/queue/cap.d"})
    assert status == 409 and "max_destinations" in answer["error"], answer
