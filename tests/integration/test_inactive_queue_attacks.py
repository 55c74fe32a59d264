"""Black-box attacks on the collection of inactive auto-created queues (``[broker] inactive_queue_timeout``).

Written from the promise only (docs/stomp.md "Inactive queues", the ``inactive_queue_timeout`` row of
docs/configuration.md, docs/operations.md, docs/admin.md's ``jmsgateway_broker_queues_collected_total``,
docs/high-availability.md, the CHANGELOG), not from the code or its tests: a queue is removed only when it
is inactive, no message is ever lost by it, some queues are never removed, and what a collection gives back
comes back.  Real gateway processes with a timeout of 1 s (a sweep every 0.1 s), stomp.py clients and raw
sockets that pipeline many frames in one write.  Most attacks share one gateway (``gw``, SQLite, each
attack on names of its own); restarts, a standby's takeover, the 20,000-name flood and SIGHUP get
gateways of their own.  Where an attack means to cross a collection it checks that the collection did
happen (``/status``), so that it cannot pass for want of one.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.admin_requests import admin_request
from tests.support.destination_attacks import collect, drain, frame, send_frame
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

TIMEOUT = 1
"""``inactive_queue_timeout`` of every gateway here: a queue goes 1 to 1.2 s after it became inactive."""
PAST = 2.2
"""Seconds that are surely past a collection of a queue that became inactive at their start."""
ARGS = ["--set", f"broker.inactive_queue_timeout={TIMEOUT}", "--set", "broker.max_redeliveries=1",
        "--set", "broker.expiry_check_interval_ms=200"]

MODULE_CONFIG = """
[broker.destinations."/queue/gcpage.>"]
max_size = "1KB"
full_policy = "PAGE"

[broker.destinations."/queue/gcbr.dst"]
max_size = "2KB"
full_policy = "FAIL"

