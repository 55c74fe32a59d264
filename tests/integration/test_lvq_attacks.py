"""Black-box attacks on last-value queues (``_AMQ_LVQ_NAME``, docs/stomp.md "Destination features").

The promise: a new message with a key replaces the waiting message with that key (taken out of the queue
and the store unseen), also one that was paged out or recovered after a restart; a message out for
acknowledgement is not replaced (if it comes back unacknowledged it sits beside the newer one); messages
without the header queue as usual.  Each test runs a real gateway process (SQLite persistence) and real
stomp.py clients or a raw socket that pipelines.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from tests.support.destination_attacks import collect, drain, frame, pipelined, rss_kib, send_frame
from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import Client

LVQ = """
[broker.destinations."/queue/lvq.>"]
last_value = true
"""

PAGED_LVQ = """
[broker.destinations."/queue/lvq.>"]
last_value = true
max_size = "64KB"
full_policy = "PAGE"
"""

Make = Callable[..., GatewayProcess]


def key(name: str) -> dict[str, str]:
    return {"_AMQ_LVQ_NAME": name, "persistent": "true"}


def test_replacement_of_a_paged_out_value(make_gateway: Make) -> None:
    """Values paged out (the queue is past its max_size) are replaced by newer ones: one per key, the last."""
    gateway = make_gateway(PAGED_LVQ)
    producer = Client(gateway.address)
    body = "x" * 2000
    for round_ in range(3):
        for index in range(60):  # 60 keys of ~2.5 KB: the tail pages (64 KB max_size)
            producer.send("/queue/lvq.paged", f"{round_}:{index}:{body}", headers=key(f"k{index}"),
                          receipt=index == 59)
    got = drain(producer, "/queue/lvq.paged")
    keys = Counter(headers["_AMQ_LVQ_NAME"] for _, headers in got)
    assert keys == Counter({f"k{index}": 1 for index in range(60)}), keys
    assert {text.split(":")[0] for text, _ in got} == {"2"}, "an older value was delivered"
    producer.disconnect()


@pytest.mark.parametrize("crash", [True, False], ids=["kill-9", "stop"])
def test_replacement_after_a_restart_stays_replaced(make_gateway: Make, crash: bool) -> None:
    """A value recovered after a restart is replaced, and the replaced value stays gone after the next
    restart (its removal from the store is durable)."""
    gateway = make_gateway(LVQ)
    producer = Client(gateway.address)
    for index in range(20):
        producer.send("/queue/lvq.restart", f"old{index}", headers=key(f"k{index % 5}"), receipt=True)
    gateway.kill() if crash else gateway.stop()
    gateway.start()
    producer = Client(gateway.address)
    for index in range(5):
        producer.send("/queue/lvq.restart", f"new{index}", headers=key(f"k{index}"), receipt=True)
    producer.disconnect()
    gateway.kill() if crash else gateway.stop()
    gateway.start()
    consumer = Client(gateway.address)
    got = sorted(text for text, _ in drain(consumer, "/queue/lvq.restart"))
    assert got == [f"new{index}" for index in range(5)]
    consumer.disconnect()


def test_value_out_for_ack_then_nacked_sits_beside_the_newer(make_gateway: Make) -> None:
    """v1 is out for acknowledgement, v2 arrives (not replacing v1), v1 is NACKed: both are delivered; then
    v3 replaces the waiting ones and is delivered last; nothing is lost that the promise keeps."""
    gateway = make_gateway(LVQ)
    producer = Client(gateway.address)
    consumer = Client(gateway.address)
    producer.send("/queue/lvq.race", "v1", headers=key("k"), receipt=True)
    consumer.subscribe("/queue/lvq.race", "s", ack="client-individual", headers={"activemq.prefetchSize": "1"})
    first = consumer.message()
    assert first.body == b"v1"
    producer.send("/queue/lvq.race", "v2", headers=key("k"), receipt=True)
    assert consumer.no_message(0.3), "prefetch 1 was exceeded"
    consumer.nack(first)
    seen = []
    for _ in range(2):
        message = consumer.message()
        seen.append(message.body)
        consumer.ack(message)
    assert sorted(seen) == [b"v1", b"v2"], seen
    assert consumer.no_message(0.5)
    consumer.disconnect()
    producer.disconnect()


def test_value_out_for_ack_then_acked_leaves_only_the_newer(make_gateway: Make) -> None:
    """v1 out for ack, v2 and v3 arrive (v3 replaces v2), v1 is ACKed: only v3 remains, also after kill -9."""
    gateway = make_gateway(LVQ)
    producer = Client(gateway.address)
    consumer = Client(gateway.address)
    producer.send("/queue/lvq.ack", "v1", headers=key("k"), receipt=True)
    consumer.subscribe("/queue/lvq.ack", "s", ack="client-individual", headers={"activemq.prefetchSize": "1"})
    first = consumer.message()
    producer.send("/queue/lvq.ack", "v2", headers=key("k"), receipt=True)
    producer.send("/queue/lvq.ack", "v3", headers=key("k"), receipt=True)
    consumer.ack(first)
    second = consumer.message()
    assert second.body == b"v3"
    assert consumer.no_message(0.3)
    gateway.kill()  # v3 unacknowledged: it comes back, alone
    gateway.start()
    consumer = Client(gateway.address)
    assert [text for text, _ in drain(consumer, "/queue/lvq.ack")] == ["v3"]
    consumer.disconnect()


def test_disconnect_returns_the_old_value_beside_a_newer_one(make_gateway: Make) -> None:
    """A consumer holding v1 unacknowledged leaves while v2 waits: v1 comes back redelivered beside v2."""
    gateway = make_gateway(LVQ)
    producer = Client(gateway.address)
    consumer = Client(gateway.address)
    producer.send("/queue/lvq.leave", "v1", headers=key("k"), receipt=True)
    consumer.subscribe("/queue/lvq.leave", "s", ack="client", headers={"activemq.prefetchSize": "1"})
    assert consumer.message().body == b"v1"
    producer.send("/queue/lvq.leave", "v2", headers=key("k"), receipt=True)
    consumer.drop()
    got = drain(producer, "/queue/lvq.leave")
    assert sorted(text for text, _ in got) == ["v1", "v2"], got
    assert [headers.get("redelivered") for text, headers in got if text == "v1"] == ["true"]
    producer.disconnect()


def test_aborted_transaction_replaces_nothing(make_gateway: Make) -> None:
    """A keyed SEND inside a transaction that aborts leaves the waiting value; one that commits replaces it;
    two values of one key in one COMMIT leave the later."""
    gateway = make_gateway(LVQ)
    producer = Client(gateway.address)
    producer.send("/queue/lvq.tx", "v1", headers=key("k"), receipt=True)
    producer.begin("t1")
    producer.send("/queue/lvq.tx", "aborted", headers={**key("k"), "transaction": "t1"})
    producer.abort("t1")
    assert [text for text, _ in drain(producer, "/queue/lvq.tx", quiet=0.5)] == ["v1"]
    producer.send("/queue/lvq.tx", "v2", headers=key("k"), receipt=True)
    producer.begin("t2")
    producer.send("/queue/lvq.tx", "v3", headers={**key("k"), "transaction": "t2"})
    producer.send("/queue/lvq.tx", "v4", headers={**key("k"), "transaction": "t2"})
    producer.commit("t2")
    gateway.kill()
    gateway.start()
    producer = Client(gateway.address)
    assert [text for text, _ in drain(producer, "/queue/lvq.tx")] == ["v4"]
    producer.disconnect()


def test_composite_destination_replaces_in_each_last_value_part(make_gateway: Make) -> None:
    """A keyed composite SEND replaces the value in each last-value part; a plain queue part keeps all."""
    gateway = make_gateway(LVQ)
    producer = Client(gateway.address)
    for value in ("v1", "v2", "v3"):
        producer.send("/queue/lvq.c1,lvq.c2,plain.c3", value, headers=key("k"), receipt=True)
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    assert [text for text, _ in drain(consumer, "/queue/lvq.c1", quiet=0.5)] == ["v3"]
    assert [text for text, _ in drain(consumer, "/queue/lvq.c2", quiet=0.5)] == ["v3"]
    assert [text for text, _ in drain(consumer, "/queue/plain.c3", quiet=0.5)] == ["v1", "v2", "v3"]
    consumer.disconnect()


def test_pipelined_sends_of_one_key_in_one_write(make_gateway: Make) -> None:
    """500 keyed SENDs (10 keys) in one write, each with a receipt, then kill -9: one value per key, the
    last, and every receipt came."""
    gateway = make_gateway(LVQ)
    raw = RawStomp(gateway.address)
    raw.connect()
    frames = [send_frame("/queue/lvq.pipe", f"{index}", {**key(f"k{index % 10}"), "receipt": f"r{index}"})
              for index in range(500)]
    seen = pipelined(raw, frames, "end")
    assert seen.count("RECEIPT") == 501
    raw.close()
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    got = drain(consumer, "/queue/lvq.pipe")
    assert sorted(int(text) for text, _ in got) == list(range(490, 500)), got
    consumer.disconnect()


def test_pipelined_keyed_and_unkeyed_with_a_live_consumer(make_gateway: Make) -> None:
    """A consumer (client-individual, prefetch 5, acking as it goes) reads while 1,000 SENDs come in one
    write (half keyed to 3 keys, half unkeyed): every unkeyed message arrives once; each key's last value
    arrives; no key delivers an older value after a newer one."""
    gateway = make_gateway(LVQ)
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/lvq.live", "s", ack="client-individual", headers={"activemq.prefetchSize": "5"})
    raw = RawStomp(gateway.address)
    raw.connect()
    frames = []
    for index in range(1000):
        headers = key(f"k{index % 3}") if index % 2 else {"persistent": "true"}
        frames.append(send_frame("/queue/lvq.live", str(index), headers))
    pipelined(raw, frames, "end")
    plain: list[int] = []
    last: dict[str, int] = {}
    while True:
        try:
            message = consumer.message(timeout=1.5)
        except AssertionError:
            break
        consumer.ack(message, receipt=False)
        number = int(message.body)
        name = message.headers.get("_AMQ_LVQ_NAME")
        if name is None:
            plain.append(number)
        else:
            assert number > last.get(name, -1), f"{name}: {number} after {last.get(name)}"
            last[name] = number
    assert sorted(plain) == list(range(0, 1000, 2))
    assert last == {"k0": 999, "k1": 997, "k2": 995}, last
    raw.close()
    consumer.disconnect()


def test_durable_topic_subscription_keeps_its_own_last_values(make_gateway: Make) -> None:
    """On a last-value topic, a durable subscription that is away keeps one value per key, the last, across
    kill -9 right after 500 pipelined receipted values of 2 keys (a recovered backlog deeper than one read);
    so does one that was there and had not acknowledged them."""
    gateway = make_gateway("""
