"""Black-box attacks on the destination and login limits (``[broker] max_destinations``,
``[auth.limits]`` ``max_queues`` / ``max_connections``), on real gateway processes.

Written from the promise only (docs/stomp.md "Destination limits", docs/security.md "Resource limits per
login", docs/configuration.md, the CHANGELOG), not from the code or its tests.  Every login here holds at
most three destinations and three connections (``[auth.limits."*"]``); each attack uses a login of its own
on one shared gateway, tries to get past the cap (composite names, wildcards, browsers, temporary
destinations, virtual topics, durable subscriptions, transactions, scheduled SENDs, racing connections)
or to make its count drift (create and delete cycles, connections ending badly), and checks what the
gateway then holds (``/status`` as root), not only the ERROR.  Restarts and SIGHUP get gateways of their
own.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.wire.frame import Frame
from tests.support.admin_requests import admin_request
from tests.support.authorization import ROOT_GRANT, grant, weak_logins
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.raw_stomp import RawStomp
from tests.support.waiting import wait_until

LOGINS = [f"u{n}" for n in range(30)] + [f"v{n}" for n in range(40)]
"""Logins of the module's gateway: u28 and u29 have [auth.limits] entries of their own; the rest are fresh
ones, one or two a test (more than the tests take when the whole file runs in one process, as CI's
``--dist loadfile`` does)."""
PASSWORDS = {"root": "r00t!x", **{name: f"{name}-pw" for name in LOGINS}}
CAP = 3

GRANTS = (
    ROOT_GRANT
    + grant("/queue/*", read=LOGINS, write=LOGINS)
    + grant("/topic/*", read=LOGINS, write=LOGINS, admin=LOGINS)
)


def config(admin_port: int, named: str = "u29") -> str:
    return f"""
[admin]
listen = ["tcp:{admin_port}:interface=127.0.0.1"]
roles = {{ root = "administrator" }}

[auth.limits."*"]
max_queues = {CAP}
max_connections = {CAP}

[auth.limits.{named}]
max_queues = {CAP}
max_connections = {CAP}

[auth.limits.u28]
max_connections = 0

[auth.limits.root]              # (an entry of its own without max_queues: no per-login cap)
max_connections = 1000

