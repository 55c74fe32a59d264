"""Bounded destinations and per-login limits on real gateway processes: ``[broker] max_destinations``
and ``[auth.limits]`` (``max_queues``, ``max_connections``) met by pipelined SENDs in one write, by
SUBSCRIBEs, by a second login, after a restart, and lowered by SIGHUP (docs/stomp.md, "Destination
limits"; docs/security.md, "Resource limits per login").  Raw sockets where the bytes matter,
stomp.py where a client library's view does."""

from __future__ import annotations

import json
import signal
import urllib.request
from base64 import b64encode
from typing import Any

import stomp

from gateway.wire.frame import Frame
from tests.support.authorization import ROOT_GRANT, grant, weak_logins
from tests.support.gateway import GatewayProcess, default_config
from tests.support.ports import free_port, wait_for_port
from tests.support.raw_stomp import RawStomp
from tests.support.standby import accepts, gateway_pair
from tests.support.waiting import wait_until

PASSWORDS = {"root": "r00t!x", "alice": "alice-pw", "eve": "eve-pw"}
GRANTS = (ROOT_GRANT + grant("/queue/eve.*", read=["eve"], write=["eve"], admin=["eve"])
          + grant("/topic/eve.*", read=["eve"], write=["eve"], admin=["eve"])
          + grant("/queue/Consumer.*", read=["eve"], write=["eve"])
          + grant("/queue/alice.*", read=["alice"], write=["alice"]))


def config(max_destinations: int, limits: str = "", logins: bool = False) -> str:
    """The shipped config with ``max_destinations`` (in the file: a SIGHUP reads it) and, with ``logins``,
    root, alice and eve (plain text, development only) and the ``[auth.limits]`` lines ``limits``."""
    text = default_config().replace("[broker]\n", f"[broker]\nmax_destinations = {max_destinations}\n", 1)
    if logins:
        users = ", ".join(f'{login} = "{password}"' for login, password in PASSWORDS.items())
        text = text.replace("[auth]\n", f"[auth]\nusers = {{ {users} }}\nallow_weak_passwords = true\n", 1)
        text += GRANTS
    return text + limits


def start(tmp_path: Any, text: str, admin: bool = False) -> GatewayProcess:
    args = []
    gateway = GatewayProcess(tmp_path)
    if admin:
        gateway.admin_port = free_port()  # type: ignore[attr-defined]
        args = ["--set", f'admin.listen="tcp:{gateway.admin_port}:interface=127.0.0.1"',  # type: ignore[attr-defined]
                "--set", 'admin.roles={ root = "administrator" }']
    gateway.args = args
    gateway.config_path.write_text(text)
    gateway.start()
    if admin:
        wait_for_port(gateway.admin_port, timeout=10)  # type: ignore[attr-defined]
    return gateway


