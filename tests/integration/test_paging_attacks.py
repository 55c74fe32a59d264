"""Black-box attacks on the embedded broker's memory limits and paging (issue 27 part 1).

Each test takes one promise of docs/paging.md (or docs/persistence.md) and checks it against a
real ``twistd jmsgateway`` process, with raw-socket clients that pipeline their frames so a
small ``memory_limit`` (1 MiB, 2 MiB) is passed many times over in a few seconds.  Promises
that hold are ordinary tests (guards); a promise found broken is an ``xfail(strict=True)`` test
whose reason says what is wrong, so it turns into a failure (to be unmarked) once it is fixed.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.wire.frame import Frame
from tests.integration.test_admin import http
from tests.integration.test_persistence import small_disk  # noqa: F401
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.raw_stomp import RawStomp
from tests.support.waiting import wait_until

LOGIN = ("alice", "secret")
PAD = "p" * 300


def body(n: int) -> str:
    """A numbered body: its first six characters are the sequence number."""
    return f"{n:06}:{PAD}"


def seq(frame: Frame) -> int:
    return int(frame.body[:6])


def frame(command: str, headers: dict[str, str], text: str = "") -> bytes:
    lines = "".join(f"{name}:{value}\n" for name, value in headers.items())
    return f"{command}\n{lines}\n{text}\x00".encode()


def connect(address: tuple[str, int], extra: str = "") -> RawStomp:
    client = RawStomp(address)
    client.connect(extra=f"login:alice\npasscode:secret\n{extra}")
    return client


def flood(address: tuple[str, int], destination: str, count: int,
          headers: Callable[[int], dict[str, str]] | dict[str, str] | None = None,
          text: Callable[[int], str] = body) -> None:
    """``count`` SENDs pipelined in writes of 500 frames; returns once the last one's RECEIPT came
    (a RECEIPT covers every earlier SEND of the connection, docs/persistence.md)."""
    client = connect(address)
    batch: list[bytes] = []
    for n in range(count):
        send_headers = {"destination": destination}
        if headers is not None:
            send_headers.update(headers(n) if callable(headers) else headers)
        if n == count - 1:
            send_headers["receipt"] = "last"
        batch.append(frame("SEND", send_headers, text(n)))
        if len(batch) == 500 or n == count - 1:
            client.send(b"".join(batch))
            batch = []
    receipt = client.frame(timeout=60)
    assert receipt.command == "RECEIPT", receipt
    client.close()


def subscribe(address: tuple[str, int], destination: str, extra: str = "", **headers: str) -> RawStomp:
    client = connect(address, extra)
    client.send(frame("SUBSCRIBE", {"destination": destination, "id": "s", "receipt": "subscribed", **headers}))
    early: list[Frame | Any] = []  # a backlog's first MESSAGEs may come before the RECEIPT
    while (item := client.frame()).command != "RECEIPT":
        early.append(item)
    client.pending[:0] = early
    return client


def receive(client: RawStomp, count: int, timeout: float = 10.0, ack: bool = False, extra: float = 0.0) -> list[Frame]:
    """Up to ``count`` MESSAGE frames (fewer if nothing came for ``timeout``), ACKing each if asked;
    then, with ``extra``, one more if one comes within ``extra`` seconds (a duplicate or a leftover)."""
    got: list[Frame] = []
    while len(got) < count:
        item = client.item(timeout)
        if item is None:
            break
        assert isinstance(item, Frame) and item.command == "MESSAGE", item
        got.append(item)
        if ack:
            client.send(frame("ACK", {"id": item.headers["ack"]}))
    if extra and len(got) == count and isinstance(item := client.item(extra), Frame):
        got.append(item)
    return got


def drain(address: tuple[str, int], destination: str, count: int, timeout: float = 10.0, extra: float = 0.3,
          **headers: str) -> list[Frame]:
    client = subscribe(address, destination, **headers)
    got = receive(client, count, timeout, extra=extra)
    client.close()
    return got


def rss_mb(process: GatewayProcess) -> int:
    assert process.process is not None
    for line in Path(f"/proc/{process.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def admin_config(admin: int) -> str:
    return (f'[admin]\nlisten = ["tcp:{admin}:interface=127.0.0.1"]\nusers = ["alice"]\n'
            'roles = { alice = "administrator" }\n')


def embedded(admin: int) -> dict[str, Any]:
    status, document, _ = http(admin, "GET", "/status", LOGIN)
    assert status == 200, document
    result: dict[str, Any] = document["connectors"]["embedded"]
    return result


def metric(admin: int, name: str) -> float:
    _, text, _ = http(admin, "GET", "/metrics", LOGIN)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


POLICIES = """
[broker.destinations."/queue/attack.drop"]
max_size = "32KB"
full_policy = "DROP"
[broker.destinations."/queue/attack.fail"]
max_size = "32KB"
full_policy = "FAIL"
[broker.destinations."/queue/attack.block"]
max_size = "32KB"
full_policy = "BLOCK"
[broker.destinations."/queue/attack.blockack"]
max_size = "32KB"
full_policy = "BLOCK"
[broker.destinations."/topic/attack.drop"]
max_size = "32KB"
full_policy = "DROP"
[broker.destinations."/topic/attack.droplog"]
max_size = "32KB"
full_policy = "DROP"
"""


@pytest.fixture(scope="module")
def paging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, int]]:
    """One gateway at memory_limit 1 MiB, max_redeliveries 2, with a DROP, FAIL and BLOCK queue."""
    admin = free_port()
    process = GatewayProcess(tmp_path_factory.mktemp("paging"), admin_config(admin) + POLICIES, args=[
        "--set", 'broker.memory_limit="1MB"', "--set", "broker.max_redeliveries=2",
        "--set", 'auth.users={alice = "secret"}',
        "--set", "auth.allow_weak_passwords=true"])
    process.start()
    process.wait_for_log("admin endpoint on tcp:")
    yield process, admin
    process.kill()


# --- guards: promises that hold ------------------------------------------------------------


def test_bad_memory_limits_stop_start_up_naming_the_key(tmp_path: Path) -> None:
    for n, value in enumerate(['"64XB"', "true"]):
        output = GatewayProcess(tmp_path / f"bad{n}", args=["--set", f"broker.memory_limit={value}"]).start_fails()
        assert "key 'broker.memory_limit'" in output and "must be a size" in output, output[-2000:]
    output = GatewayProcess(tmp_path / "badpattern",
                            '[broker.destinations."queue.orders"]\nmax_size = "1MB"\n').start_fails()
    assert "broker.destinations" in output and "'queue.orders' matches no destination" in output, output[-2000:]


def test_memory_limit_0_means_no_limit_as_max_size_0_does(tmp_path: Path) -> None:
    admin = free_port()
    gateway = GatewayProcess(tmp_path / "nolimit", admin_config(admin), args=[
        "--set", "broker.memory_limit=0", "--set", 'auth.users={alice = "secret"}',
        "--set", "auth.allow_weak_passwords=true"])
    try:
        gateway.start()
        gateway.wait_for_log("admin endpoint on tcp:")
        flood(gateway.address, "/queue/nolimit", 3000)
        memory = embedded(admin)["memory"]
        assert memory["limit"] == 0 and memory["used"] > 2_000_000 and memory["page_file"] is None, memory
        assert metric(admin, "jmsgateway_broker_memory_limit_bytes") == 0
    finally:
        gateway.kill()


def test_flood_of_many_times_the_limit_into_four_queues_stays_bounded_and_drains_in_order(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    """4 queues x 3,000 x 2 KB (about 30 MB counted, 15 x the limit), persistent and not, three
    priorities, four pipelined senders at once: RSS grows by far less than the backlog; each
    queue then drains complete, without duplicates, by priority and FIFO within one."""
    gateway = make_gateway(args=["--set", 'broker.memory_limit="2MB"'])
    base = rss_mb(gateway)
    count, text = 3000, (lambda n: f"{n:06}:" + "y" * 2000)
    threads = [threading.Thread(target=flood, args=(gateway.address, f"/queue/flood{q}", count), kwargs={
        "headers": lambda n, q=q: {"priority": str(n % 3 * 4), "persistent": "true" if q % 2 else "false"},
        "text": text}) for q in range(4)]
    for thread in threads:
        thread.start()
    peak = base
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, rss_mb(gateway))
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    assert peak - base < 2 + 20, f"RSS grew from {base} to {peak} MB for a 30 MB backlog at a 2 MB limit"
    for q in range(4):
        client = subscribe(gateway.address, f"/queue/flood{q}", ack="auto")
        got = receive(client, count, extra=0.3)
        client.close()
        order = [(int(message.headers["priority"]), seq(message)) for message in got]
        assert len(order) == count and len(set(order)) == count
        assert order == sorted(order, key=lambda item: (-item[0], item[1]))


def test_selective_consumers_find_matches_behind_the_window_in_priority_order(
    paging: tuple[GatewayProcess, int],
) -> None:
    gateway, _ = paging
    address = gateway.address
    # a match of priority 1 in memory, 6,000 non-matching, a non-matching 9 and a matching 8 paged
    flood(address, "/queue/attack.sel", 1, {"priority": "1", "k": "yes"}, text=lambda n: "M1")
    flood(address, "/queue/attack.sel", 6000, {"priority": "4", "k": "no"})
    flood(address, "/queue/attack.sel", 1, {"priority": "9", "k": "no"}, text=lambda n: "N9")
    flood(address, "/queue/attack.sel", 1, {"priority": "8", "k": "yes"}, text=lambda n: "M8")
    got = drain(address, "/queue/attack.sel", 2, timeout=10, selector="k = 'yes'")
    assert [message.body for message in got] == [b"M8", b"M1"]
    rest = drain(address, "/queue/attack.sel", 6001)
    assert [message.body for message in rest[:1]] == [b"N9"]
    assert [seq(message) for message in rest[1:]] == list(range(6000))


def test_a_second_selective_consumer_is_not_starved_by_the_first_ones_backlog(
    paging: tuple[GatewayProcess, int],
) -> None:
    gateway, _ = paging
    address = gateway.address
    stuck = subscribe(address, "/queue/attack.two", ack="client", selector="k = 'a'",
                      **{"activemq.prefetchSize": "1"})
    flood(address, "/queue/attack.two", 6000, {"k": "a"})
    flood(address, "/queue/attack.two", 1, {"k": "b"}, text=lambda n: "BEE")
    assert [message.body for message in drain(address, "/queue/attack.two", 1, selector="k = 'b'")] == [b"BEE"]
    stuck.close()
    assert len(drain(address, "/queue/attack.two", 6000)) == 6000


def test_nack_dead_letters_and_returned_deliveries_of_paged_messages(paging: tuple[GatewayProcess, int]) -> None:
    gateway, _ = paging
    address = gateway.address
    flood(address, "/queue/attack.nack", 5000)
    client = subscribe(address, "/queue/attack.nack", ack="client-individual", **{"activemq.prefetchSize": "1"})
    seen = []
    for _ in range(3):  # max_redeliveries = 2: the third NACK dead-letters message 0
        message = receive(client, 1)[0]
        seen.append((seq(message), message.headers.get("redelivered")))
        client.send(frame("NACK", {"id": message.headers["ack"]}))
    assert seen == [(0, None), (0, "true"), (0, "true")]
    assert seq(receive(client, 1)[0]) == 1
    client.close()  # message 1 goes back unacknowledged
    assert [seq(message) for message in drain(address, "/queue/DLQ.attack.nack", 1)] == [0]
    holder = subscribe(address, "/queue/attack.nack", ack="client", **{"activemq.prefetchSize": "100"})
    held = receive(holder, 100)
    holder.close()
    assert [seq(message) for message in held] == list(range(1, 101))
    got = drain(address, "/queue/attack.nack", 4999)
    assert [seq(message) for message in got] == list(range(1, 5000))
    assert all(message.headers.get("redelivered") == "true" for message in got[:100])
    assert not any(message.headers.get("redelivered") for message in got[100:])


def test_transactions_into_a_paging_queue_abort_to_nothing_and_commit_in_order(
    paging: tuple[GatewayProcess, int],
) -> None:
    gateway, _ = paging
    client = connect(gateway.address)
    for name, end in (("t1", "ABORT"), ("t2", "COMMIT")):
        client.send(frame("BEGIN", {"transaction": name}))
        client.send(b"".join(frame("SEND", {"destination": "/queue/attack.tx", "transaction": name,
                                             "persistent": "true" if n % 2 else "false"}, body(n))
                             for n in range(5000)))
        client.send(frame(end, {"transaction": name, "receipt": name}))
        assert client.frame(timeout=60).headers.get("receipt-id") == name
    client.close()
    got = drain(gateway.address, "/queue/attack.tx", 5000)
    assert [seq(message) for message in got] == list(range(5000))


def test_transacted_acks_of_paged_messages_aborted_come_back_redelivered(paging: tuple[GatewayProcess, int]) -> None:
    gateway, _ = paging
    flood(gateway.address, "/queue/attack.txack", 4000)
    client = subscribe(gateway.address, "/queue/attack.txack", ack="client-individual",
                       **{"activemq.prefetchSize": "2000"})
    client.send(frame("BEGIN", {"transaction": "t"}))
    for message in receive(client, 2000):
        client.send(frame("ACK", {"id": message.headers["ack"], "transaction": "t"}))
    client.send(frame("ABORT", {"transaction": "t"}))
    client.send(frame("UNSUBSCRIBE", {"id": "s", "receipt": "gone"}))
    while client.frame().command != "RECEIPT":
        pass
    client.close()
    got = drain(gateway.address, "/queue/attack.txack", 4000)
    assert [seq(message) for message in got] == list(range(4000))
    assert all(message.headers.get("redelivered") == "true" for message in got[:2000])


def test_paged_messages_expire(paging: tuple[GatewayProcess, int]) -> None:
    gateway, admin = paging
    expires = str(int(time.time() * 1000) + 1000)
    flood(gateway.address, "/queue/attack.expiry", 5000, {"expires": expires})
    flood(gateway.address, "/queue/attack.expiry", 1, text=lambda n: "keep")
    assert embedded(admin)["paging"]["/queue/attack.expiry"]["paged"] > 3000
    # the periodic expiry check removes them from the page without a consumer
    wait_until(lambda: embedded(admin)["queues"]["/queue/attack.expiry"]["pending"] == 1, 15, "paged messages expired")
    assert embedded(admin)["paging"]["/queue/attack.expiry"]["paged"] <= 1
    assert [message.body for message in drain(gateway.address, "/queue/attack.expiry", 1)] == [b"keep"]


def test_offline_durable_subscriptions_get_the_flood_in_order_and_their_selection(
    paging: tuple[GatewayProcess, int],
) -> None:
    gateway, _ = paging
    address = gateway.address
    for client_id, selector in (("all", {}), ("some", {"selector": "k = 'yes'"})):
        subscribe(address, "/topic/attack.durable", f"client-id:{client_id}\n",
                  **{"activemq.subscriptionName": "s"}, **selector).close()
    flood(address, "/topic/attack.durable", 6000,
          lambda n: {"k": "yes" if n % 1000 == 999 else "no", "persistent": "true" if n % 2 else "false"})
    for client_id, selector, expected in (("all", {}, list(range(6000))),
                                          ("some", {"selector": "k = 'yes'"}, list(range(999, 6000, 1000)))):
        client = subscribe(address, "/topic/attack.durable", f"client-id:{client_id}\n",
                           **{"activemq.subscriptionName": "s"}, **selector)
        assert [seq(message) for message in receive(client, len(expected), extra=0.3)] == expected
        client.close()


def test_a_slow_topic_subscriber_pages_while_a_fast_one_gets_everything(paging: tuple[GatewayProcess, int]) -> None:
    gateway, _ = paging
    fast = subscribe(gateway.address, "/topic/attack.slow")
    slow = subscribe(gateway.address, "/topic/attack.slow", ack="client-individual",
                     **{"activemq.prefetchSize": "1"})
    flood(gateway.address, "/topic/attack.slow", 6000)
    assert [seq(message) for message in receive(fast, 6000)] == list(range(6000))
    assert [seq(message) for message in receive(slow, 6000, ack=True)] == list(range(6000))
    fast.close()
    slow.close()


def test_drop_receipts_and_counts_every_discarded_send(paging: tuple[GatewayProcess, int]) -> None:
    gateway, admin = paging
    before = metric(admin, "jmsgateway_broker_dropped_total")
    client = connect(gateway.address)
    client.send(b"".join(frame("SEND", {"destination": "/queue/attack.drop", "receipt": f"r{n}"}, body(n))
                         for n in range(1000)))
    receipts = [client.frame() for _ in range(1000)]
    assert [item.headers["receipt-id"] for item in receipts] == [f"r{n}" for n in range(1000)]
    client.close()
    kept = drain(gateway.address, "/queue/attack.drop", 1000, timeout=1)
    assert [seq(message) for message in kept] == list(range(len(kept)))
    assert 0 < len(kept) < 100
    assert metric(admin, "jmsgateway_broker_dropped_total") - before == 1000 - len(kept)


def test_fail_refuses_a_commit_that_does_not_fit_as_a_whole(paging: tuple[GatewayProcess, int]) -> None:
    gateway, admin = paging
    before = metric(admin, "jmsgateway_broker_refused_full_total")
    client = connect(gateway.address)
    client.send(frame("BEGIN", {"transaction": "t"}))
    client.send(b"".join(frame("SEND", {"destination": "/queue/attack.fail", "transaction": "t"}, body(n))
                         for n in range(300)))
    client.send(frame("COMMIT", {"transaction": "t", "receipt": "c"}))
    error = client.frame()
    assert error.command == "ERROR" and error.headers["message"] == "destination full"
    assert b"/queue/attack.fail" in error.body and b"max_size 32768 bytes" in error.body
    client.close()
    assert drain(gateway.address, "/queue/attack.fail", 1, timeout=1) == []
    assert metric(admin, "jmsgateway_broker_refused_full_total") - before == 1


def test_block_releases_a_pipelined_sender_consuming_on_the_same_connection_with_auto_ack(
    paging: tuple[GatewayProcess, int],
) -> None:
    gateway, _ = paging
    client = subscribe(gateway.address, "/queue/attack.block")
    count = 400
    data = b"".join(frame("SEND", {"destination": "/queue/attack.block", "receipt": f"r{n}"}, body(n))
                    for n in range(count))
    writer = threading.Thread(target=client.send, args=(data,), daemon=True)
    writer.start()
    got: list[int] = []
    receipts = 0
    while len(got) < count or receipts < count:
        item = client.frame(timeout=10)
        if item.command == "MESSAGE":
            got.append(seq(item))
        else:
            assert item.command == "RECEIPT", item
            receipts += 1
    writer.join(5)
    client.close()
    assert got == list(range(count))


def test_purge_of_a_paged_queue_frees_memory_and_page_and_status_counts_are_true(
    paging: tuple[GatewayProcess, int],
) -> None:
    from tests.integration.test_console import api

    gateway, admin = paging
    flood(gateway.address, "/queue/attack.purge", 5000, lambda n: {"persistent": "true" if n % 2 else "false"})
    status = embedded(admin)
    paged = status["paging"]["/queue/attack.purge"]
    assert 0 < paged["memory"] <= status["memory"]["limit"]
    assert 3000 < paged["paged"] < 5000
    assert api(admin, "purge", LOGIN, body={"destination": "/queue/attack.purge"}) == (200, {"ok": True,
                                                                                              "result": 5000})
    after = embedded(admin)["paging"]["/queue/attack.purge"]
    assert (after["memory"], after["paged"], after["paged_bytes"]) == (0, 0, 0)
    assert drain(gateway.address, "/queue/attack.purge", 1, timeout=1) == []


def test_sigkill_while_paging_loses_no_receipted_message_and_discards_the_non_persistent(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway(args=["--set", 'broker.memory_limit="1MB"'])
    address = gateway.address
    flood(address, "/queue/kill.np", 4000, {"persistent": "false"})
    subscribe(address, "/topic/kill.durable", "client-id:k\n", **{"activemq.subscriptionName": "s"}).close()
    flood(address, "/topic/kill.durable", 4000, {"persistent": "true"})
    receipted: list[int] = []
    stop = threading.Event()

    def send() -> None:  # windows of 100 persistent SENDs of ten priorities, a RECEIPT for each window
        client = connect(address)
        n = 0
        while not stop.is_set():
            client.send(b"".join(frame("SEND", {"destination": "/queue/kill.p", "persistent": "true",
                                                 "priority": str((n + i) % 10), **({"receipt": str(n + i)}
                                                                                   if i == 99 else {})},
                                       body(n + i)) for i in range(100)))
            item = client.item(30)
            if not isinstance(item, Frame):
                return
            receipted.append(int(item.headers["receipt-id"]))
            n += 100

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(1.5)
    holder = subscribe(address, "/queue/kill.p", ack="client", **{"activemq.prefetchSize": "10"})
    held = [seq(message) for message in receive(holder, 10)]
    time.sleep(1)
    gateway.kill()
    stop.set()
    sender.join(10)
    last = receipted[-1]
    assert last > 3_000, "too little was sent to page"
    gateway.start(timeout=60)
    got = drain(address, "/queue/kill.p", last + 1000, timeout=2)
    numbers = collections.Counter(seq(message) for message in got)
    assert [n for n in range(last + 1) if n not in numbers] == []
    assert [n for n, times in numbers.items() if times > 1] == []
    assert {seq(message) for message in got if message.headers.get("redelivered") == "true"} == set(held)
    order = [(int(message.headers["priority"]), seq(message)) for message in got]
    assert order == sorted(order, key=lambda item: (-item[0], item[1]))
    assert drain(address, "/queue/kill.np", 1, timeout=1) == []
    durable = subscribe(address, "/topic/kill.durable", "client-id:k\n", **{"activemq.subscriptionName": "s"})
    assert [seq(message) for message in receive(durable, 4000, extra=0.3)] == list(range(4000))


# --- defects: promises found broken --------------------------------------------------------


def test_an_unusable_page_file_is_reported_once_not_per_message(make_gateway: Callable[..., GatewayProcess],
                                                                   tmp_path: Path) -> None:
    pages = tmp_path / "gw0" / "data" / "broker-pages.sqlite"
    pages.mkdir(parents=True)  # a directory where the page file should be: neither deletable nor openable
    (pages / "keep").write_text("x")
    gateway = make_gateway(args=["--set", 'broker.memory_limit="1MB"'])
    flood(gateway.address, "/queue/unpaged", 4000)
    assert [seq(message) for message in drain(gateway.address, "/queue/unpaged", 4000)] == list(range(4000))
    lines = [line for line in gateway.log().splitlines() if "#warn" in line or "#error" in line]
    assert len([line for line in lines if "broker-pages.sqlite" in line]) <= 3, f"{len(lines)} lines, e.g. {lines[-1]}"


def test_drop_topic_a_stalled_subscriber_does_not_make_a_fast_one_lose(paging: tuple[GatewayProcess, int]) -> None:
    gateway, _ = paging
    fast = subscribe(gateway.address, "/topic/attack.drop")
    stalled = subscribe(gateway.address, "/topic/attack.drop", ack="client", **{"activemq.prefetchSize": "1"})
    client = connect(gateway.address)
    for n in range(300):  # one at a time: the fast subscriber's backlog is empty at every SEND
        client.send(frame("SEND", {"destination": "/topic/attack.drop", "receipt": "r"}, body(n)))
        assert client.frame().command == "RECEIPT"
    client.close()
    got = [seq(message) for message in receive(fast, 300, timeout=3)]
    stalled.close()
    fast.close()
    assert got == list(range(300)), f"the fast subscriber got {len(got)} of 300"


def test_block_warns_of_a_held_sender_that_acknowledges_on_the_same_connection(
    paging: tuple[GatewayProcess, int],
) -> None:
    """BLOCK holds the whole connection (STOMP frames are processed in order, as RabbitMQ holds a
    connection): one that also consumes with client acknowledgements cannot acknowledge while
    held, so the gateway names it in a warning and docs/paging.md says to publish and consume on
    separate connections."""
    gateway, _ = paging
    destination = "/queue/attack.blockack"
    client = subscribe(gateway.address, destination, ack="client-individual", **{"activemq.prefetchSize": "5"})
    count = 400
    data = b"".join(frame("SEND", {"destination": destination, "receipt": f"r{n}"}, body(n)) for n in range(count))
    writer = threading.Thread(target=client.send, args=(data,), daemon=True)
    writer.start()
    log = gateway.wait_for_log("embedded broker destination /queue/attack.blockack is full) while it consumes "
                               "with ack:client-individual (subscription s)")
    client.close()
    assert log.count("is full) while it consumes with ack:") == 1
    assert "publish and consume on separate connections" in log
    separate = subscribe(gateway.address, destination)  # (what the docs advise: it drains the queue)
    got = receive(separate, count, timeout=3)
    separate.close()
    assert len(got) >= 5


def test_a_subscriber_leaving_a_full_drop_topic_logs_no_false_memory_limit_warning(
    paging: tuple[GatewayProcess, int],
) -> None:
    gateway, admin = paging
    stalled = subscribe(gateway.address, "/topic/attack.droplog", ack="client", **{"activemq.prefetchSize": "1"})
    flood(gateway.address, "/topic/attack.droplog", 1000)
    assert embedded(admin)["memory"]["used"] < 100_000
    stalled.close()
    gateway.wait_for_log("/topic/attack.droplog reached its max_size 32768 bytes: sends are discarded")
    time.sleep(1)
    assert "/topic/attack.droplog reached its memory limit" not in gateway.log()


@pytest.mark.parametrize("min_free", [0, 8 * 1024 * 1024])
def test_a_page_file_filling_its_disk_keeps_every_receipted_message(tmp_path: Path, small_disk: Path,  # noqa: F811
                                                                   min_free: int) -> None:
    """min_free 0: the disk really fills (SQLite's 'database or disk is full'); else page-outs stop
    at min_free, as the store's writes do."""
    gateway = GatewayProcess(tmp_path / "gateway", args=["--set", 'broker.memory_limit="1MB"',
                                                          "--set", f"broker.min_free={min_free}",
                                                          "--data-dir", str(small_disk)])
    try:
        gateway.start()
        count = 30_000  # about 40 MB of page for a 24 MiB disk
        flood(gateway.address, "/queue/diskfull", count, text=lambda n: f"{n:06}:" + "f" * 1000)
        got = drain(gateway.address, "/queue/diskfull", count, timeout=5)
        assert [seq(message) for message in got] == list(range(count))
        log = gateway.log()
        assert "malformed" not in log and "Traceback" not in log
        assert 1 <= log.count("cannot be paged out") <= 3, log.count("cannot be paged out")
        assert ("min_free keeps" in log) == bool(min_free)
    finally:
        gateway.kill()


def test_matches_arriving_behind_a_deep_non_matching_backlog_are_delivered_promptly(
    make_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = make_gateway(args=["--set", 'broker.memory_limit="1MB"'])  # its own: it is left busy
    flood(gateway.address, "/queue/search", 20_000, {"k": "no"}, text=lambda n: f"{n:06}")
    selective = subscribe(gateway.address, "/queue/search", selector="k = 'yes'")
    sender = connect(gateway.address)
    started = time.monotonic()
    sender.send(b"".join(frame("SEND", {"destination": "/queue/search", "k": "yes"}, f"M{n}") for n in range(40)))
    got: list[bytes] = []
    while len(got) < 40 and time.monotonic() - started < 5:
        item = selective.item(0.5)
        if isinstance(item, Frame):
            got.append(item.body)
    elapsed = time.monotonic() - started
    assert got == [f"M{n}".encode() for n in range(40)], f"{len(got)} of 40 matches in {elapsed:.1f} s"