[[bridges]]
name = "gc-bridge"
source = { connector = "embedded", destination = "/queue/gcbr.src" }
target = { connector = "embedded", destination = "/queue/gcbr.dst" }
failure_retry_interval = 700
"""


class Gateway:
    """A gateway process and its admin port."""

    def __init__(self, process: GatewayProcess, admin_port: int) -> None:
        self.process = process
        self.admin_port = admin_port
        self.address = process.address


def start(workdir: Path, extra: str = "", args: list[str] | None = None, *, timeout_line: str | None = None
          ) -> Gateway:
    """A gateway with an admin endpoint; ``timeout_line`` puts the timeout in the file's ``[broker]`` table
    (for SIGHUP) instead of on the command line."""
    admin_port = free_port()
    base = list(ARGS) if timeout_line is None else ARGS[2:]
    process = GatewayProcess(workdir, f'[admin]\nlisten = ["tcp:{admin_port}:interface=127.0.0.1"]\n' + extra,
                             args=[*base, *(args or [])])
    if timeout_line is not None:
        set_timeout_in_file(process, timeout_line)
    process.start()
    wait_for_port(admin_port)
    return Gateway(process, admin_port)


def set_timeout_in_file(process: GatewayProcess, value: str) -> None:
    text = process.config_path.read_text()
    text = re.sub(r"\ninactive_queue_timeout = \S+", "", text)
    text = text.replace("\n[broker]\n", f"\n[broker]\ninactive_queue_timeout = {value}\n", 1)
    process.config_path.write_text(text)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start(tmp_path_factory.mktemp("gcattack"), MODULE_CONFIG)
    try:
        yield gateway
    except BaseException:
        print(gateway.process.log()[-4000:])
        raise
    finally:
        gateway.process.stop()


def status(gw: Gateway, credentials: tuple[str, str] | None = None) -> dict[str, Any]:
    code, body = admin_request(gw.admin_port, "GET", "/status", credentials)
    assert code == 200, body
    found: dict[str, Any] = json.loads(body)["connectors"]["embedded"]
    return found


def queues(gw: Gateway, credentials: tuple[str, str] | None = None) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = status(gw, credentials)["queues"]
    return found


def metrics(gw: Gateway, credentials: tuple[str, str] | None = None) -> str:
    code, body = admin_request(gw.admin_port, "GET", "/metrics", credentials)
    assert code == 200, body
    return body.decode()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, name
    return float(match.group(1))


def wait_gone(gw: Gateway, name: str, timeout: float = 8.0) -> None:
    wait_until(lambda: name not in queues(gw), timeout, f"{name} collected")


def unique(prefix: str) -> str:
    return f"/queue/{prefix}{uuid.uuid4().hex[:8]}"


def bodies(frames: list[tuple[str, dict[str, str]]]) -> list[str]:
    return [body for body, _ in frames]


def take(client: Client, destination: str, count: int, *, quiet: float = 0.3, timeout: float = 15.0) -> list[str]:
    """Subscribe (auto ack) and take ``count`` MESSAGEs (AssertionError naming what came if fewer arrive
    within ``timeout``), then any more that arrive within ``quiet`` seconds; the bodies in arrival order."""
    sub_id = uuid.uuid4().hex[:8]
    client.subscribe(destination, sub_id)
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        wait = quiet if len(got) >= count else deadline - time.monotonic()
        try:
            message = client.listener.messages.get(timeout=max(0.01, wait))
        except queue.Empty:
            break
        got.append(message.body.decode() if isinstance(message.body, bytes) else message.body)
    client.unsubscribe(sub_id)
    return got


def make_empty(gw: Gateway, name: str) -> None:
    """Make ``name`` an empty auto-created queue (SUBSCRIBE then UNSUBSCRIBE)."""
    client = Client(gw.address)
    client.subscribe(name, "m")
    client.unsubscribe("m")
    client.disconnect()


# -- losing a message ----------------------------------------------------------------------------------


def test_a_transacted_send_to_a_new_name_committed_after_the_timeout_is_delivered(gw: Gateway) -> None:
    name = unique("gctx.")
    client = Client(gw.address)
    client.begin("t1")
    client.send(name, "in-tx-1", transaction="t1", persistent="true")
    client.send(name, "in-tx-2", transaction="t1")
    time.sleep(PAST)
    client.commit("t1")
    assert take(client, name, 2) == ["in-tx-1", "in-tx-2"]
    client.disconnect()


def test_an_empty_queue_collected_then_a_transacted_send_to_it_is_delivered(gw: Gateway) -> None:
    name = unique("gctx2.")
    make_empty(gw, name)
    client = Client(gw.address)
    client.begin("t2")
    client.send(name, "a", transaction="t2")
    wait_gone(gw, name)  # (a SEND inside a transaction is not applied before COMMIT)
    client.commit("t2")
    assert take(client, name, 1) == ["a"]
    client.disconnect()


def test_an_ack_in_a_transaction_aborted_after_the_subscriber_left_puts_the_message_back(gw: Gateway) -> None:
    name = unique("gcabort.")
    client = Client(gw.address)
    client.send(name, "held", receipt=True, persistent="true")
    client.subscribe(name, "s", ack="client-individual")
    message = client.message()
    client.begin("t3")
    client.ack(message, transaction="t3", receipt=False)
    client.unsubscribe("s")
    time.sleep(PAST)
    client.abort("t3")
    other = Client(gw.address)
    assert take(other, name, 1) == ["held"]
    client.disconnect()
    other.disconnect()


def test_nacked_messages_reach_a_dead_letter_queue_that_is_collected_between_them(gw: Gateway) -> None:
    tail = f"gcdlq.{uuid.uuid4().hex[:8]}"
    name, dlq = f"/queue/{tail}", f"/queue/DLQ.{tail}"
    client = Client(gw.address)
    reader = Client(gw.address)
    got: list[str] = []
    collected_between = 0
    for round_ in range(3):
        client.send(name, f"m{round_}", receipt=True, persistent="true")
        client.subscribe(name, "n", ack="client-individual")
        for _ in range(2):  # max_redeliveries = 1: the second NACK dead-letters it
            client.nack(client.message())
        client.unsubscribe("n")
        got += bodies(drain(reader, dlq, quiet=0.5))
        if round_ < 2:
            wait_gone(gw, dlq)
            collected_between += 1
    assert got == ["m0", "m1", "m2"]
    assert collected_between == 2
    client.disconnect()
    reader.disconnect()


def test_dead_letters_moved_back_from_the_console_to_their_collected_queue_arrive(gw: Gateway) -> None:
    tail = f"gcmove.{uuid.uuid4().hex[:8]}"
    name, dlq = f"/queue/{tail}", f"/queue/DLQ.{tail}"
    client = Client(gw.address)
    for n in range(3):
        client.send(name, f"d{n}", receipt=True, persistent="true")
    client.subscribe(name, "n", ack="client-individual")
    for _ in range(6):
        client.nack(client.message())
    client.unsubscribe("n")
    wait_gone(gw, name)
    assert queues(gw)[dlq]["pending"] == 3
    code, answer = admin_request(gw.admin_port, "POST", "/console/api/move", None, {"destination": dlq})
    assert code == 200, answer
    assert json.loads(answer)["result"] == 3
    time.sleep(PAST)
    assert sorted(take(client, name, 3)) == ["d0", "d1", "d2"]
    code, answer = admin_request(gw.admin_port, "POST", "/console/api/send", None,
                                 {"destination": name, "body": "from-console", "persistent": True})
    assert code == 200, answer
    time.sleep(PAST)
    assert take(client, name, 1) == ["from-console"]
    client.disconnect()


def test_a_nack_in_a_transaction_committed_after_the_subscriber_left_puts_the_message_back(gw: Gateway) -> None:
    name = unique("gctxnack.")
    client = Client(gw.address)
    client.send(name, "again", receipt=True, persistent="true")
    client.subscribe(name, "s", ack="client-individual")
    message = client.message()
    client.begin("tn")
    client.nack(message, transaction="tn", receipt=False)
    client.unsubscribe("s")
    time.sleep(PAST)
    client.commit("tn")
    time.sleep(0.3)
    got = bodies(drain(client, name)) + bodies(drain(client, f"/queue/DLQ.{name[len('/queue/'):]}", quiet=0.3))
    assert got == ["again"], got
    client.disconnect()


def test_a_dead_letter_queue_holding_messages_is_never_collected(gw: Gateway) -> None:
    tail = f"gcdlq2.{uuid.uuid4().hex[:8]}"
    client = Client(gw.address)
    client.send(f"/queue/{tail}", "dead", receipt=True)
    client.subscribe(f"/queue/{tail}", "n", ack="client")
    for _ in range(2):
        client.nack(client.message())
    client.unsubscribe("n")
    time.sleep(PAST)
    assert f"/queue/DLQ.{tail}" in queues(gw)
    assert take(client, f"/queue/DLQ.{tail}", 1) == ["dead"]
    client.disconnect()


@pytest.mark.parametrize("repeat", [0, 1])
def test_a_scheduled_send_due_after_the_timeout_reaches_its_queue(gw: Gateway, repeat: int) -> None:
    name = unique("gcsched.")
    client = Client(gw.address)
    make_empty(gw, name)  # an empty queue that the sweep would collect now, whose job is still waiting
    headers = {"AMQ_SCHEDULED_DELAY": "1500"}
    if repeat:
        headers |= {"AMQ_SCHEDULED_REPEAT": str(repeat), "AMQ_SCHEDULED_PERIOD": "1200"}
    client.send(name, "later", receipt=True, headers=headers)
    time.sleep(1.5 + repeat * 1.2 + 1.3)
    assert take(client, name, 1 + repeat) == ["later"] * (1 + repeat)
    client.disconnect()


def test_a_scheduled_send_to_a_composite_destination_reaches_every_part(gw: Gateway) -> None:
    a, b = unique("gcsched.a."), unique("gcsched.b.")
    for name in (a, b):
        make_empty(gw, name)
    client = Client(gw.address)
    client.send(f"{a},{b}", "both", receipt=True,
                headers={"AMQ_SCHEDULED_DELAY": "1500", "AMQ_SCHEDULED_REPEAT": "1", "AMQ_SCHEDULED_PERIOD": "1300"})
    time.sleep(1.5 + 1.3 + 1.3)
    assert take(client, a, 2) == ["both", "both"]
    assert take(client, b, 2) == ["both", "both"]
    client.disconnect()


def test_a_reply_to_queue_collected_before_the_reply_gets_the_reply(gw: Gateway) -> None:
    request, reply = unique("gcreq."), unique("gcreply.")
    client = Client(gw.address)
    client.send(request, "question", receipt=True, headers={"reply-to": reply})
    responder = Client(gw.address)
    responder.subscribe(request, "r")
    asked = responder.message()
    assert asked.headers["reply-to"] == reply
    if reply in queues(gw):  # (made by the reply-to, empty: collected now)
        wait_gone(gw, reply)
    time.sleep(0.3)
    responder.send(asked.headers["reply-to"], "answer", receipt=True)
    assert take(client, reply, 1) == ["answer"]
    client.disconnect()
    responder.disconnect()


def test_client_ack_deliveries_held_past_the_timeout_come_back_when_the_consumer_goes(gw: Gateway) -> None:
    name = unique("gchold.")
    client = Client(gw.address)
    for n in range(5):
        client.send(name, f"h{n}", persistent="true")
    client.send(name, "h5", receipt=True)
    holder = Client(gw.address)
    holder.subscribe(name, "h", ack="client", headers={"activemq.prefetchSize": "10"})
    assert len(holder.messages(6)) == 6
    time.sleep(PAST)
    assert name in queues(gw)
    holder.drop()  # a crashed consumer: all six go back
    time.sleep(PAST)
    assert sorted(take(client, name, 6)) == [f"h{n}" for n in range(6)]
    client.disconnect()


def test_an_unsubscribe_with_deliveries_out_then_a_late_ack_loses_nothing(gw: Gateway) -> None:
    """STOMP 1.2: an UNSUBSCRIBE with unacknowledged deliveries; the queue then has no consumer and nothing
    pending for a while (the deliveries are out); whatever the broker does with them, no message is lost."""
    name = unique("gcunsub.")
    client = Client(gw.address)
    client.send(name, "x1", receipt=True, persistent="true")
    client.send(name, "x2", receipt=True, persistent="true")
    holder = Client(gw.address)
    holder.subscribe(name, "h", ack="client-individual")
    first, _ = holder.messages(2)
    holder.unsubscribe("h")
    time.sleep(PAST)
    holder.ack(first, receipt=False)
    holder.disconnect()
    time.sleep(PAST)
    got = bodies(drain(client, name))
    assert "x2" in got, f"{got}: the unacknowledged delivery was lost"
    client.disconnect()


def test_a_browse_while_the_queue_is_collected_and_made_again_sees_and_loses_nothing(gw: Gateway) -> None:
    name = unique("gcbrowse.")
    raw = RawStomp(gw.address)
    raw.connect()
    client = Client(gw.address)
    sent: list[str] = []
    deadline = time.monotonic() + 2.8
    n = 0
    while time.monotonic() < deadline:
        if n % 3 == 0:
            client.send(name, f"b{n}", receipt=True, persistent="true")
            sent.append(f"b{n}")
        raw.send(frame("SUBSCRIBE", {"id": f"br{n}", "destination": name, "browser": "true"}))
        seen = []
        while True:
            message = raw.frame()
            assert message.command == "MESSAGE", message
            if message.headers.get("browser") == "end":
                break
            seen.append(message.body.decode())
        assert seen == sent, (seen, sent)
        raw.send(frame("UNSUBSCRIBE", {"id": f"br{n}"}))
        n += 1
        time.sleep(0.15 + 0.1 * (n % 5))
    time.sleep(PAST)
    assert name in queues(gw)  # it holds messages
    assert take(client, name, len(sent)) == sent
    raw.close()
    client.disconnect()


def test_message_groups_and_an_exclusive_consumer_left_behind_lose_nothing(gw: Gateway) -> None:
    name = unique("gcgroup.")
    client = Client(gw.address)
    for n in range(6):
        client.send(name, f"g{n}", headers={"JMSXGroupID": f"grp{n % 2}"}, persistent="true")
    client.send(name, "g6", receipt=True, headers={"JMSXGroupID": "grp0"})
    owner = Client(gw.address)
    owner.subscribe(name, "e", ack="client-individual", headers={"activemq.exclusive": "true"})
    taken = owner.messages(7)
    for message in taken[:2]:
        owner.ack(message)
    owner.disconnect()
    time.sleep(PAST)
    assert name in queues(gw)
    assert sorted(take(client, name, 5)) == [f"g{n}" for n in range(2, 7)]
    wait_gone(gw, name)
    client.send(name, "after", receipt=True, headers={"JMSXGroupID": "grp0"})
    assert take(client, name, 1) == ["after"]
    client.disconnect()


def test_a_paged_queue_is_not_collected_and_gives_every_message(gw: Gateway) -> None:
    name = unique("gcpage.")
    client = Client(gw.address)
    body = "p" * 300
    for n in range(30):
        client.send(name, f"{n}:{body}", persistent="true")
    client.send(name, f"30:{body}", receipt=True, persistent="true")
    paging = status(gw)["paging"][name]
    assert paging["paged"] > 0, paging
    taker = Client(gw.address)  # takes what is in memory (and a little more), then leaves
    taker.subscribe(name, "t", ack="client-individual", headers={"activemq.prefetchSize": "3"})
    taken = taker.messages(3)
    for message in taken:
        taker.ack(message)
    first = [message.body.decode() for message in taken]
    taker.unsubscribe("t")
    taker.disconnect()
    time.sleep(PAST)
    assert name in queues(gw)
    got = first + take(client, name, 28)
    assert [int(b.split(":")[0]) for b in got] == list(range(31))
    wait_gone(gw, name)
    for n in range(100, 131):  # the name made again, paging again: nothing of the first queue comes back
        client.send(name, f"{n}:{body}", receipt=n == 130, persistent="true" if n % 2 else "false")
    assert status(gw)["paging"][name]["paged"] > 0
    again = take(client, name, 31)
    assert [int(b.split(":")[0]) for b in again] == list(range(100, 131))
    wait_gone(gw, name)
    client.disconnect()


def test_a_queue_with_a_message_expiring_later_stays_and_goes_after_it_expired(gw: Gateway) -> None:
    name, later = unique("gcexp."), unique("gcexp.later.")
    client = Client(gw.address)
    now_ms = int(time.time() * 1000)
    client.send(name, "soon", receipt=True, expires=str(now_ms + 700))
    client.send(later, "later", receipt=True, expires=str(now_ms + 60_000), persistent="true")
    wait_gone(gw, name)  # its message expired: the queue is empty and goes
    time.sleep(PAST)
    assert later in queues(gw)
    assert take(client, later, 1) == ["later"]
    client.disconnect()


def test_persistent_sends_pipelined_to_many_names_across_sweeps_lose_nothing(gw: Gateway) -> None:
    """Rounds of 150 names: persistent SENDs pipelined in one write, taken by pipelined SUBSCRIBE/UNSUBSCRIBE
    pairs, then a pause around the timeout so that sweeps collect names between (and during) the rounds;
    a second connection writes a persistent load to keep the store busy.  Every message arrives once."""
    prefix = f"gcload.{uuid.uuid4().hex[:6]}."
    names = [f"/queue/{prefix}{n}" for n in range(150)]
    stop = threading.Event()

    def load() -> None:
        loader = RawStomp(gw.address)
        loader.connect()
        big = "L" * 4000
        while not stop.is_set():
            loader.send(b"".join(send_frame(f"/queue/{prefix}load", big, {"persistent": "true"}) for _ in range(50))
                        + frame("SUBSCRIBE", {"id": "x", "destination": f"/queue/{prefix}load", "receipt": "r"})
                        + frame("UNSUBSCRIBE", {"id": "x"}))
            while loader.frame(20).command != "RECEIPT":
                pass
        loader.close()

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    raw = RawStomp(gw.address)
    raw.connect()
    sent: set[str] = set()
    got: list[str] = []
    for round_ in range(4):
        batch = [send_frame(name, f"{round_}:{name}", {"persistent": "true"}) for name in names]
        sent |= {f"{round_}:{name}" for name in names}
        subscribes = [frame("SUBSCRIBE", {"id": f"s{n}", "destination": name}) + frame("UNSUBSCRIBE", {"id": f"s{n}"})
                      for n, name in enumerate(names[round_ % 3::3])]
        raw.send(b"".join(batch) + b"".join(subscribes)
                 + frame("BEGIN", {"transaction": "_", "receipt": f"r{round_}"}) + frame("ABORT", {"transaction": "_"}))
        while True:
            answer = raw.frame(30)
            assert answer.command != "ERROR", answer
            if answer.command == "MESSAGE":
                got.append(answer.body.decode())
            elif answer.headers.get("receipt-id") == f"r{round_}":
                break
        if round_ < 3:
            time.sleep(0.8 + 0.15 * round_)
    stop.set()
    loader.join(30)
    raw.close()
    consumer = Client(gw.address)
    consumer.subscribe(f"/queue/{prefix}>", "all")
    got += [body.decode() for body in collect(consumer, quiet=1.5)]
    consumer.disconnect()
    got = [body for body in got if not body.startswith("L")]
    assert len(got) == len(set(got)), "duplicates"
    assert set(got) == sent, f"lost {len(sent - set(got))}: {sorted(sent - set(got))[:5]}"


@pytest.mark.parametrize("kind", ["composite", "transaction"])
def test_persistent_writes_to_queues_about_to_be_collected_lose_nothing(gw: Gateway, kind: str) -> None:
    """Empty queues made, then, as their collection falls due (0.9 to 1.3 s later), persistent composite
    SENDs to pairs of them, or one COMMIT of SENDs to all of them, pipelined in one write: the store's
    write is in flight while sweeps run.  Every copy arrives, once."""
    prefix = f"gcrace{kind[0]}{uuid.uuid4().hex[:6]}"
    raw = RawStomp(gw.address, timeout=30)
    raw.connect()
    expected: set[str] = set()
    for round_ in range(3):
        names = [f"/queue/{prefix}.{n}" for n in range(200)]
        raw.send(b"".join(frame("SUBSCRIBE", {"id": "m", "destination": name}) + frame("UNSUBSCRIBE", {"id": "m"})
                          for name in names)
                 + frame("BEGIN", {"transaction": "_", "receipt": f"m{round_}"}) + frame("ABORT", {"transaction": "_"}))
        assert raw.frame(30).headers.get("receipt-id") == f"m{round_}"
        time.sleep(0.9 + 0.17 * round_)
        if kind == "composite":
            writes = [send_frame(f"{names[n]},{names[n + 1]}", f"{round_}:{n}", {"persistent": "true"})
                      for n in range(0, 200, 2)]
            expected |= {f"{names[n + part]}={round_}:{n}" for n in range(0, 200, 2) for part in (0, 1)}
        else:
            writes = [frame("BEGIN", {"transaction": f"t{round_}"})]
            writes += [send_frame(name, f"{round_}:{n}", {"persistent": "true", "transaction": f"t{round_}"})
                       for n, name in enumerate(names)]
            writes.append(frame("COMMIT", {"transaction": f"t{round_}"}))
            expected |= {f"{name}={round_}:{n}" for n, name in enumerate(names)}
        raw.send(b"".join(writes) + frame("BEGIN", {"transaction": "_", "receipt": f"w{round_}"})
                 + frame("ABORT", {"transaction": "_"}))
        answer = raw.frame(30)
        assert answer.headers.get("receipt-id") == f"w{round_}", answer
        wanted = {item for item in expected if f"={round_}:" in item}
        drainer = Client(gw.address)
        drainer.subscribe(f"/queue/{prefix}.>", "all")
        got: list[str] = []
        while True:
            try:
                message = drainer.listener.messages.get(timeout=0.3 if len(got) >= len(wanted) else 10)
            except queue.Empty:
                break
            got.append(f"{message.headers['destination']}={message.body.decode()}")
        drainer.disconnect()
        assert len(got) == len(set(got)), "duplicates"
        assert set(got) == wanted, f"round {round_}: lost {len(wanted - set(got))}: {sorted(wanted - set(got))[:4]}"
    raw.close()


def test_dead_letters_written_as_their_dead_letter_queues_fall_due_lose_nothing(gw: Gateway) -> None:
    """100 dead-letter queues made empty; as their collection falls due, 100 NACKs pipelined in one write
    dead-letter a persistent message into each (max_redeliveries = 1): every one is in its DLQ, once."""
    prefix = f"gcdlrace{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}.{n}" for n in range(100)]
    raw = RawStomp(gw.address, timeout=30)
    raw.connect()
    raw.send(b"".join(send_frame(f"/queue/{name}", name, {"persistent": "true"}) for name in names)
             + frame("SUBSCRIBE", {"id": "c", "destination": f"/queue/{prefix}.>", "ack": "client-individual",
                                   "receipt": "sub"}))

    def deliveries(count: int) -> list[str]:
        acks: list[str] = []
        while len(acks) < count:
            item = raw.frame(30)
            if item.command == "MESSAGE":
                acks.append(item.headers["ack"])
        return acks

    for delay in (0.0, 1.05):
        acks = deliveries(100)
        if delay:
            maker = RawStomp(gw.address)
            maker.connect()
            maker.send(b"".join(frame("SUBSCRIBE", {"id": "m", "destination": f"/queue/DLQ.{name}"})
                                + frame("UNSUBSCRIBE", {"id": "m"}) for name in names)
                       + frame("DISCONNECT", {"receipt": "made"}))
            assert maker.frame(30).headers.get("receipt-id") == "made"
            time.sleep(delay)
        raw.send(b"".join(frame("NACK", {"id": ack}) for ack in acks))
    drainer = Client(gw.address)
    drainer.subscribe(f"/queue/DLQ.{prefix}.>", "all")
    got = [body.decode() for body in collect(drainer, quiet=1.5)]
    drainer.disconnect()
    raw.close()
    assert sorted(got) == sorted(names), f"lost {sorted(set(names) - set(got))[:5]}, {len(got)} dead letters"


# -- the wrong queue removed ---------------------------------------------------------------------------


def test_a_bridge_source_is_not_lost_while_the_bridge_retries_a_full_target(gw: Gateway) -> None:
    client = Client(gw.address)
    body = "B" * 900
    for n in range(4):
        client.send("/queue/gcbr.src", f"{n}:{body}", receipt=True, persistent="true")
    time.sleep(PAST)  # the target (2 KB, FAIL) is full after one: the bridge retries the rest
    got = bodies(drain(client, "/queue/gcbr.dst", quiet=0.5))
    deadline = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < deadline:
        got += bodies(drain(client, "/queue/gcbr.dst", quiet=0.5))
    assert sorted(int(b.split(":")[0]) for b in got) == [0, 1, 2, 3]
    time.sleep(PAST)  # the source is empty now, with the bridge subscribed: a SEND to it is still bridged
    client.send("/queue/gcbr.src", "late", receipt=True)
    late: list[str] = []
    deadline = time.monotonic() + 10
    while not late and time.monotonic() < deadline:
        late += bodies(drain(client, "/queue/gcbr.dst", quiet=0.3))
    assert late == ["late"], "a SEND to the bridge's source after a pause was not bridged"
    client.disconnect()


def test_a_wildcard_queue_subscriber_keeps_what_it_matches_and_its_absence_lets_them_go(gw: Gateway) -> None:
    base = f"gcwild{uuid.uuid4().hex[:6]}"
    subscriber = Client(gw.address)
    subscriber.subscribe(f"/queue/{base}.>", "w")
    sender = Client(gw.address)
    sender.send(f"/queue/{base}.a", "1", receipt=True)
    assert subscriber.message().body == b"1"
    time.sleep(PAST)
    assert f"/queue/{base}.a" in queues(gw), "a queue a wildcard subscriber matches was collected"
    sender.send(f"/queue/{base}.a", "2", receipt=True)
    assert subscriber.message().body == b"2"
    subscriber.unsubscribe("w")
    wait_gone(gw, f"/queue/{base}.a")
    sender.disconnect()
    subscriber.disconnect()


def test_console_created_virtual_topic_and_durable_queues_are_never_collected(gw: Gateway) -> None:
    tag = uuid.uuid4().hex[:8]
    console = f"/queue/gccons.{tag}"
    code, answer = admin_request(gw.admin_port, "POST", "/console/api/create", None, {"destination": console})
    assert code == 200, answer
    named = f"/queue/gcnamed.{tag}"
    make_empty(gw, named)
    code, answer = admin_request(gw.admin_port, "POST", "/console/api/create", None, {"destination": named})
    assert code in (200, 409), answer
    consumer_queue = f"/queue/Consumer.A.VirtualTopic.gc{tag}"
    make_empty(gw, consumer_queue)
    durable = Client(gw.address, headers={"client-id": f"gc{tag}"})
    durable.subscribe(f"/topic/gcdur.{tag}", "d", headers={"activemq.subscriptionName": "sub"})
    durable.disconnect()
    time.sleep(PAST)
    held = queues(gw)
    assert console in held
    assert named in held, "an auto-created queue the console named was collected"
    assert consumer_queue in held
    publisher = Client(gw.address)
    publisher.send(f"/topic/VirtualTopic.gc{tag}", "vt", receipt=True)
    publisher.send(f"/topic/gcdur.{tag}", "dur", receipt=True)
    assert take(publisher, consumer_queue, 1) == ["vt"]
    back = Client(gw.address, headers={"client-id": f"gc{tag}"})
    back.subscribe(f"/topic/gcdur.{tag}", "d", headers={"activemq.subscriptionName": "sub"})
    assert back.message().body == b"dur"
    back.disconnect()
    publisher.disconnect()


def test_an_idle_temporary_queue_stays_with_its_connection(gw: Gateway) -> None:
    owner = Client(gw.address)
    owner.subscribe("/temp-queue/gcreply", "t")
    asker = Client(gw.address)
    asker_target = unique("gctempreq.")
    owner.send(asker_target, "q", receipt=True, headers={"reply-to": "/temp-queue/gcreply"})
    asker.subscribe(asker_target, "a")
    reply_to = asker.message().headers["reply-to"]
    time.sleep(PAST)
    asker.send(reply_to, "answer", receipt=True)
    assert owner.message().body == b"answer"
    owner.disconnect()
    asker.disconnect()


def test_a_slow_producer_with_a_consumer_never_loses_its_queue(gw: Gateway) -> None:
    name = unique("gcslow.")
    consumer = Client(gw.address)
    consumer.subscribe(name, "c")
    producer = Client(gw.address)
    for n in range(3):
        producer.send(name, f"s{n}", receipt=True)
        assert consumer.message().body == f"s{n}".encode()
        for _ in range(13):
            assert name in queues(gw), f"{name} collected while its consumer is subscribed"
            time.sleep(0.1)
    consumer.disconnect()
    producer.disconnect()


def test_a_client_that_subscribes_now_and_then_keeps_its_queue(gw: Gateway) -> None:
    """A SUBSCRIBE and UNSUBSCRIBE every 0.6 s (less than the timeout): the promise says such a queue stays."""
    name = unique("gcblink.")
    client = Client(gw.address)
    client.subscribe(name, "b")
    client.unsubscribe("b")
    for _ in range(6):
        time.sleep(0.6)
        assert name in queues(gw)  # (checked before the SUBSCRIBE, which would make it again)
        client.subscribe(name, "b")
        client.unsubscribe("b")
    client.disconnect()


def test_a_queue_removed_from_the_console_while_the_sweep_has_noted_it_is_counted_once(gw: Gateway) -> None:
    """The sweep notes an idle queue; the console removes it (and a client makes it again) before the sweep
    that would collect it: the count of destinations must not be given back twice."""
    names = [unique("gcremove.") for _ in range(6)]
    for n, name in enumerate(names):
        make_empty(gw, name)
        time.sleep(0.15 * (n % 3))
        code, answer = admin_request(gw.admin_port, "POST", "/console/api/remove", None, {"destination": name})
        assert code == 200, answer
        if n % 2:
            make_empty(gw, name)  # made again: a new queue of the same name
    for name in names:
        wait_gone(gw, name)
    time.sleep(0.5)
    embedded = status(gw)
    held = len(embedded["queues"]) + len(embedded["durables"])
    assert embedded["limits"]["destinations"] == held, embedded


def test_the_destination_count_matches_what_the_gateway_holds(gw: Gateway) -> None:
    """After every attack above (the module's tests run in order in one process): the count of
    ``max_destinations`` is what is held, once the leftovers are collected."""
    wait_until(lambda: len(queues(gw)) <= 5, 15, "the leftovers collected")
    time.sleep(0.5)
    embedded = status(gw)
    held = len(embedded["queues"]) + len(embedded["durables"])
    assert embedded["limits"]["destinations"] == held, embedded


# -- resources ---------------------------------------------------------------------------------------