def admin_get(gateway: GatewayProcess, path: str, login: str = "root") -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{gateway.admin_port}{path}")  # type: ignore[attr-defined]
    request.add_header("Authorization", "Basic " + b64encode(f"{login}:{PASSWORDS[login]}".encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        text: str = response.read().decode()
    return text


def status(gateway: GatewayProcess, login: str = "root") -> dict[str, Any]:
    document: dict[str, Any] = json.loads(admin_get(gateway, "/status", login))
    return document


def connect(gateway: GatewayProcess, who: str | None = None) -> RawStomp:
    client = RawStomp(gateway.address)
    client.connect(extra=f"login:{who}\npasscode:{PASSWORDS[who]}\n" if who else "")
    return client


def send_frame(destination: str, body: str, receipt: str) -> str:
    return f"SEND\ndestination:{destination}\nreceipt:{receipt}\n\n{body}\x00"


def answers(client: RawStomp, count: int) -> dict[str, Frame]:
    """The next ``count`` answers by receipt-id (AssertionError if one is missing)."""
    got: dict[str, Frame] = {}
    for _ in range(count):
        frame = client.frame(15.0)
        got[frame.headers["receipt-id"]] = frame
    return got


def still_open(client: RawStomp, destination: str) -> None:
    """The connection answers a SEND to an existing destination with its RECEIPT."""
    client.send(send_frame(destination, "still here", "alive"))
    frame = client.frame(10.0)
    assert (frame.command, frame.headers.get("receipt-id")) == ("RECEIPT", "alive"), frame


def drain(gateway: GatewayProcess, destination: str, expected: int) -> list[str]:
    client = connect(gateway, "root" if gateway.config_path.read_text().count("users =") else None)
    client.send(f"SUBSCRIBE\nid:1\ndestination:{destination}\nack:auto\n\n\x00")
    bodies = [client.frame(10.0).body.decode() for _ in range(expected)]
    client.close()
    return bodies


def test_pipelined_sends_past_the_cap_are_refused_each_and_the_ones_before_kept(tmp_path: Any) -> None:
    gateway = start(tmp_path, config(20))
    try:
        client = connect(gateway)
        client.send("".join(send_frame(f"/queue/q{i}", f"m{i}", f"r{i}") for i in range(30)))  # (one write)
        got = answers(client, 30)
        assert all(got[f"r{i}"].command == "RECEIPT" for i in range(20)), got
        for i in range(20, 30):
            error = got[f"r{i}"]
            assert error.command == "ERROR" and error.headers["message"] == "destination limit reached", error
            assert f"/queue/q{i} was not created" in error.body.decode()
            assert "holds 20 destinations and its limit is 20 ([broker] max_destinations)" in error.body.decode()
        still_open(client, "/queue/q0")
        assert drain(gateway, "/queue/q19", 1) == ["m19"]
        assert drain(gateway, "/queue/q0", 2) == ["m0", "still here"]
        assert "was not created" in gateway.wait_for_log("max_destinations")
    finally:
        gateway.kill()


def test_subscribes_past_the_cap_get_an_error_over_stomp_py_and_the_connection_stays(tmp_path: Any) -> None:
    gateway = start(tmp_path, config(5))
    errors: list[Any] = []
    receipts: list[str] = []

    class Listener(stomp.ConnectionListener):
        def on_error(self, frame: Any) -> None:
            errors.append(frame)

        def on_receipt(self, frame: Any) -> None:
            receipts.append(frame.headers["receipt-id"])

    conn = stomp.Connection([gateway.address], heartbeats=(0, 0))
    conn.set_listener("l", Listener())
    conn.connect(wait=True)
    try:
        for i in range(8):
            conn.subscribe(f"/queue/s{i}", id=str(i), headers={"receipt": f"s{i}"})
        wait_until(lambda: len(receipts) + len(errors) == 8, 15.0, "eight answers")
        assert sorted(receipts) == [f"s{i}" for i in range(5)]
        assert sorted(e.headers["receipt-id"] for e in errors) == [f"s{i}" for i in range(5, 8)]
        assert all(e.headers["message"] == "destination limit reached" for e in errors)
        assert conn.is_connected()
        conn.send("/queue/s0", "to an existing queue", headers={"receipt": "send"})
        wait_until(lambda: "send" in receipts, 10.0, "the SEND's receipt")
        conn.send("/temp-queue/reply", "a temporary queue is one more", headers={"receipt": "temp"})
        wait_until(lambda: len(errors) == 4, 10.0, "the temporary queue's refusal")
        assert errors[-1].headers["receipt-id"] == "temp" and conn.is_connected()
    finally:
        conn.disconnect()
        gateway.kill()


def test_a_logins_max_queues_and_max_connections_leave_other_logins_alone(tmp_path: Any) -> None:
    limits = '\n[auth.limits.eve]\nmax_queues = 3\nmax_connections = 2\n'
    gateway = start(tmp_path, config(0, limits, logins=True), admin=True)
    try:
        eve = RawStomp(gateway.address)
        eve.connect(extra=f"login:eve\npasscode:{PASSWORDS['eve']}\nclient-id:eve-app\n")
        eve.send(send_frame("/queue/eve.1", "a", "e1")  # (one write: three creations, one too many, an old one)
                 + "SUBSCRIBE\nid:1\ndestination:/queue/Consumer.eve.VirtualTopic.x\nreceipt:e2\n\n\x00"
                 + "SUBSCRIBE\nid:2\ndestination:/topic/eve.t\nactivemq.subscriptionName:d\nreceipt:e3\n\n\x00"
                 + send_frame("/queue/eve.4", "b", "e4")
                 + send_frame("/queue/eve.1", "c", "e5"))
        got = answers(eve, 5)
        assert [got[f"e{i}"].command for i in range(1, 6)] == ["RECEIPT", "RECEIPT", "RECEIPT", "ERROR", "RECEIPT"], got
        assert "/queue/eve.4 was not created: login 'eve' holds 3 queues and its limit is 3 " \
               "([auth.limits] max_queues)" in got["e4"].body.decode()
        alice = connect(gateway, "alice")
        alice.send("".join(send_frame(f"/queue/alice.{i}", "x", f"a{i}") for i in range(10)))
        assert all(frame.command == "RECEIPT" for frame in answers(alice, 10).values())
        second = connect(gateway, "eve")
        third = RawStomp(gateway.address)
        third.send(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:eve\npasscode:{PASSWORDS['eve']}\n\n\x00")
        closed = third.until_closed(10.0)
        assert isinstance(closed[0], Frame) and closed[0].headers["message"] == "connection limit reached", closed
        assert "login 'eve' holds 2 connections and its limit is 2" in closed[0].body.decode()
        document = status(gateway)
        assert document["stomp_connections_by_login"] == {"alice": 1, "eve": 2}
        limits_status = document["connectors"]["embedded"]["limits"]
        assert limits_status["logins"]["eve"] == {"queues": 3, "max_queues": 3}
        assert limits_status["logins"]["alice"]["queues"] == 10
        second.close()
        wait_until(lambda: status(gateway)["stomp_connections_by_login"].get("eve") == 1, 10.0, "eve's close")
        connect(gateway, "eve").close()
        metrics = admin_get(gateway, "/metrics")
        assert 'jmsgateway_login_queues{login="eve"} 3.0' in metrics
        assert 'login="alice"' not in metrics  # (not configured by name: no series of its own)
        assert "jmsgateway_broker_destinations 13.0" in metrics
    finally:
        gateway.kill()


def test_after_a_restart_the_count_and_each_logins_queues_are_recovered(tmp_path: Any) -> None:
    limits = '\n[auth.limits.eve]\nmax_queues = 3\n'
    gateway = start(tmp_path, config(7, limits, logins=True), admin=True)
    try:
        eve = RawStomp(gateway.address)
        eve.connect(extra=f"login:eve\npasscode:{PASSWORDS['eve']}\nclient-id:eve-app\n")
        eve.send("SUBSCRIBE\nid:1\ndestination:/topic/eve.t\nactivemq.subscriptionName:d\nreceipt:1\n\n\x00"
                 "SUBSCRIBE\nid:2\ndestination:/queue/Consumer.eve.VirtualTopic.x\nreceipt:2\n\n\x00"
                 + send_frame("/queue/Consumer.eve2.VirtualTopic.x", "kept", "3"))
        assert [frame.command for frame in answers(eve, 3).values()] == ["RECEIPT"] * 3
        root = connect(gateway, "root")
        root.send("".join(send_frame(f"/queue/root.{i}", "p", f"r{i}") for i in range(3))
                  .replace("SEND\n", "SEND\npersistent:true\n"))
        assert [frame.command for frame in answers(root, 3).values()] == ["RECEIPT"] * 3
        gateway.kill()  # (kill -9 right after the RECEIPTs)
        gateway.start()
        wait_for_port(gateway.admin_port, timeout=10)  # type: ignore[attr-defined]
        limits_status = status(gateway)["connectors"]["embedded"]["limits"]
        assert limits_status["destinations"] == 6, limits_status
        assert limits_status["logins"] == {"eve": {"queues": 3, "max_queues": 3}}  # (root's queues: held by nobody)
        eve = connect(gateway, "eve")
        eve.send("SUBSCRIBE\nid:1\ndestination:/queue/Consumer.eve3.VirtualTopic.x\nreceipt:4\n\n\x00")
        refusal = eve.frame(10.0)
        assert refusal.command == "ERROR" and "login 'eve' holds 3 queues" in refusal.body.decode(), refusal
        root = connect(gateway, "root")
        root.send(send_frame("/queue/root.new", "x", "5") + send_frame("/queue/root.newer", "x", "6"))
        got = answers(root, 2)
        assert got["5"].command == "RECEIPT" and got["6"].command == "ERROR", got
        assert "holds 7 destinations and its limit is 7" in got["6"].body.decode()
        still_open(root, "/queue/root.0")
    finally:
        gateway.kill()


def test_sighup_lowering_the_cap_refuses_new_destinations_and_deletes_none(tmp_path: Any) -> None:
    gateway = start(tmp_path, config(100))
    try:
        client = connect(gateway)
        client.send("".join(send_frame(f"/queue/h{i}", f"m{i}", f"r{i}") for i in range(5)))
        assert [frame.command for frame in answers(client, 5).values()] == ["RECEIPT"] * 5
        gateway.config_path.write_text(config(3))
        assert gateway.process is not None
        gateway.process.send_signal(signal.SIGHUP)
        log = gateway.wait_for_log("SIGHUP: configuration")
        assert "applied: broker.max_destinations = 3; needs a restart: nothing" in log, log[-2000:]
        client.send(send_frame("/queue/h-new", "x", "new"))
        refusal = client.frame(10.0)
        assert refusal.command == "ERROR" and "holds 5 destinations and its limit is 3" in refusal.body.decode()
        still_open(client, "/queue/h4")
        assert [drain(gateway, f"/queue/h{i}", 1)[0] for i in range(4)] == ["m0", "m1", "m2", "m3"]
        gateway.config_path.write_text(config(0))
        gateway.process.send_signal(signal.SIGHUP)
        wait_until(lambda: "broker.max_destinations = 0" in gateway.log(), 10.0, "the second reload")
        client.send(send_frame("/queue/h-new", "x", "new2"))
        assert client.frame(10.0).command == "RECEIPT"
    finally:
        gateway.kill()



def test_sighup_changes_a_logins_limits_for_its_next_connect_and_queue(tmp_path: Any) -> None:
    gateway = start(tmp_path, config(0, '\n[auth.limits.eve]\nmax_connections = 1\nmax_queues = 1\n', logins=True))
    try:
        first = connect(gateway, "eve")
        first.send(send_frame("/queue/eve.1", "a", "1") + send_frame("/queue/eve.2", "b", "2"))
        got = answers(first, 2)
        assert (got["1"].command, got["2"].command) == ("RECEIPT", "ERROR"), got
        gateway.config_path.write_text(config(0, '\n[auth.limits.eve]\nmax_connections = 2\nmax_queues = 2\n',
                                              logins=True))
        assert gateway.process is not None
        gateway.process.send_signal(signal.SIGHUP)
        log = gateway.wait_for_log("SIGHUP: configuration")
        assert "auth.limits (1 entries)" in log and "needs a restart: nothing" in log, log[-2000:]
        second = connect(gateway, "eve")
        second.send(send_frame("/queue/eve.2", "b", "3"))
        assert second.frame(10.0).command == "RECEIPT"
        gateway.config_path.write_text(config(0, '\n[auth.limits.eve]\nmax_connections = 0\nmax_queues = 0\n',
                                              logins=True))
        gateway.process.send_signal(signal.SIGHUP)
        wait_until(lambda: gateway.log().count("auth.limits (1 entries)") == 2, 10.0, "the second reload")
        third = RawStomp(gateway.address)
        third.send(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:eve\npasscode:{PASSWORDS['eve']}\n\n\x00")
        closed = third.until_closed(10.0)
        assert isinstance(closed[0], Frame) and "its limit is 0" in closed[0].body.decode(), closed
        still_open(first, "/queue/eve.1")  # (nothing held is closed or deleted)
        second.send(send_frame("/queue/eve.3", "c", "4"))
        assert "holds 2 queues and its limit is 0" in second.frame(10.0).body.decode()
    finally:
        gateway.kill()


def test_a_standby_that_takes_over_recovers_the_counts(tmp_path: Any) -> None:
    """A takeover is a start-up (docs/high-availability.md): the standby's broker counts what the store holds
    and gives eve back the durable subscription and consumer queue she made on the active gateway."""
    active, _, standby, standby_admin = gateway_pair(tmp_path, [
        *weak_logins(**PASSWORDS), "--set", "broker.max_destinations=4",
        "--set", "auth.limits={ eve = { max_queues = 2 } }", "--set", 'admin.roles={ root = "administrator" }'],
        extra_config=GRANTS)
    try:
        eve = RawStomp(active.address)
        eve.connect(extra=f"login:eve\npasscode:{PASSWORDS['eve']}\nclient-id:eve-app\n")
        eve.send("SUBSCRIBE\nid:1\ndestination:/topic/eve.t\nactivemq.subscriptionName:d\nreceipt:1\n\n\x00"
                 "SUBSCRIBE\nid:2\ndestination:/queue/Consumer.eve.VirtualTopic.x\nreceipt:2\n\n\x00")
        assert [frame.command for frame in answers(eve, 2).values()] == ["RECEIPT"] * 2
        root = connect(active, "root")
        root.send(send_frame("/queue/root.1", "p", "3").replace("SEND\n", "SEND\npersistent:true\n"))
        assert root.frame(10.0).command == "RECEIPT"
        assert active.process is not None
        active.process.kill()
        wait_until(lambda: accepts(standby.port), 30, "the standby's STOMP listener")
        standby.admin_port = standby_admin  # type: ignore[attr-defined]
        limits_status = status(standby)["connectors"]["embedded"]["limits"]
        assert (limits_status["destinations"], limits_status["logins"]) == (3, {"eve": {"queues": 2, "max_queues": 2}})
        eve = connect(standby, "eve")
        eve.send("SUBSCRIBE\nid:1\ndestination:/queue/Consumer.eve2.VirtualTopic.x\nreceipt:4\n\n\x00")
        assert "login 'eve' holds 2 queues" in eve.frame(10.0).body.decode()
        root = connect(standby, "root")
        root.send(send_frame("/queue/root.2", "x", "5") + send_frame("/queue/root.3", "x", "6"))
        got = answers(root, 2)
        assert got["5"].command == "RECEIPT" and "holds 4 destinations" in got["6"].body.decode(), got
    finally:
        standby.kill()
        active.kill()