[broker.destinations."/queue/full.*"]
max_size = 1000
full_policy = "FAIL"
""" + GRANTS


class Gateway:
    def __init__(self, process: GatewayProcess, admin_port: int, ws_port: int = 0) -> None:
        self.process = process
        self.address = process.address
        self.admin_port = admin_port
        self.ws_port = ws_port


def start(workdir: Path, extra: str = "", *, admin_port: int | None = None, ws_port: int = 0) -> Gateway:
    admin_port = admin_port or free_port()
    args = [*weak_logins(**PASSWORDS), "--set", "broker.max_redeliveries=1", "--set", "stomp.heartbeat_receive_ms=300"]
    if ws_port:
        args += ["--listen", f"ws:tcp:{ws_port}:interface=127.0.0.1"]
    process = GatewayProcess(workdir, config(admin_port) + extra, args=args)
    process.start()
    wait_for_port(admin_port)
    if ws_port:
        wait_for_port(ws_port)
    return Gateway(process, admin_port, ws_port)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start(tmp_path_factory.mktemp("limits"), ws_port=free_port())
    try:
        yield gateway
    except BaseException:
        print(gateway.process.log()[-4000:])
        raise
    finally:
        gateway.process.stop()


_taken: set[str] = set()


def fresh_login() -> str:
    """A login no other test of the module has used (every test starts from a count of zero)."""
    for name in LOGINS:
        if name not in _taken and name not in ("u28", "u29"):  # (u28 may not connect, u29 is named in [auth.limits])
            _taken.add(name)
            return name
    raise AssertionError("out of logins")


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def login(gw: Gateway, who: str, extra: str = "") -> RawStomp:
    client = RawStomp(gw.address)
    client.connect("1.2", extra=f"login:{who}\npasscode:{PASSWORDS[who]}\n{extra}")
    return client


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")


def frame(command: str, headers: dict[str, str], body: str = "") -> bytes:
    lines = [command] + [f"{k}:{escape(v)}" for k, v in headers.items()]
    return ("\n".join(lines) + "\n\n" + body + "\x00").encode()


def answers(client: RawStomp, count: int, timeout: float = 10.0) -> list[Frame]:
    """The next ``count`` RECEIPT or ERROR frames (MESSAGEs before them are kept for the next read)."""
    got: list[Frame] = []
    kept: list[Frame] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count:
            item = client.frame(max(0.05, deadline - time.monotonic()))
            (got if item.command in ("RECEIPT", "ERROR") else kept).append(item)
    finally:
        client.pending[:0] = kept
    return got


def ask(client: RawStomp, command: str, headers: dict[str, str], body: str = "") -> Frame:
    client.send(frame(command, {**headers, "receipt": unique("r")}, body))
    return answers(client, 1)[0]


def limit_refused(reply: Frame) -> bool:
    return reply.command == "ERROR" and reply.headers.get("message") == "destination limit reached"


def request(gw: Gateway, method: str, path: str, who: str = "root", body: object = None) -> tuple[int, bytes]:
    return admin_request(gw.admin_port, method, path, (who, PASSWORDS[who]), body)


def status(gw: Gateway, who: str = "root") -> dict[str, Any]:
    code, body = request(gw, "GET", "/status", who)
    assert code == 200, body
    document: dict[str, Any] = json.loads(body)
    return document


def limits(gw: Gateway) -> dict[str, Any]:
    found: dict[str, Any] = status(gw)["connectors"]["embedded"]["limits"]
    return found


def held(gw: Gateway, who: str) -> int:
    """How many destinations ``who`` holds, as /status shows root."""
    entry = limits(gw)["logins"].get(who)
    return int(entry["queues"]) if entry else 0


def connections_of(gw: Gateway, who: str) -> int:
    return int(status(gw)["stomp_connections_by_login"].get(who, 0))


def create_up_to_cap(gw: Gateway, who: str, client: RawStomp | None = None) -> list[str]:
    """Make ``who`` create plain queues until it holds CAP; their names."""
    own = client or login(gw, who)
    names = []
    for _ in range(CAP - held(gw, who)):
        name = f"/queue/{unique('fill.')}"
        assert ask(own, "SEND", {"destination": name}, "x").command == "RECEIPT"
        names.append(name)
    if client is None:
        own.close()
    return names


def still_has_exactly_cap_room(gw: Gateway, who: str) -> None:
    """From a count of zero, ``who`` can create CAP queues and no more (no lockout, no extra room)."""
    wait_until(lambda: held(gw, who) == 0, 10, f"{who}'s count back to 0 (now {held(gw, who)})")
    client = login(gw, who)
    create_up_to_cap(gw, who, client)
    reply = ask(client, "SEND", {"destination": f"/queue/{unique('over.')}"}, "x")
    assert limit_refused(reply), reply
    client.close()


# -- getting past max_queues ------------------------------------------------------------------


def test_pipelined_sends_to_new_queues_answer_in_order_and_stop_at_the_cap(gw: Gateway) -> None:
    who = fresh_login()
    client = login(gw, who)
    names = [f"/queue/{unique('p.')}" for _ in range(8)]
    client.send(b"".join(frame("SEND", {"destination": n, "receipt": f"r{i}"}, "x") for i, n in enumerate(names)))
    replies = answers(client, 8)
    assert [r.headers.get("receipt-id") for r in replies] == [f"r{i}" for i in range(8)]
    assert [r.command for r in replies] == ["RECEIPT"] * CAP + ["ERROR"] * (8 - CAP)
    assert all(limit_refused(r) for r in replies[CAP:])
    assert f"'{who}'" in replies[CAP].body.decode()
    assert not client.closed
    assert ask(client, "SEND", {"destination": names[0]}, "again").command == "RECEIPT"  # existing: not judged
    assert held(gw, who) == CAP
    client.close()


def test_a_refused_composite_send_creates_none_of_its_queues(gw: Gateway) -> None:
    """'nothing was done': a composite SEND whose parts would pass the cap leaves no queue behind (they
    were made, empty, and held by the login until 2026-11-29 evening, eating its room)."""
    who = fresh_login()
    client = login(gw, who)
    before = limits(gw)["destinations"]
    composite = ",".join(f"/queue/{unique('c.')}" for _ in range(CAP + 3))
    reply = ask(client, "SEND", {"destination": composite}, "x")
    assert limit_refused(reply), reply
    assert held(gw, who) == 0
    assert limits(gw)["destinations"] == before
    exact = [f"/queue/{unique('c.')}" for _ in range(CAP)]  # its room is whole: CAP parts (one named twice) fit
    reply = ask(client, "SEND", {"destination": ",".join([*exact, exact[0]])}, "x")
    assert reply.command == "RECEIPT", reply
    assert held(gw, who) == CAP
    client.close()


def test_a_composite_subscribe_makes_one_destination_at_most(gw: Gateway) -> None:
    """Composite SUBSCRIBE is not supported (docs/stomp.md): it must not create one queue per part."""
    who = fresh_login()
    client = login(gw, who)
    before = limits(gw)["destinations"]
    composite = ",".join(f"/queue/{unique('cs.')}" for _ in range(CAP + 3))
    ask(client, "SUBSCRIBE", {"destination": composite, "id": "s"})
    assert held(gw, who) <= 1
    assert limits(gw)["destinations"] <= before + 1
    client.close()


@pytest.mark.parametrize("kind", ["browser", "temp-queue", "temp-topic", "send-temp-queue", "send-temp-topic",
                                  "reply-to", "consumer-queue", "send-consumer-queue", "durable", "wildcard"])
def test_every_way_of_creating_stops_at_the_cap(gw: Gateway, kind: str) -> None:
    who = fresh_login()
    tag = unique("k")
    client = login(gw, who, extra=f"client-id:{tag}\n")
    replies = []
    for n in range(CAP + 2):
        if kind == "browser":
            replies.append(ask(client, "SUBSCRIBE", {"destination": f"/queue/b.{tag}.{n}", "id": f"s{n}",
                                                     "browser": "true"}))
        elif kind in ("temp-queue", "temp-topic"):
            replies.append(ask(client, "SUBSCRIBE", {"destination": f"/{kind}/t{n}", "id": f"s{n}"}))
        elif kind.startswith("send-temp"):
            replies.append(ask(client, "SEND", {"destination": f"/{kind[5:]}/t{n}"}, "x"))
        elif kind == "send-consumer-queue":
            replies.append(ask(client, "SEND", {"destination": f"/queue/Consumer.g{n}.VirtualTopic.{tag}"}, "x"))
        elif kind == "reply-to":
            replies.append(ask(client, "SEND", {"destination": f"/topic/nobody.{tag}",
                                                "reply-to": f"/temp-queue/r{n}"}, "x"))
        elif kind == "consumer-queue":
            replies.append(ask(client, "SUBSCRIBE", {"destination": f"/queue/Consumer.g{n}.VirtualTopic.{tag}",
                                                     "id": f"s{n}"}))
        elif kind == "durable":
            replies.append(ask(client, "SUBSCRIBE", {"destination": f"/topic/d.{tag}", "id": f"s{n}",
                                                     "activemq.subscriptionName": f"d{n}"}))
        else:  # a wildcard SUBSCRIBE makes no queue of its own; the SENDs to new names behind it count
            if n == 0:
                assert ask(client, "SUBSCRIBE", {"destination": f"/queue/w.{tag}.>", "id": "w"}).command == "RECEIPT"
            replies.append(ask(client, "SEND", {"destination": f"/queue/w.{tag}.{n}"}, "x"))
    assert [r.command for r in replies] == ["RECEIPT"] * CAP + ["ERROR"] * 2, replies
    assert all(limit_refused(r) for r in replies[CAP:])
    assert held(gw, who) == CAP
    assert not client.closed
    client.close()


def test_a_virtual_topic_send_to_consumer_queues_of_the_login_makes_nothing_new(gw: Gateway) -> None:
    """A SEND to a virtual topic copies into the consumer queues that exist; it is not a way to create."""
    who = fresh_login()
    tag = unique("vt")
    client = login(gw, who)
    for n in range(CAP):
        assert ask(client, "SUBSCRIBE", {"destination": f"/queue/Consumer.g{n}.VirtualTopic.{tag}",
                                         "id": f"s{n}"}).command == "RECEIPT"
    for _ in range(5):
        assert ask(client, "SEND", {"destination": f"/topic/VirtualTopic.{tag}"}, "x").command == "RECEIPT"
    assert held(gw, who) == CAP
    client.close()


def test_a_commit_that_would_pass_the_cap_applies_nothing(gw: Gateway) -> None:
    who = fresh_login()
    client = login(gw, who)
    names = [f"/queue/{unique('tx.')}" for _ in range(CAP + 2)]
    client.send(frame("BEGIN", {"transaction": "t"})
                + b"".join(frame("SEND", {"destination": n, "transaction": "t"}, "x") for n in names)
                + frame("COMMIT", {"transaction": "t", "receipt": "c"}))
    reply = client.frame()
    assert reply.command == "ERROR", reply
    client.until_closed()
    assert held(gw, who) == 0
    queues = {q["name"] for q in json.loads(request(gw, "GET", "/console/api/destinations")[1])["queues"]}
    assert not queues & set(names)


def test_a_commit_failed_by_a_reply_to_a_requester_that_left_leaves_no_queue(gw: Gateway) -> None:
    """Another way to fail a COMMIT: its reply to a temporary queue whose owner left.  The transaction's
    new queue was made anyway and held by the login (its room eaten by a COMMIT that applied 'nothing')."""
    requester, worker = fresh_login(), fresh_login()
    tag = unique("rr")
    client = login(gw, worker)
    assert ask(client, "SUBSCRIBE", {"destination": f"/queue/{tag}.requests", "id": "s"}).command == "RECEIPT"
    asker = login(gw, requester)
    assert ask(asker, "SUBSCRIBE", {"destination": "/temp-queue/r", "id": "s"}).command == "RECEIPT"
    assert ask(asker, "SEND", {"destination": f"/queue/{tag}.requests", "reply-to": "/temp-queue/r"}, "q").command \
        == "RECEIPT"
    request_frame = client.frame()
    reply_to = request_frame.headers["reply-to"]
    assert reply_to.startswith("/remote-temp-queue/"), request_frame
    client.send(frame("BEGIN", {"transaction": "t"})
                + frame("SEND", {"destination": f"/queue/{tag}.audit", "transaction": "t"}, "audit")
                + frame("SEND", {"destination": reply_to, "transaction": "t"}, "reply"))
    asker.send(frame("DISCONNECT", {"receipt": "bye"}))
    asker.until_closed()
    wait_until(lambda: held(gw, requester) == 0, 5, "the requester's temporary queue gone")
    client.send(frame("COMMIT", {"transaction": "t", "receipt": "c"}))
    assert client.frame().command == "ERROR"
    client.until_closed()
    queues = {q["name"] for q in json.loads(request(gw, "GET", "/console/api/destinations")[1])["queues"]}
    assert f"/queue/{tag}.audit" not in queues
    assert held(gw, worker) == 1  # (its requests queue, nothing more)


def test_a_commit_refused_by_a_full_fail_destination_leaves_no_queue(gw: Gateway) -> None:
    """A third way to fail a COMMIT: a FAIL destination that is full refuses it as a whole; the
    transaction's new queue was made anyway and held by the login."""
    who = fresh_login()
    full = f"/queue/full.{unique('f')}"
    for _ in range(20):  # (FAIL's ERROR closes the connection: one connection a SEND)
        client = login(gw, who)
        reply = ask(client, "SEND", {"destination": full}, "x" * 100)
        client.close()
        if reply.command == "ERROR":
            break
    assert reply.headers.get("message") == "destination full", reply
    client = login(gw, who)
    fresh = f"/queue/{unique('tx.')}"
    client.send(frame("BEGIN", {"transaction": "t"}) + frame("SEND", {"destination": fresh, "transaction": "t"}, "a")
                + frame("SEND", {"destination": full, "transaction": "t"}, "y" * 100)
                + frame("COMMIT", {"transaction": "t", "receipt": "c"}))
    assert client.frame().headers.get("message") == "destination full"
    client.until_closed()
    queues = {q["name"] for q in json.loads(request(gw, "GET", "/console/api/destinations")[1])["queues"]}
    assert fresh not in queues
    assert held(gw, who) == 1  # (the full queue only)