[broker.destinations."/topic/lvq.>"]
last_value = true
""")
    away = Client(gateway.address, headers={"client-id": "away"})
    away.subscribe("/topic/lvq.prices", "d", headers={"activemq.subscriptionName": "away"})
    away.disconnect()
    live = Client(gateway.address, headers={"client-id": "live"})
    live.subscribe("/topic/lvq.prices", "d", ack="client-individual", headers={"activemq.subscriptionName": "live"})
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/topic/lvq.prices", str(value), {**key(f"k{value % 2}"), "receipt": f"r{value}"})
                    for value in range(500)], "end")
    gateway.kill()
    raw.close()
    gateway.start()
    away = Client(gateway.address, headers={"client-id": "away"})
    away.subscribe("/topic/lvq.prices", "d", headers={"activemq.subscriptionName": "away"})
    assert sorted(collect(away, 1.0)) == [b"498", b"499"]
    away.disconnect()
    live = Client(gateway.address, headers={"client-id": "live"})
    live.subscribe("/topic/lvq.prices", "d", ack="client-individual", headers={"activemq.subscriptionName": "live"})
    assert sorted(collect(live, 1.0)) == [b"498", b"499"], "the live subscription kept older values"
    live.disconnect()


def test_receipted_send_then_replacement_raced_by_kill(make_gateway: Make) -> None:
    """A value receipted, then a pipelined burst of replacements without receipts, then kill -9 at once:
    after the restart the key holds exactly one value (the receipted one or a later one), never none and
    never two."""
    gateway = make_gateway(LVQ)
    raw = RawStomp(gateway.address)
    raw.connect()
    raw.send(send_frame("/queue/lvq.crash", "0", {**key("k"), "receipt": "first"}))
    assert raw.frame().headers.get("receipt-id") == "first"
    raw.send(b"".join(send_frame("/queue/lvq.crash", str(index), key("k")) for index in range(1, 300))
             + frame("DISCONNECT", {}))
    gateway.kill()
    raw.close()
    gateway.start()
    consumer = Client(gateway.address)
    got = drain(consumer, "/queue/lvq.crash")
    assert len(got) == 1, got
    consumer.disconnect()


def test_distinct_keys_consumed_leave_no_memory_behind(make_gateway: Make) -> None:
    """120,000 messages with distinct keys (a key per order, say), each consumed at once: the gateway's
    resident memory grows by less than the key index would take if it kept them (about 220 bytes a key:
    26 MB; it kept every key ever sent, for ever)."""
    gateway = make_gateway(LVQ)
    assert gateway.process is not None
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/lvq.keys", "s")
    raw = RawStomp(gateway.address, timeout=60)
    raw.connect()

    def batch(start: int) -> None:
        pipelined(raw, [send_frame("/queue/lvq.keys", "v", {"_AMQ_LVQ_NAME": f"order-{index:040d}"})
                        for index in range(start, start + 20_000)], f"b{start}", timeout=60)
        assert len(collect(consumer, 0.3)) == 20_000

    batch(0)  # (the gateway's own first growth)
    before = rss_kib(gateway.process.pid)
    for start in range(20_000, 140_000, 20_000):
        batch(start)
    grown = rss_kib(gateway.process.pid) - before
    assert grown < 10 * 1024, f"resident memory grew by {grown} KiB for 120,000 consumed keys"
    raw.close()
    consumer.disconnect()


def test_values_racing_a_consumer_that_acks_and_nacks_keep_each_keys_last(make_gateway: Make) -> None:
    """600 keyed values (3 keys) pipelined while a consumer (client-individual, prefetch 2) ACKs or NACKs
    each delivery (a fixed pseudo-random choice, 30 % NACK): every key's last value is acknowledged once,
    no message is acknowledged twice, and after kill -9 nothing of the queue is left."""
    choose = random.Random(37)
    gateway = make_gateway(LVQ, args=["--set", "broker.max_redeliveries=1000"])
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/lvq.racing", "s", ack="client-individual", headers={"activemq.prefetchSize": "2"})
    raw = RawStomp(gateway.address)
    raw.connect()
    raw.send(b"".join(send_frame("/queue/lvq.racing", str(index), key(f"k{index % 3}")) for index in range(600))
             + frame("BEGIN", {"transaction": "x", "receipt": "sent"}))
    acked: list[int] = []
    while True:
        try:
            message = consumer.message(timeout=2.0)
        except AssertionError:
            break
        if choose.random() < 0.3:
            consumer.nack(message, receipt=False)
        else:
            consumer.ack(message, receipt=False)
            acked.append(int(message.body))
    assert raw.frame().headers.get("receipt-id") == "sent"
    assert len(acked) == len(set(acked)), "a message was acknowledged twice"
    assert {597, 598, 599} <= set(acked), sorted(acked)[-10:]
    raw.close()
    consumer.disconnect()
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    assert drain(consumer, "/queue/lvq.racing") == []
    consumer.disconnect()
