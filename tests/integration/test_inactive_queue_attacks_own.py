"""Black-box attacks on the collection of inactive auto-created queues that need gateways of their own: the
20,000-name flood, ``max_destinations`` freed by a collection, SIGHUP mid-flood, kill -9 right after a
collection, a standby's takeover (split from ``test_inactive_queue_attacks.py`` so that CI's ``--dist
loadfile`` runs them beside the attacks on the shared gateway; the same promise and helpers)."""

from __future__ import annotations

import queue
import signal
import threading
import time
from pathlib import Path

from tests.integration.test_inactive_queue_attacks import (
    ARGS,
    MODULE_CONFIG,
    PAST,
    Gateway,
    make_empty,
    metric,
    metrics,
    queues,
    set_timeout_in_file,
    start,
    status,
    take,
    unique,
    wait_gone,
)
from tests.support.authorization import weak_logins
from tests.support.destination_attacks import frame, send_frame
from tests.support.ports import wait_for_port
from tests.support.raw_stomp import RawStomp
from tests.support.standby import gateway_pair, role
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

LIMIT_USERS = {"root": "r00t!x", "eve": "eve-pw"}
LIMITS = """
[auth.limits."*"]
max_queues = 3

[auth.limits.root]
max_connections = 1000
"""


def test_a_flood_of_invented_names_is_collected_while_the_gateway_stays_responsive(tmp_path: Path) -> None:
    gw = start(tmp_path / "flood", LIMITS, weak_logins(**LIMIT_USERS))
    root = ("root", LIMIT_USERS["root"])
    try:
        before = status(gw, root)["limits"]["destinations"]
        collected_before = metric(metrics(gw, root), "jmsgateway_broker_queues_collected_total")
        pinger = Client(gw.address, login="root", passcode=LIMIT_USERS["root"], heartbeats=(300, 300))
        pinger.subscribe("/queue/gcping", "p")
        stop = threading.Event()
        round_trips: list[float] = []

        def ping() -> None:
            while not stop.is_set():
                began = time.monotonic()
                pinger.send("/queue/gcping", "ping")
                try:
                    pinger.listener.messages.get(timeout=10)
                except queue.Empty:
                    round_trips.append(10.0)
                    return
                round_trips.append(time.monotonic() - began)
                time.sleep(0.02)

        pinging = threading.Thread(target=ping, daemon=True)
        pinging.start()
        raw = RawStomp(gw.address, timeout=30)
        raw.connect(extra=f"login:root\npasscode:{LIMIT_USERS['root']}\n")
        names = [f"/queue/gcflood.{n}" for n in range(20_000)]
        for chunk in range(0, len(names), 2000):
            raw.send(b"".join(frame("SUBSCRIBE", {"id": "f", "destination": name}) + frame("UNSUBSCRIBE", {"id": "f"})
                              for name in names[chunk:chunk + 2000])
                     + frame("BEGIN", {"transaction": "_", "receipt": f"c{chunk}"})
                     + frame("ABORT", {"transaction": "_"}))
            assert raw.frame(60).headers.get("receipt-id") == f"c{chunk}"
        wait_until(lambda: status(gw, root)["limits"]["destinations"] <= before + 1, 30, "the flood collected")
        time.sleep(1.0)
        stop.set()
        pinging.join(15)
        text = metrics(gw, root)
        assert "gcflood" not in text
        assert metric(text, "jmsgateway_broker_queues_collected_total") - collected_before >= 20_000
        assert pinger.listener.heartbeat_timeouts == 0
        print(f"ping round trips: {len(round_trips)}, max {max(round_trips):.3f} s")
        assert max(round_trips) < 2.0, f"a ping took {max(round_trips):.2f} s"
        assert "gcflood.19999" not in gw.process.log()  # no line a queue at info
        raw.close()
        pinger.disconnect()

        # a login at max_queues gets its room back
        eve = RawStomp(gw.address)
        eve.connect(extra=f"login:eve\npasscode:{LIMIT_USERS['eve']}\n")
        for round_ in range(6):  # crossing sweeps: pauses of 0.9 to 1.4 s around the 1 s timeout
            names = [f"/queue/gceve.{n}" for n in range(3)]
            eve.send(b"".join(send_frame(name, "x", {"receipt": f"e{round_}{n}"}) for n, name in enumerate(names))
                     + b"".join(frame("SUBSCRIBE", {"id": f"d{n}", "destination": name})
                                for n, name in enumerate(names)))
            replies = [eve.frame() for _ in range(6)]
            assert sorted(reply.command for reply in replies) == ["MESSAGE"] * 3 + ["RECEIPT"] * 3, \
                [(r.headers, r.body) for r in replies]
            eve.send(b"".join(frame("UNSUBSCRIBE", {"id": f"d{n}"}) for n in range(3)))
            time.sleep(0.9 + 0.1 * (round_ % 6))
        wait_until(lambda: not any(q.startswith("/queue/gceve.") for q in queues(gw, root)), 8,
                   "eve's queues collected")
        eve.send(b"".join(send_frame(f"/queue/gceve.last.{n}", "x", {"receipt": f"l{n}"}) for n in range(4)))
        replies = [eve.frame() for _ in range(4)]
        assert [r.command for r in replies] == ["RECEIPT"] * 3 + ["ERROR"], [(r.headers, r.body) for r in replies]
        embedded = status(gw, root)
        assert embedded["limits"]["destinations"] == len(embedded["queues"]), embedded
        eve.close()
    except BaseException:
        print(gw.process.log()[-3000:])
        raise
    finally:
        gw.process.stop()


