"""Inactive auto-created queues collected on real gateway processes (``[broker] inactive_queue_timeout``,
docs/stomp.md "Inactive queues"), with a timeout of 1 s: a login at ``max_queues`` gets its room back, a SEND
or SUBSCRIBE racing a collection loses nothing (pipelined raw frames), nothing stale stays in the SQLite store
across a restart, and what must stay stays (an unacknowledged message, an idle consumer, a paged queue, a
scheduled message due later, the console's queue, a standby's after its takeover)."""

from __future__ import annotations

import signal
import sqlite3
import time
from typing import Any

from tests.integration.test_destination_limits import GRANTS, PASSWORDS, admin_get, config, connect, start, status
from tests.support.admin_requests import admin_request
from tests.support.authorization import weak_logins
from tests.support.gateway import GatewayProcess
from tests.support.ports import wait_for_port
from tests.support.raw_stomp import RawStomp
from tests.support.standby import accepts, gateway_pair
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

TIMEOUT = 1
"""Seconds: a queue goes between 1 and 1.2 s after it became inactive (sweeps every 0.1 s)."""


def inactive_config(limits: str = "", broker: str = "") -> str:
    text = config(0, limits, logins=True)
    return text.replace("[broker]\n", f"[broker]\ninactive_queue_timeout = {TIMEOUT}\n{broker}", 1)


def queues(gateway: GatewayProcess) -> dict[str, Any]:
    document: dict[str, Any] = status(gateway)["connectors"]["embedded"]["queues"]
    return document


def collected_total(gateway: GatewayProcess) -> float:
    text = admin_get(gateway, "/metrics")
    line = next(line for line in text.splitlines() if line.startswith("jmsgateway_broker_queues_collected_total "))
    return float(line.split()[1])


def make_empty(client: RawStomp, *names: str) -> None:
    """SUBSCRIBE and UNSUBSCRIBE each of ``names``: made, empty, unused."""
    client.send("".join(f"SUBSCRIBE\nid:{name}\ndestination:{name}\n\n\x00UNSUBSCRIBE\nid:{name}\nreceipt:{name}\n\n\x00"
                        for name in names))
    for _ in names:
        assert client.frame(10.0).command == "RECEIPT"


def test_a_login_at_max_queues_gets_its_room_back(tmp_path: Any) -> None:
    gateway = start(tmp_path, inactive_config("\n[auth.limits.eve]\nmax_queues = 2\n"), admin=True)
    try:
        eve = connect(gateway, "eve")
        make_empty(eve, "/queue/eve.a", "/queue/eve.b")
        eve.send("SUBSCRIBE\nid:c\ndestination:/queue/eve.c\nreceipt:c\n\n\x00")
        refusal = eve.frame(10.0)
        assert refusal.command == "ERROR" and "login 'eve' holds 2 queues" in refusal.body.decode(), refusal
        wait_until(lambda: not {"/queue/eve.a", "/queue/eve.b"} & set(queues(gateway)), 10.0, "the collection")
        limits = status(gateway)["connectors"]["embedded"]["limits"]
        assert limits["logins"] == {} and limits["destinations"] == 0, limits
        eve.send("SUBSCRIBE\nid:c\ndestination:/queue/eve.c\nreceipt:c\n\n\x00")
        assert eve.frame(10.0).command == "RECEIPT"
        assert collected_total(gateway) == 2
    finally:
        gateway.kill()


def test_sends_and_subscribes_racing_the_collection_lose_nothing_and_leave_nothing_stored(tmp_path: Any) -> None:
    """20 queues, emptied and left alone for about the timeout, then a SEND (persistent every other time)
    and a SUBSCRIBE pipelined in one write, in rounds whose pauses move across the moment of collection:
    every message arrives, some queues were collected between rounds, and after a restart the SQLite
    store holds nothing for them."""
    gateway = start(tmp_path, inactive_config(), admin=True)
    try:
        client = connect(gateway, "eve")
        names = [f"/queue/eve.race{index}" for index in range(20)]
        received = 0
        for round_ in range(12):
            persistent = "persistent:true\n" if round_ % 2 else ""
            client.send("".join(f"SEND\ndestination:{name}\n{persistent}receipt:s{round_}.{index}\n\n{round_}\x00"
                                f"SUBSCRIBE\nid:{index}\ndestination:{name}\nack:auto\n\n\x00"
                                for index, name in enumerate(names)))
            got = [client.frame(10.0) for _ in range(2 * len(names))]
            assert sorted(frame.command for frame in got) == ["MESSAGE"] * 20 + ["RECEIPT"] * 20, got
            assert all(frame.body.decode() == str(round_) for frame in got if frame.command == "MESSAGE")
            received += 20
            client.send("".join(f"UNSUBSCRIBE\nid:{index}\n\n\x00" for index in range(len(names)))
                        + f"SEND\ndestination:/queue/eve.sync\nreceipt:u{round_}\n\nx\x00")
            assert client.frame(10.0).headers.get("receipt-id") == f"u{round_}"
            time.sleep(0.9 + 0.03 * round_)  # (0.9 s to 1.23 s: before, at and after the queues' time is up)
        assert received == 240
        wait_until(lambda: collected_total(gateway) >= 20, 10.0, "the queues' collection")
        client.close()
        gateway.stop()
        with sqlite3.connect(str(gateway.data_dir / "broker.sqlite")) as db:
            rows = db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
            durables = db.execute("SELECT COUNT(*) FROM durables").fetchone()[0]
        assert (rows, durables) == (0, 0)
        gateway.start()
        wait_for_port(gateway.admin_port, timeout=10)  # type: ignore[attr-defined]
        assert not {name for name in queues(gateway) if "race" in name}
    finally:
        gateway.kill()