def test_sends_refused_by_fail_do_not_spend_the_logins_room(gw: Gateway) -> None:
    """A SEND too large for a new FAIL queue is refused ('the message was not stored'); the queue it made
    stayed, empty and held by the login: CAP such SENDs locked the login out of creating anything."""
    who = fresh_login()
    for n in range(CAP + 1):
        client = login(gw, who)
        reply = ask(client, "SEND", {"destination": f"/queue/full.{unique('big')}"}, "x" * 1500)
        assert reply.headers.get("message") == "destination full", (n, reply)
        client.close()
    client = login(gw, who)
    reply = ask(client, "SEND", {"destination": f"/queue/full.{unique('big')},/queue/{unique('c.')}"}, "x" * 1500)
    assert reply.headers.get("message") == "destination full", reply
    client.close()
    still_has_exactly_cap_room(gw, who)


def test_two_connections_of_one_login_racing_do_not_pass_the_cap(gw: Gateway) -> None:
    who = fresh_login()
    clients = [login(gw, who) for _ in range(CAP)]
    batches = [b"".join(frame("SEND", {"destination": f"/queue/{unique('race.')}", "receipt": f"r{i}"}, "x")
                        for i in range(CAP + 1)) for _ in clients]
    barrier = threading.Barrier(len(clients))

    def fire(client: RawStomp, data: bytes) -> None:
        barrier.wait()
        client.send(data)

    threads = [threading.Thread(target=fire, args=pair) for pair in zip(clients, batches, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    made = sum(r.command == "RECEIPT" for c in clients for r in answers(c, CAP + 1))
    assert made == CAP
    assert held(gw, who) == CAP
    for client in clients:
        client.close()


def test_scheduled_sends_to_new_queues_wait_for_room_and_never_pass_the_cap(gw: Gateway) -> None:
    """'judged when it falls due; refused by a limit, it waits and is tried again every second, it is not
    dropped': at its cap, the login's scheduled SENDs to new names make nothing; a place freed lets one in
    (held by the login: the count stays at the cap), and its message is there."""
    who = fresh_login()
    client = login(gw, who)
    names = create_up_to_cap(gw, who, client)
    later = [f"/queue/{unique('sch.')}" for _ in range(3)]
    for name in later:
        reply = ask(client, "SEND", {"destination": name, "AMQ_SCHEDULED_DELAY": "200"}, "later")
        assert reply.command == "RECEIPT", reply
    time.sleep(1.2)
    assert held(gw, who) == CAP
    queues = {q["name"] for q in json.loads(request(gw, "GET", "/console/api/destinations")[1])["queues"]}
    assert not queues & set(later)
    assert request(gw, "POST", "/console/api/remove", "root", {"destination": names[0]})[0] == 200

    def made() -> set[str]:
        found = json.loads(request(gw, "GET", "/console/api/destinations")[1])["queues"]
        return {q["name"] for q in found} & set(later)

    wait_until(lambda: len(made()) == 1, 5, "one scheduled queue made once a place is free")
    time.sleep(1.2)
    assert len(made()) == 1 and held(gw, who) == CAP
    client.close()


def test_racing_connections_making_the_same_new_queue_count_it_once(gw: Gateway) -> None:
    who = fresh_login()
    clients = [login(gw, who) for _ in range(CAP)]
    name = f"/queue/{unique('same.')}"
    barrier = threading.Barrier(len(clients))

    def fire(client: RawStomp) -> None:
        barrier.wait()
        client.send(b"".join(frame("SEND", {"destination": name, "receipt": f"r{i}"}, "x") for i in range(5)))

    threads = [threading.Thread(target=fire, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.command == "RECEIPT" for c in clients for r in answers(c, 5))
    assert held(gw, who) == 1
    for client in clients:
        client.close()


def test_a_queue_another_login_created_does_not_count_whoever_uses_it(gw: Gateway) -> None:
    who, other = fresh_login(), fresh_login()
    theirs = create_up_to_cap(gw, other)
    for _ in range(2):  # and the operator's (held by no login)
        name = f"/queue/{unique('console.')}"
        assert request(gw, "POST", "/console/api/create", "root", {"destination": name})[0] == 200
        theirs.append(name)
    client = login(gw, who)
    for n, name in enumerate(theirs):
        assert ask(client, "SEND", {"destination": name}, "x").command == "RECEIPT"
        assert ask(client, "SUBSCRIBE", {"destination": name, "id": f"s{n}"}).command == "RECEIPT"
    assert held(gw, who) == 0 and held(gw, other) == CAP
    client.close()
    still_has_exactly_cap_room(gw, who)


def test_max_connections_zero_keeps_the_login_out(gw: Gateway) -> None:
    for _ in range(3):
        client, reply = connect_raw(gw, "u28")
        assert reply.command == "ERROR" and reply.headers.get("message") == "connection limit reached", reply
        client.until_closed()
    assert connections_of(gw, "u28") == 0


def test_dead_letter_queues_a_login_causes_do_not_lock_it_out(gw: Gateway) -> None:
    """DLQs are 'counted but never refused: the limits judge what clients ask for'.  The login's NACKs
    past max_redeliveries on as many queues as its cap dead-letter every message; the DLQs are made
    although the login is at its cap, and are not held by it (it still creates as before once its queues
    are removed)."""
    who = fresh_login()
    client = login(gw, who)
    names = create_up_to_cap(gw, who, client)
    before = limits(gw)["destinations"]
    for n, name in enumerate(names):
        assert ask(client, "SUBSCRIBE", {"destination": name, "id": f"s{n}",
                                         "ack": "client-individual"}).command == "RECEIPT"
    nacked = 0
    while True:
        item = client.item(1.5)
        if item is None:
            break
        assert isinstance(item, Frame) and item.command == "MESSAGE", item
        client.send(frame("NACK", {"id": item.headers["ack"]}))
        nacked += 1
    assert nacked >= 2 * CAP  # (delivered, redelivered once, then dead-lettered)
    for n in range(CAP):
        assert ask(client, "UNSUBSCRIBE", {"id": f"s{n}"}).command == "RECEIPT"
    wait_until(lambda: limits(gw)["destinations"] == before + CAP, 5, "one DLQ per queue")
    assert held(gw, who) == CAP
    client.close()
    for name in names:
        assert request(gw, "POST", "/console/api/remove", "root", {"destination": name})[0] == 200
    still_has_exactly_cap_room(gw, who)


def test_the_console_create_is_held_by_no_login(gw: Gateway) -> None:
    name = f"/queue/{unique('console.')}"
    before = limits(gw)
    code, body = request(gw, "POST", "/console/api/create", "root", {"destination": name})
    assert code == 200, body
    after = limits(gw)
    assert after["destinations"] == before["destinations"] + 1
    assert after["logins"].get("root", {}).get("queues", 0) == before["logins"].get("root", {}).get("queues", 0)


# -- count drift ------------------------------------------------------------------------------


def test_temporary_queues_of_connections_that_end_are_given_back(gw: Gateway) -> None:
    who = fresh_login()
    for round_ in range(6):
        client = login(gw, who)
        for n in range(CAP):
            reply = ask(client, "SUBSCRIBE", {"destination": f"/temp-queue/t{n}", "id": f"s{n}"})
            assert reply.command == "RECEIPT", (round_, reply)
        if round_ % 2:
            client.send(frame("DISCONNECT", {}))
        client.close()
        wait_until(lambda: held(gw, who) == 0, 10, f"round {round_}: temp queues given back")
    still_has_exactly_cap_room(gw, who)


def test_durable_unsubscribe_with_the_name_gives_the_place_back(gw: Gateway) -> None:
    who = fresh_login()
    tag = unique("du")
    client = login(gw, who, extra=f"client-id:{tag}\n")
    for round_ in range(5):
        for n in range(CAP):
            assert ask(client, "SUBSCRIBE", {"destination": f"/topic/{tag}", "id": f"s{n}",
                                             "activemq.subscriptionName": f"d{n}"}).command == "RECEIPT", round_
        for n in range(CAP):
            assert ask(client, "UNSUBSCRIBE", {"id": f"s{n}",
                                               "activemq.subscriptionName": f"d{n}"}).command == "RECEIPT"
        assert held(gw, who) == 0, round_
    client.close()
    still_has_exactly_cap_room(gw, who)


def test_console_remove_gives_the_place_back(gw: Gateway) -> None:
    who = fresh_login()
    for _ in range(4):
        names = create_up_to_cap(gw, who)
        for name in names:
            code, body = request(gw, "POST", "/console/api/remove", "root", {"destination": name})
            assert code == 200, body
        wait_until(lambda: held(gw, who) == 0, 5, "console removes given back")
    still_has_exactly_cap_room(gw, who)


def test_topic_subscribers_coming_and_going_do_not_count(gw: Gateway) -> None:
    who = fresh_login()
    client = login(gw, who)
    for n in range(20):
        assert ask(client, "SUBSCRIBE", {"destination": f"/topic/{unique('plain.')}", "id": f"s{n}"}).command \
            == "RECEIPT"
        assert ask(client, "UNSUBSCRIBE", {"id": f"s{n}"}).command == "RECEIPT"
    assert held(gw, who) == 0
    client.close()
    still_has_exactly_cap_room(gw, who)


# -- max_connections --------------------------------------------------------------------------


def connect_raw(gw: Gateway, who: str, extra: str = "") -> tuple[RawStomp, Frame]:
    client = RawStomp(gw.address)
    client.send(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{who}\npasscode:{PASSWORDS[who]}\n{extra}\n\x00")
    return client, client.frame()


def reset(client: RawStomp) -> None:
    """Close with RST (SO_LINGER 0)."""
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sock.close()


def test_the_connection_cap_refuses_and_comes_back_after_a_reset_storm(gw: Gateway) -> None:
    who = fresh_login()
    for _ in range(10):
        clients = [connect_raw(gw, who) for _ in range(CAP + 1)]
        assert [f.command for _, f in clients] == ["CONNECTED"] * CAP + ["ERROR"]
        assert clients[-1][1].headers.get("message") == "connection limit reached"
        for client, _ in clients:
            reset(client)
        wait_until(lambda: connections_of(gw, who) == 0, 10, "the reset connections given back")
    # CONNECT frames pipelined with an immediate RST (the gateway may not even have answered)
    for _ in range(20):
        client = RawStomp(gw.address)
        client.send(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{who}\npasscode:{PASSWORDS[who]}\n\n\x00"
                    "SEND\ndestination:/topic/x\n\nx\x00")
        reset(client)
    wait_until(lambda: connections_of(gw, who) == 0, 10, "connections given back")
    clients = [connect_raw(gw, who) for _ in range(CAP + 1)]
    assert [f.command for _, f in clients] == ["CONNECTED"] * CAP + ["ERROR"]
    for client, _ in clients:
        client.close()


def test_a_wrong_password_takes_no_place(gw: Gateway) -> None:
    who = fresh_login()
    for _ in range(3):
        client = RawStomp(gw.address)
        client.send(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{who}\npasscode:wrong\n\n\x00")
        client.until_closed()
    clients = [connect_raw(gw, who) for _ in range(CAP)]
    assert [f.command for _, f in clients] == ["CONNECTED"] * CAP
    for client, _ in clients:
        client.close()


def test_a_heart_beat_timeout_gives_the_place_back(gw: Gateway) -> None:
    who = fresh_login()
    # (the client promises a beat every second and sends none: dropped after 1.5 s, not before the 4th CONNECT)
    silent = [connect_raw(gw, who, extra="heart-beat:1000,0\n")[0] for _ in range(CAP)]
    assert connect_raw(gw, who)[1].command == "ERROR"
    wait_until(lambda: connections_of(gw, who) == 0, 15, "silent connections dropped")
    clients = [connect_raw(gw, who) for _ in range(CAP)]
    assert [f.command for _, f in clients] == ["CONNECTED"] * CAP
    for client, _ in clients + [(s, None) for s in silent]:
        client.close()


# -- what others see --------------------------------------------------------------------------


def test_status_and_metrics_of_a_non_administrator_name_no_other_login(gw: Gateway) -> None:
    who = fresh_login()
    other = fresh_login()
    create_up_to_cap(gw, other)
    keep = login(gw, other)
    document = status(gw, who)
    assert document["stomp_connections_by_login"] == {}
    assert document["connectors"]["embedded"]["limits"]["logins"] == {}
    assert other not in json.dumps(document)
    code, metrics = request(gw, "GET", "/metrics", who)
    assert code == 200
    text = metrics.decode()
    assert f'login="{other}"' not in text  # only logins named in [auth.limits] get series
    assert 'jmsgateway_login_max_queues{login="u29"}' in text
    keep.close()


# -- restarts and SIGHUP ----------------------------------------------------------------------


def restart(gw: Gateway) -> None:
    """kill -9, then start on the same data (and wait for the admin endpoint too)."""
    gw.process.kill()
    gw.process.start()
    wait_for_port(gw.admin_port)


def test_counts_across_kill_and_restart(tmp_path: Path) -> None:
    gw = start(tmp_path / "g")
    try:
        who = "u1"
        tag = unique("kr")
        client = login(gw, who, extra=f"client-id:{tag}\n")
        assert ask(client, "SUBSCRIBE", {"destination": f"/topic/{tag}", "id": "d",
                                         "activemq.subscriptionName": "d"}).command == "RECEIPT"
        assert ask(client, "SUBSCRIBE", {"destination": f"/queue/Consumer.a.VirtualTopic.{tag}",
                                         "id": "c"}).command == "RECEIPT"
        assert ask(client, "SEND", {"destination": f"/queue/{tag}", "persistent": "true"}, "x").command == "RECEIPT"
        assert held(gw, who) == 3
        sender = login(gw, "u5")  # a consumer queue made by a SEND is recorded with its creator too
        assert ask(sender, "SEND", {"destination": f"/queue/Consumer.b.VirtualTopic.{tag}"}, "x").command \
            == "RECEIPT"
        assert held(gw, "u5") == 1
        destinations = limits(gw)["destinations"]
        restart(gw)
        assert limits(gw)["destinations"] == destinations
        assert held(gw, who) == 2  # the plain queue recovered from its message is held by nobody
        assert held(gw, "u5") == 1
        client = login(gw, who, extra=f"client-id:{tag}\n")
        assert ask(client, "SEND", {"destination": f"/queue/{unique('n.')}"}, "x").command == "RECEIPT"
        assert limit_refused(ask(client, "SEND", {"destination": f"/queue/{unique('n.')}"}, "x"))
        # durable deleted, then killed: the place is not held again after the restart
        assert ask(client, "SUBSCRIBE", {"destination": f"/topic/{tag}", "id": "d",
                                         "activemq.subscriptionName": "d"}).command == "RECEIPT"
        assert ask(client, "UNSUBSCRIBE", {"id": "d", "activemq.subscriptionName": "d"}).command == "RECEIPT"
        assert held(gw, who) == 2
        restart(gw)
        assert held(gw, who) == 1
    finally:
        gw.process.stop()


def test_sighup_lowering_max_destinations_during_a_flood(tmp_path: Path) -> None:
    """root floods new queues (20 SENDs a write) while a SIGHUP sets max_destinations = 50: once refused,
    every later creation is refused (nothing was deleted), the connection stays open, and the count is
    exactly the queues whose SEND got a RECEIPT."""
    gw = start(tmp_path / "g")
    try:
        results: list[Frame] = []
        reloaded = threading.Event()
        closed: list[bool] = []

        def flood() -> None:
            client = login(gw, "root")
            n = 0
            while n < 40000 and not (reloaded.is_set() and results[-20:] and
                                    all(r.command == "ERROR" for r in results[-20:])):
                client.send(b"".join(frame("SEND", {"destination": f"/queue/fl.{n + i}", "receipt": str(n + i)}, "x")
                                     for i in range(20)))
                results.extend(answers(client, 20))
                n += 20
            closed.append(client.closed)
            client.close()

        thread = threading.Thread(target=flood)
        thread.start()
        wait_until(lambda: len(results) >= 20, 10, "the flood under way")
        text = gw.process.config_path.read_text().replace("[broker]\n", "[broker]\nmax_destinations = 50\n", 1)
        gw.process.config_path.write_text(text)
        assert gw.process.process is not None
        gw.process.process.send_signal(signal.SIGHUP)
        gw.process.wait_for_log("reloaded")
        reloaded.set()
        thread.join(60)
        assert closed == [False]
        commands = [r.command for r in results]
        assert [r.headers["receipt-id"] for r in results] == [str(i) for i in range(len(results))]
        assert "ERROR" in commands, "the lowered cap never refused"
        first = commands.index("ERROR")
        assert "RECEIPT" not in commands[first:], "a creation got through after the cap refused one"
        assert all(limit_refused(r) for r in results[first:])
        found = limits(gw)
        assert found["max_destinations"] == 50
        assert found["destinations"] == first == commands.count("RECEIPT")
        refusals = len(results) - first
        logged = gw.process.log().count("was not created")
        assert refusals > 20 and logged == 1, f"{logged} log lines for {refusals} refusals (once per episode)"
        # the console's create is judged by max_destinations: 409 with the same text
        code, body = request(gw, "POST", "/console/api/create", "root", {"destination": "/queue/by.console"})
        assert code == 409 and b"max_destinations" in body, (code, body, found, limits(gw))
        # a dead-letter queue is counted but never refused: NACKed past max_redeliveries at the cap
        root = login(gw, "root")
        assert ask(root, "SUBSCRIBE", {"destination": "/queue/fl.0", "id": "s", "ack": "client-individual"}
                   ).command == "RECEIPT"
        for _ in range(2):
            message = root.frame()
            assert message.command == "MESSAGE", message
            root.send(frame("NACK", {"id": message.headers["ack"]}))
        wait_until(lambda: limits(gw)["destinations"] == first + 1, 5, "the DLQ made past the cap")
        root.close()
    finally:
        gw.process.stop()


def test_sighup_lowering_a_logins_limits_refuses_the_next_and_deletes_nothing(tmp_path: Path) -> None:
    gw = start(tmp_path / "g")
    try:
        who = "u2"
        client = login(gw, who)
        names = create_up_to_cap(gw, who, client)
        extra = login(gw, who)
        text = gw.process.config_path.read_text().replace(
            f"[auth.limits.u29]\nmax_queues = {CAP}\nmax_connections = {CAP}",
            f"[auth.limits.u29]\nmax_queues = {CAP}\nmax_connections = {CAP}\n\n"
            f"[auth.limits.{who}]\nmax_queues = 1\nmax_connections = 1\n")
        gw.process.config_path.write_text(text)
        assert gw.process.process is not None
        gw.process.process.send_signal(signal.SIGHUP)
        gw.process.wait_for_log("reloaded")
        assert limit_refused(ask(client, "SEND", {"destination": f"/queue/{unique('low.')}"}, "x"))
        for name in names:  # existing ones work, nothing was deleted, no connection closed
            assert ask(client, "SEND", {"destination": name}, "still").command == "RECEIPT"
        assert ask(extra, "SEND", {"destination": names[0]}, "still").command == "RECEIPT"
        assert held(gw, who) == CAP
        refused = connect_raw(gw, who)[1]
        assert refused.headers.get("message") == "connection limit reached", refused
        client.close()
        extra.close()
        wait_until(lambda: connections_of(gw, who) == 0, 10, "connections given back")
        assert connect_raw(gw, who)[1].command == "CONNECTED"
    finally:
        gw.process.stop()


def test_a_second_connect_on_one_connection_takes_no_second_place(gw: Gateway) -> None:
    who = fresh_login()
    client = RawStomp(gw.address)
    hello = f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{who}\npasscode:{PASSWORDS[who]}\n\n\x00"
    client.send(hello * 4)
    assert client.frame().command == "CONNECTED"
    later = client.until_closed(10)  # (a CONNECT on a connected connection is a protocol error: closed)
    assert [f.command for f in later if isinstance(f, Frame)] == ["ERROR"], later
    wait_until(lambda: connections_of(gw, who) == 0, 10, "the place given back")
    clients = [connect_raw(gw, who) for _ in range(CAP)]
    assert [f.command for _, f in clients] == ["CONNECTED"] * CAP
    for one, _ in clients:
        one.close()


@pytest.mark.parametrize("kind", ["temp-topic", "consumer-queue"])
def test_create_and_remove_cycles_come_back_to_zero(gw: Gateway, kind: str) -> None:
    who = fresh_login()
    tag = unique("cy")
    for round_ in range(5):
        client = login(gw, who)
        for n in range(CAP):
            destination = (f"/temp-topic/t{n}" if kind == "temp-topic"
                           else f"/queue/Consumer.g{n}.VirtualTopic.{tag}")
            assert ask(client, "SUBSCRIBE", {"destination": destination, "id": f"s{n}"}).command == "RECEIPT", round_
        client.close()
        if kind == "consumer-queue":
            for n in range(CAP):
                code, body = request(gw, "POST", "/console/api/remove", "root",
                                     {"destination": f"/queue/Consumer.g{n}.VirtualTopic.{tag}"})
                assert code == 200, body
        wait_until(lambda: held(gw, who) == 0, 10, f"round {round_}: given back (holds {held(gw, who)})")
    still_has_exactly_cap_room(gw, who)


def test_connects_reset_while_their_bcrypt_check_runs_leave_no_place_taken(tmp_path: Path) -> None:
    """'counted once the password is verified' and 'a place is given back however it ends': a CONNECT
    whose connection is reset while its (threaded) bcrypt check runs must not take a place for good."""
    import bcrypt

    hashed = bcrypt.hashpw(PASSWORDS["u3"].encode(), bcrypt.gensalt(10)).decode()
    users = ", ".join(f'{name} = "{password}"' for name, password in PASSWORDS.items() if name != "u3")
    admin_port = free_port()
    process = GatewayProcess(tmp_path / "g", config(admin_port), args=[
        "--set", f'auth.users={{ {users}, u3 = "{hashed}" }}', "--set", "auth.allow_weak_passwords=true"]).start()
    gw = Gateway(process, admin_port)
    try:
        for _ in range(4):
            sockets = []
            for _ in range(CAP):
                client = RawStomp(gw.address)  # (frames pipelined behind the CONNECT wait for its check)
                client.send(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:u3\npasscode:{PASSWORDS['u3']}\n\n\x00"
                            + "".join(f"SUBSCRIBE\nid:{n}\ndestination:/temp-{kind}/t{n}\n\n\x00"
                                      for n, kind in enumerate(["queue", "topic", "queue"])))
                sockets.append(client)
            time.sleep(0.02)
            for client in sockets:
                reset(client)
            time.sleep(0.5)
        wait_until(lambda: connections_of(gw, "u3") == 0, 10,
                   f"every place given back (status: {status(gw)['stomp_connections_by_login']})")
        wait_until(lambda: held(gw, "u3") == 0, 5, f"no temporary destination outlives its connection ({limits(gw)})")
        clients = [connect_raw(gw, "u3") for _ in range(CAP)]
        assert [f.command for _, f in clients] == ["CONNECTED"] * CAP, clients
        for one, _ in clients:
            one.close()
    finally:
        process.stop()


def test_a_forged_sender_header_does_not_move_the_queue_to_another_login(gw: Gateway) -> None:
    """The creator is the verified sender: a JMSXUserID the client writes is not believed."""
    who = fresh_login()
    client = login(gw, who)
    create_up_to_cap(gw, who, client)
    for forged in ("root", "u29", ""):
        reply = ask(client, "SEND", {"destination": f"/queue/{unique('forged.')}", "JMSXUserID": forged}, "x")
        assert limit_refused(reply), (forged, reply)
    assert held(gw, who) == CAP
    client.close()


def test_counts_after_a_standby_takes_over(tmp_path: Path) -> None:
    """A takeover is a start-up: the login holds its durable and consumer queue again on the standby, and
    its room is what is left of its cap (no more, no less)."""
    from tests.support.standby import accepts, gateway_pair

    rest = config(0).split("[admin]\n", 1)[1].split("\n", 2)[2]  # (gateway_pair writes [admin] listen)
    active, _, standby, standby_admin = gateway_pair(
        tmp_path, args=[*weak_logins(**PASSWORDS)], extra_config='roles = { root = "administrator" }\n' + rest)
    try:
        gw = Gateway(active, 0)
        who, tag = "u4", unique("ha")
        client = login(gw, who, extra=f"client-id:{tag}\n")
        assert ask(client, "SUBSCRIBE", {"destination": f"/topic/{tag}", "id": "d",
                                         "activemq.subscriptionName": "d"}).command == "RECEIPT"
        assert ask(client, "SUBSCRIBE", {"destination": f"/queue/Consumer.a.VirtualTopic.{tag}",
                                         "id": "c"}).command == "RECEIPT"
        active.kill()
        wait_until(lambda: accepts(standby.port), 30, "the standby's STOMP listener")
        taken = Gateway(standby, standby_admin)
        wait_for_port(standby_admin)
        wait_until(lambda: held(taken, who) == 2, 10, f"held again after the takeover ({limits(taken)})")
        client = login(taken, who, extra=f"client-id:{tag}\n")
        assert ask(client, "SEND", {"destination": f"/queue/{unique('n.')}"}, "x").command == "RECEIPT"
        assert limit_refused(ask(client, "SEND", {"destination": f"/queue/{unique('n.')}"}, "x"))
        client.close()
    finally:
        standby.stop()
        active.kill()


def test_websocket_connections_dropped_abruptly_give_their_places_back(gw: Gateway) -> None:
    import websocket

    who = fresh_login()
    hello = f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{who}\npasscode:{PASSWORDS[who]}\n\n\x00"
    for _ in range(3):
        sockets = []
        for _ in range(CAP + 1):
            ws = websocket.create_connection(f"ws://127.0.0.1:{gw.ws_port}/", timeout=10,
                                             subprotocols=["v12.stomp"])
            ws.send(hello)
            sockets.append((ws, ws.recv()))
        answers_ = [str(reply).split("\n", 1)[0] for _, reply in sockets]
        assert answers_ == ["CONNECTED"] * CAP + ["ERROR"], answers_
        assert "connection limit reached" in str(sockets[-1][1])
        for ws, _ in sockets:
            assert ws.sock is not None
            ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            ws.sock.close()
        wait_until(lambda: connections_of(gw, who) == 0, 10, "WebSocket places given back")
    clients = [connect_raw(gw, who) for _ in range(CAP)]
    assert [f.command for _, f in clients] == ["CONNECTED"] * CAP
    for client, _ in clients:
        client.close()


def test_without_auth_logins_nothing_is_counted_per_login(tmp_path: Path) -> None:
    """'Only with [auth] logins: without them a CONNECT's login is the client's word, and nothing is counted
    per login': a client naming someone else's login cannot spend that login's room (nor be refused)."""
    process = GatewayProcess(tmp_path / "g", '\n[auth.limits."*"]\nmax_queues = 1\nmax_connections = 1\n').start()
    try:
        gw = Gateway(process, 0)
        clients = [connect_raw(gw, "u1") for _ in range(3)]
        assert [f.command for _, f in clients] == ["CONNECTED"] * 3
        for n in range(3):
            assert ask(clients[0][0], "SEND", {"destination": f"/queue/anon.{n}"}, "x").command == "RECEIPT"
        for client, _ in clients:
            client.close()
    finally:
        process.stop()


def test_a_durable_started_afresh_at_the_cap_keeps_its_own_place(gw: Gateway) -> None:
    """Re-subscribing a durable with another topic or selector starts it afresh: at the cap that is no
    creation past it (refused) and no place lost or gained."""
    who = fresh_login()
    tag = unique("fr")
    client = login(gw, who, extra=f"client-id:{tag}\n")
    for n in range(CAP):
        assert ask(client, "SUBSCRIBE", {"destination": f"/topic/{tag}", "id": f"s{n}",
                                         "activemq.subscriptionName": f"d{n}"}).command == "RECEIPT"
    for round_ in range(4):
        assert ask(client, "UNSUBSCRIBE", {"id": "s0"}).command == "RECEIPT"  # (deactivated, kept)
        reply = ask(client, "SUBSCRIBE", {"destination": f"/topic/{tag}.{round_}", "id": "s0",
                                          "activemq.subscriptionName": "d0", "selector": f"n = {round_}"})
        assert reply.command == "RECEIPT", reply
        assert held(gw, who) == CAP
    assert limit_refused(ask(client, "SUBSCRIBE", {"destination": f"/topic/{tag}", "id": "s9",
                                                   "activemq.subscriptionName": "d9"}))
    client.close()


def test_stomp_and_connect_frames_share_one_connection_count(gw: Gateway) -> None:
    """STOMP 1.1's STOMP frame is a CONNECT too: mixing the two does not give a login more places."""
    who = fresh_login()
    clients = []
    for n in range(CAP + 1):
        client = RawStomp(gw.address)
        command = "STOMP" if n % 2 else "CONNECT"
        client.send(f"{command}\naccept-version:1.1,1.2\nhost:x\nlogin:{who}\npasscode:{PASSWORDS[who]}\n\n\x00")
        clients.append((client, client.frame()))
    assert [f.command for _, f in clients] == ["CONNECTED"] * CAP + ["ERROR"]
    for client, _ in clients:
        client.close()