def test_a_scheduled_occurrence_refused_by_max_destinations_is_delivered_once_a_collection_makes_room(
        tmp_path: Path) -> None:
    gw = start(tmp_path / "cap", args=["--set", "broker.max_destinations=4"])
    try:
        client = Client(gw.address)
        for n in range(4):
            make_empty(gw, f"/queue/gccap.{n}")
        client.send("/queue/gccap.new", "due", receipt=True, headers={"AMQ_SCHEDULED_DELAY": "200"})
        refused = RawStomp(gw.address)
        refused.connect()
        refused.send(send_frame("/queue/gccap.other", "x", {"receipt": "o"}))
        assert refused.frame().command == "ERROR"
        wait_until(lambda: "/queue/gccap.new" in queues(gw), 10, "the occurrence delivered")
        assert take(client, "/queue/gccap.new", 1) == ["due"]
        refused.close()
        client.disconnect()
    finally:
        gw.process.stop()


def test_sighup_turns_the_collection_on_and_off_in_the_middle_of_a_flood(tmp_path: Path) -> None:
    gw = start(tmp_path / "hup", timeout_line="0")
    try:
        raw = RawStomp(gw.address, timeout=30)
        raw.connect()

        def flood(prefix: str, count: int) -> list[str]:
            names = [f"/queue/{prefix}.{n}" for n in range(count)]
            raw.send(b"".join(frame("SUBSCRIBE", {"id": "f", "destination": name}) + frame("UNSUBSCRIBE", {"id": "f"})
                              for name in names)
                     + frame("BEGIN", {"transaction": "_", "receipt": prefix}) + frame("ABORT", {"transaction": "_"}))
            assert raw.frame(60).headers.get("receipt-id") == prefix
            return names

        first = flood("gchupa", 800)
        set_timeout_in_file(gw.process, "1")
        assert gw.process.process is not None
        gw.process.process.send_signal(signal.SIGHUP)
        second = flood("gchupb", 800)
        wait_until(lambda: not any(q.startswith("/queue/gchup") for q in queues(gw)), 15, "0 -> 1 collects")
        assert first and second
        third = flood("gchupc", 800)
        set_timeout_in_file(gw.process, "0")
        gw.process.process.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        fourth = flood("gchupd", 800)
        time.sleep(PAST)
        held = queues(gw)
        assert all(name in held for name in fourth), "collected after the timeout was set to 0"
        assert third is not None
        raw.close()
    except BaseException:
        print(gw.process.log()[-3000:])
        raise
    finally:
        gw.process.stop()


def test_a_kill_right_after_a_collection_loses_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    """kill -9 just after a collection: the collected queue does not come back, a queue that held persistent
    messages (a paged one too) is there after the restart, past the timeout, with every message."""
    gw = start(tmp_path / "kill", MODULE_CONFIG)
    client = Client(gw.address)
    keep, gone, paged = unique("gckeep."), unique("gcgone."), unique("gcpage.kill.")
    for n in range(3):
        client.send(keep, f"k{n}", receipt=True, persistent="true")
    for n in range(20):
        client.send(paged, f"{n}:" + "p" * 300, receipt=n == 19, persistent="true")
    client.send(gone, "g", receipt=True, persistent="true")
    assert take(client, gone, 1) == ["g"]
    scheduled = unique("gcsched.kill.")
    make_empty(gw, scheduled)
    client.send(scheduled, "due", receipt=True, persistent="true", headers={"AMQ_SCHEDULED_DELAY": "2500"})
    wait_gone(gw, gone)
    gw.process.kill()
    gw.process.start()
    wait_for_port(gw.admin_port)
    try:
        time.sleep(PAST)
        held = queues(gw)
        assert gone not in held and keep in held and paged in held, held
        client = Client(gw.address)
        assert take(client, keep, 3) == ["k0", "k1", "k2"]
        assert [int(b.split(":")[0]) for b in take(client, paged, 20)] == list(range(20))
        assert take(client, gone, 0) == []
        assert take(client, scheduled, 1) == ["due"]  # recovered and due by now
        client.disconnect()
        wait_gone(gw, keep)
        wait_gone(gw, gone)
    finally:
        gw.process.stop()


def test_a_standby_that_takes_over_keeps_the_messages_and_sweeps(tmp_path: Path) -> None:
    active, active_admin, standby, standby_admin = gateway_pair(tmp_path, ARGS)
    try:
        client = Client(active.address)
        keep = unique("gcha.")
        for n in range(3):
            client.send(keep, f"k{n}", receipt=True, persistent="true")
        make_empty(Gateway(active, active_admin), unique("gcha.empty."))
        active.kill()
        wait_until(lambda: role(standby_admin) == "active", 30, "takeover")
        wait_for_port(standby.port, timeout=30)
        taken = Gateway(standby, standby_admin)
        time.sleep(PAST)
        assert keep in queues(taken)
        other = Client(standby.address)
        assert take(other, keep, 3) == ["k0", "k1", "k2"]
        wait_gone(taken, keep)
        other.disconnect()
    finally:
        standby.stop()
        active.kill()