def test_what_must_stay_stays(tmp_path: Any) -> None:
    """Longer than the timeout: a queue whose one message is delivered and unacknowledged, one whose consumer
    sends nothing, a paged one, one with a scheduled message due later, and one the console made."""
    paged = '\n[broker.destinations."/queue/eve.paged"]\nmax_size = 4096\n'
    gateway = start(tmp_path, inactive_config() + paged, admin=True)
    try:
        port = gateway.admin_port  # type: ignore[attr-defined]
        answer = admin_request(port, "POST", "/console/api/create", ("root", PASSWORDS["root"]),
                               {"destination": "/queue/eve.console"})
        assert answer[0] == 200, answer
        holder = connect(gateway, "eve")
        holder.send("SUBSCRIBE\nid:1\ndestination:/queue/eve.unacked\nack:client\n\n\x00"
                    "SUBSCRIBE\nid:2\ndestination:/queue/eve.idle\nack:client\nreceipt:r\n\n\x00")
        assert holder.frame(10.0).command == "RECEIPT"
        sender = connect(gateway, "eve")
        big = "x" * 1000
        sender.send("SEND\ndestination:/queue/eve.unacked\nreceipt:1\n\nunacked\x00"
                    + "".join(f"SEND\ndestination:/queue/eve.paged\nreceipt:p{i}\n\n{big}\x00" for i in range(10)))
        make_empty(sender, "/queue/eve.later")
        sender.send("SEND\ndestination:/queue/eve.later\nAMQ_SCHEDULED_DELAY:4000\nreceipt:later\n\nlater\x00")
        frames = [holder.frame(10.0)] + [sender.frame(10.0) for _ in range(12)]
        assert frames[0].command == "MESSAGE" and frames[0].body == b"unacked"
        assert all(frame.command == "RECEIPT" for frame in frames[1:]), frames
        make_empty(sender, "/queue/eve.goes")
        wait_until(lambda: "/queue/eve.goes" not in queues(gateway), 10.0, "an empty queue's collection")
        time.sleep(2 * TIMEOUT)
        present = queues(gateway)
        for name in ("eve.console", "eve.unacked", "eve.idle", "eve.paged", "eve.later"):
            assert f"/queue/{name}" in present, (name, present)
        assert present["/queue/eve.unacked"]["inflight"] == 1
        assert status(gateway)["connectors"]["embedded"]["paging"]["/queue/eve.paged"]["paged"] > 0
        reader = Client(gateway.address, login="eve", passcode=PASSWORDS["eve"])  # (stomp.py)
        reader.subscribe("/queue/eve.later")
        assert reader.message(10.0).body == b"later"
        reader.disconnect()
    finally:
        gateway.kill()


def test_a_standby_that_takes_over_collects_with_its_own_timers(tmp_path: Any) -> None:
    active, _, standby, standby_admin = gateway_pair(tmp_path, [
        *weak_logins(**PASSWORDS), "--set", f"broker.inactive_queue_timeout={TIMEOUT}",
        "--set", 'admin.roles={ root = "administrator" }'], extra_config=GRANTS)
    try:
        assert active.process is not None
        active.process.kill()
        wait_until(lambda: accepts(standby.port), 30, "the standby's STOMP listener")
        standby.admin_port = standby_admin  # type: ignore[attr-defined]
        eve = connect(standby, "eve")
        make_empty(eve, "/queue/eve.after")
        wait_until(lambda: "/queue/eve.after" not in queues(standby), 10.0, "the standby's collection")
        assert collected_total(standby) == 1
    finally:
        standby.kill()
        active.kill()


def test_sighup_applies_a_new_timeout_to_the_next_sweep(tmp_path: Any) -> None:
    gateway = start(tmp_path, inactive_config().replace(f"inactive_queue_timeout = {TIMEOUT}\n",
                                                        "inactive_queue_timeout = 0\n", 1), admin=True)
    try:
        eve = connect(gateway, "eve")
        make_empty(eve, "/queue/eve.kept")
        time.sleep(3 * TIMEOUT)
        assert "/queue/eve.kept" in queues(gateway), "collected with inactive_queue_timeout = 0"
        gateway.config_path.write_text(inactive_config())
        assert gateway.process is not None
        gateway.process.send_signal(signal.SIGHUP)
        log = gateway.wait_for_log("SIGHUP: configuration")
        assert f"broker.inactive_queue_timeout = {TIMEOUT}; needs a restart: nothing" in log, log[-2000:]
        wait_until(lambda: "/queue/eve.kept" not in queues(gateway), 10.0, "the collection after the SIGHUP")
    finally:
        gateway.kill()


def test_a_bad_timeout_stops_the_start_naming_the_key(tmp_path: Any) -> None:
    output = GatewayProcess(tmp_path, args=["--set", "broker.inactive_queue_timeout=-5"]).start_fails()
    assert "broker.inactive_queue_timeout" in output, output[-2000:]
