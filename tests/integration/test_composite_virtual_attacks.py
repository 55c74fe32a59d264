"""Black-box attacks on composite destinations and virtual topics (docs/stomp.md "Destination features").

Composite: one copy per part; a refused part refuses the whole SEND, nothing is stored; the copies are
stored as one batch, so one RECEIPT means every part has it; inside a transaction they appear together
at COMMIT; a temporary or empty part is an ERROR.  Virtual topics: every consumer queue gets a copy, the
consumers of one group share it (acknowledged, persistent, paged as any queue), a consumer queue exists
from its first use until deleted, across restarts.  A real gateway process (SQLite), stomp.py and raw
sockets that pipeline.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from tests.support.authorization import ROOT_AND_ALICE, ROOT_GRANT, grant
from tests.support.destination_attacks import collect, drain, frame, pipelined, send_frame
from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import Client

Make = Callable[..., GatewayProcess]
PERSISTENT = {"persistent": "true"}


def bodies(client: Client, destination: str, quiet: float = 0.7) -> list[str]:
    return [text for text, _ in drain(client, destination, quiet=quiet)]


# -- composite destinations ------------------------------------------------------------


def test_one_receipt_means_every_part_has_it_across_kill_9(make_gateway: Make) -> None:
    """300 composite SENDs (three queues and a durable topic subscription) pipelined in one write, each with
    a receipt; kill -9 the moment the last RECEIPT is read; after the restart every part holds all 300."""
    gateway = make_gateway()
    durable = Client(gateway.address, headers={"client-id": "c"})
    durable.subscribe("/topic/comp.t", "d", headers={"activemq.subscriptionName": "d"})
    durable.disconnect()
    raw = RawStomp(gateway.address)
    raw.connect()
    raw.send(b"".join(send_frame("/queue/comp.a,comp.b,/topic/comp.t,/queue/comp.c", str(index),
                                 {**PERSISTENT, "receipt": f"r{index}"}) for index in range(300)))
    for index in range(300):
        answer = raw.frame()
        assert (answer.command, answer.headers.get("receipt-id")) == ("RECEIPT", f"r{index}"), answer
    gateway.kill()
    raw.close()
    gateway.start()
    consumer = Client(gateway.address, headers={"client-id": "c"})
    expected = [str(index) for index in range(300)]
    for queue in ("/queue/comp.a", "/queue/comp.b", "/queue/comp.c"):
        assert bodies(consumer, queue) == expected, queue
    consumer.subscribe("/topic/comp.t", "d", headers={"activemq.subscriptionName": "d"})
    assert [body.decode() for body in collect(consumer)] == expected
    consumer.disconnect()


def test_composite_in_a_transaction_appears_together_at_commit_and_not_at_abort(make_gateway: Make) -> None:
    """Composite SENDs in a transaction: nothing before COMMIT, everything at once after; ABORT leaves none;
    a COMMIT then kill -9 keeps them."""
    gateway = make_gateway()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/tx.a", "a")
    producer = Client(gateway.address)
    producer.begin("t1")
    for index in range(5):
        producer.send("/queue/tx.a,tx.b", f"aborted{index}", headers={**PERSISTENT, "transaction": "t1"})
    producer.abort("t1")
    producer.begin("t2")
    for index in range(5):
        producer.send("/queue/tx.a,tx.b", str(index), headers={**PERSISTENT, "transaction": "t2"})
    assert consumer.no_message(0.5), "a transacted composite part was visible before COMMIT"
    producer.commit("t2")
    assert [consumer.message().body for _ in range(5)] == [str(index).encode() for index in range(5)]
    assert consumer.no_message(0.3)
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    assert bodies(consumer, "/queue/tx.b") == [str(index) for index in range(5)]
    assert bodies(consumer, "/queue/tx.a") == []  # (auto-acknowledged before the kill)
    consumer.disconnect()


def test_a_refused_part_stores_nothing(make_gateway: Make) -> None:
    """A part the login may not write, a temporary part or an empty part: ERROR, and no part got a copy
    (also pipelined after good SENDs in one write: those are stored, the refused one not)."""
    gateway = make_gateway(ROOT_GRANT + grant("/queue/open.*", read=["alice"], write=["alice"]),
                           args=ROOT_AND_ALICE)
    for destination in ("/queue/open.a,/queue/secret", "/queue/open.a,/temp-queue/t", "/queue/open.a,",
                        "/queue/open.a,,/queue/open.b"):
        raw = RawStomp(gateway.address)
        raw.connect(extra="login:alice\npasscode:alice-pw\n")
        raw.send(send_frame("/queue/open.a", "good", {**PERSISTENT, "receipt": "g"})
                 + send_frame(destination, "refused", {**PERSISTENT, "receipt": "r"}))
        assert raw.frame().headers.get("receipt-id") == "g"
        answer = raw.frame()
        assert answer.command == "ERROR", (destination, answer)
        raw.close()
    root = Client(gateway.address, login="root", passcode="r00t!x")
    assert bodies(root, "/queue/open.a") == ["good"] * 4
    assert bodies(root, "/queue/open.b") == []
    assert bodies(root, "/queue/secret") == []
    root.disconnect()


def test_a_full_fail_part_refuses_the_whole_send(make_gateway: Make) -> None:
    """A part whose destination is full (full_policy FAIL) refuses the whole composite SEND: the other part
    gets nothing of it (the promise: a refused part refuses the whole SEND, nothing is stored)."""
    gateway = make_gateway("""
[broker.destinations."/queue/full.>"]
max_size = "4KB"
full_policy = "FAIL"
""")
    producer = Client(gateway.address)
    producer.send("/queue/full.x", "y" * 3500, receipt=True, headers=PERSISTENT)
    raw = RawStomp(gateway.address)
    raw.connect()
    raw.send(send_frame("/queue/room.a,/queue/full.x", "z" * 2000, {**PERSISTENT, "receipt": "r"}))
    assert raw.frame().command == "ERROR"
    raw.close()
    assert bodies(producer, "/queue/room.a") == []
    producer.disconnect()


def test_pipelined_composites_with_a_consumer_on_each_part(make_gateway: Make) -> None:
    """1,000 composite SENDs in one write while a consumer reads each part: each gets all, in order."""
    gateway = make_gateway()
    consumers = [Client(gateway.address) for _ in range(2)]
    consumers[0].subscribe("/queue/pipe.a", "a")
    consumers[1].subscribe("/topic/pipe.b", "b")
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/pipe.a,/topic/pipe.b", str(index)) for index in range(1000)], "end")
    for consumer, name in zip(consumers, ("/queue/pipe.a", "/topic/pipe.b"), strict=True):
        got = [consumer.message() for _ in range(1000)]
        assert [int(m.body) for m in got] == list(range(1000))
        assert {m.headers["destination"] for m in got} == {name}
        assert consumer.no_message(0.2)
        consumer.disconnect()
    raw.close()


def test_a_part_named_twice_gets_one_copy(make_gateway: Make) -> None:
    """A queue and a topic each named twice in one composite SEND: one copy each (ActiveMQ 5.17 queued one
    in four runs of five, two in the fifth), also after kill -9."""
    gateway = make_gateway()
    client = Client(gateway.address)
    client.subscribe("/topic/twice", "t")
    client.send("/queue/twice,/queue/twice,/topic/twice,/topic/twice", "x", receipt=True, headers=PERSISTENT)
    assert collect(client, 0.5) == [b"x"]
    gateway.kill()
    gateway.start()
    client = Client(gateway.address)
    assert bodies(client, "/queue/twice") == ["x"]
    client.disconnect()


# -- virtual topics -----------------------------------------------------------------


def test_consumer_queues_survive_kill_9_without_consumers(make_gateway: Make) -> None:
    """Group A's queue made by a SUBSCRIBE (then left), group B's by a SEND to it; kill -9; a persistent
    message to the topic after the restart reaches both; one sent before the kill (receipted) too."""
    gateway = make_gateway()
    client = Client(gateway.address)
    client.subscribe("/queue/Consumer.A.VirtualTopic.k9", "a")
    client.unsubscribe("a")
    client.send("/queue/Consumer.B.VirtualTopic.k9", "direct", receipt=True, headers=PERSISTENT)
    client.send("/topic/VirtualTopic.k9", "before", receipt=True, headers=PERSISTENT)
    client.disconnect()
    gateway.kill()
    gateway.start()
    client = Client(gateway.address)
    client.send("/topic/VirtualTopic.k9", "after", receipt=True, headers=PERSISTENT)
    gateway.kill()
    gateway.start()
    client = Client(gateway.address)
    assert bodies(client, "/queue/Consumer.A.VirtualTopic.k9") == ["before", "after"]
    assert bodies(client, "/queue/Consumer.B.VirtualTopic.k9") == ["direct", "before", "after"]
    client.disconnect()


def test_a_group_subscribing_while_messages_flow_misses_nothing_after_its_first(make_gateway: Make) -> None:
    """A producer sends 1,500 numbered messages to the virtual topic while group B's first consumer
    subscribes midway and a second consumer of group A joins: A (there from the start) gets each number
    once across its consumers, B a gap-free run from its first message to the last."""
    gateway = make_gateway()
    a1 = Client(gateway.address)
    a1.subscribe("/queue/Consumer.A.VirtualTopic.flow", "a")
    producer = Client(gateway.address)
    count = 1500
    started = threading.Event()

    def produce() -> None:
        for index in range(count):
            producer.send("/topic/VirtualTopic.flow", str(index), headers=PERSISTENT, receipt=index % 100 == 99)
            if index == 300:
                started.set()

    thread = threading.Thread(target=produce)
    thread.start()
    assert started.wait(30)
    b = Client(gateway.address)
    b.subscribe("/queue/Consumer.B.VirtualTopic.flow", "b")
    a2 = Client(gateway.address)
    a2.subscribe("/queue/Consumer.A.VirtualTopic.flow", "a")
    thread.join(60)
    time.sleep(0.5)
    got_a = [int(body) for consumer in (a1, a2) for body in collect(consumer)]
    got_b = [int(body) for body in collect(b)]
    assert sorted(got_a) == list(range(count)), Counter(got_a).most_common(3)
    assert got_b and got_b == list(range(got_b[0], count)), got_b[:5]
    for client in (a1, a2, b, producer):
        client.disconnect()


def test_persistent_and_non_persistent_copies_across_a_restart(make_gateway: Make) -> None:
    """Copies in a consumer queue without consumers: the persistent ones survive kill -9, the others do not
    (as for any queue)."""
    gateway = make_gateway()
    client = Client(gateway.address)
    client.subscribe("/queue/Consumer.A.VirtualTopic.mix", "a")
    client.unsubscribe("a")
    for index in range(20):
        client.send("/topic/VirtualTopic.mix", str(index), receipt=True,
                    headers={"persistent": "true" if index % 2 else "false"})
    gateway.kill()
    gateway.start()
    client = Client(gateway.address)
    assert bodies(client, "/queue/Consumer.A.VirtualTopic.mix") == [str(index) for index in range(1, 20, 2)]
    client.disconnect()


def test_a_paged_consumer_queue_keeps_order_and_count(make_gateway: Make) -> None:
    """A consumer queue past its max_size pages; 2,000 messages of 1 KB, one group away, another reading
    slowly (client-individual, prefetch 10): both get all, in order; the away group after kill -9 too."""
    gateway = make_gateway("""
[broker.destinations."/queue/Consumer.*"]
max_size = "64KB"
full_policy = "PAGE"
""")
    reader = Client(gateway.address)
    reader.subscribe("/queue/Consumer.R.VirtualTopic.deep", "r", ack="client-individual",
                     headers={"activemq.prefetchSize": "10"})
    away = Client(gateway.address)
    away.subscribe("/queue/Consumer.W.VirtualTopic.deep", "w")
    away.unsubscribe("w")
    raw = RawStomp(gateway.address)
    raw.connect()
    body = "p" * 1000
    pipelined(raw, [send_frame("/topic/VirtualTopic.deep", f"{index}:{body}", PERSISTENT) for index in range(2000)],
              "end", timeout=60)
    got = []
    for _ in range(2000):
        message = reader.message()
        reader.ack(message, receipt=False)
        got.append(int(message.body.split(b":")[0]))
    assert got == list(range(2000))
    raw.close()
    gateway.kill()
    gateway.start()
    away = Client(gateway.address)
    assert [int(text.split(":")[0]) for text in bodies(away, "/queue/Consumer.W.VirtualTopic.deep")] == \
        list(range(2000))
    away.disconnect()


def test_wildcard_subscription_to_consumer_queues(make_gateway: Make) -> None:
    """A wildcard queue subscription matching group A's consumer queues of two virtual topics gets the copies
    of both under the concrete queue names; group B's queue keeps its own copies."""
    gateway = make_gateway()
    client = Client(gateway.address)
    for name in ("/queue/Consumer.A.VirtualTopic.w.one", "/queue/Consumer.A.VirtualTopic.w.two",
                 "/queue/Consumer.B.VirtualTopic.w.one"):
        client.subscribe(name, "s")
        client.unsubscribe("s")
    wildcard = Client(gateway.address)
    wildcard.subscribe("/queue/Consumer.A.VirtualTopic.w.>", "w")
    client.send("/topic/VirtualTopic.w.one", "1", receipt=True)
    client.send("/topic/VirtualTopic.w.two", "2", receipt=True)
    got = sorted((m.body, m.headers["destination"]) for m in wildcard.messages(2))
    assert got == [(b"1", "/queue/Consumer.A.VirtualTopic.w.one"), (b"2", "/queue/Consumer.A.VirtualTopic.w.two")]
    assert wildcard.no_message(0.3)
    assert bodies(client, "/queue/Consumer.B.VirtualTopic.w.one") == ["1"]
    wildcard.disconnect()
    client.disconnect()


def test_pipelined_subscribe_and_send_in_one_write(make_gateway: Make) -> None:
    """SUBSCRIBE to a new group's queue, 100 SENDs to the topic and DISCONNECT in one write: the queue exists
    from the SUBSCRIBE, so every SEND that follows is in it, delivered to this connection before it left or
    waiting there for the group's next consumer (its consumer starts once the queue is recorded, as a new
    durable subscription's does), each once."""
    gateway = make_gateway()
    raw = RawStomp(gateway.address)
    raw.connect()
    raw.send(frame("SUBSCRIBE", {"destination": "/queue/Consumer.P.VirtualTopic.pipe", "id": "s", "ack": "auto"})
             + b"".join(send_frame("/topic/VirtualTopic.pipe", str(index)) for index in range(100))
             + frame("DISCONNECT", {"receipt": "bye"}))
    delivered = [int(answer.body) for answer in raw.until_closed()  # type: ignore[union-attr]
                 if answer.command == "MESSAGE"]  # type: ignore[union-attr]
    raw.close()
    client = Client(gateway.address)
    waiting = [int(text) for text in bodies(client, "/queue/Consumer.P.VirtualTopic.pipe")]
    client.disconnect()
    assert sorted(delivered + waiting) == list(range(100))
    assert delivered == sorted(delivered) and waiting == sorted(waiting)


def test_kill_9_during_a_pipelined_composite_load_is_all_or_nothing_per_send(make_gateway: Make) -> None:
    """2,000 composite SENDs (three queues) pipelined with receipts; kill -9 once 500 RECEIPTs are in: after
    the restart each SEND is in every part or in none (one batch), and every receipted one is in all; a
    virtual topic's two consumer queues fed the same way hold every receipted message."""
    gateway = make_gateway()
    client = Client(gateway.address)
    for name in ("/queue/Consumer.A.VirtualTopic.load", "/queue/Consumer.B.VirtualTopic.load"):
        client.subscribe(name, "s")
        client.unsubscribe("s")
    client.disconnect()
    raw = RawStomp(gateway.address, timeout=30)
    raw.connect()
    raw.send(b"".join(send_frame("/queue/load.a,load.b,load.c" if index % 2 else "/topic/VirtualTopic.load",
                                 str(index), {**PERSISTENT, "receipt": str(index)}) for index in range(2000)))
    receipted: set[int] = set()
    while len(receipted) < 500:
        answer = raw.frame(timeout=30)
        assert answer.command == "RECEIPT", answer
        receipted.add(int(answer.headers["receipt-id"]))
    gateway.kill()
    raw.close()
    gateway.start()
    client = Client(gateway.address)
    parts = [{int(text) for text in bodies(client, f"/queue/load.{part}")} for part in "abc"]
    assert parts[0] == parts[1] == parts[2], [len(part) for part in parts]
    assert {index for index in receipted if index % 2} <= parts[0]
    for group in "AB":
        stored = {int(text) for text in bodies(client, f"/queue/Consumer.{group}.VirtualTopic.load")}
        assert {index for index in receipted if not index % 2} <= stored, group
    client.disconnect()


def test_a_transacted_composite_with_a_full_part_commits_nothing(make_gateway: Make) -> None:
    """A transaction with composite SENDs, one part full (FAIL): the COMMIT is an ERROR and no part, nor the
    transaction's other SENDs, got anything."""
    gateway = make_gateway("""
[broker.destinations."/queue/full.>"]
max_size = "4KB"
full_policy = "FAIL"
""")
    producer = Client(gateway.address)
    producer.send("/queue/full.tx", "y" * 3500, receipt=True, headers=PERSISTENT)
    raw = RawStomp(gateway.address)
    raw.connect()
    raw.send(frame("BEGIN", {"transaction": "t"})
             + send_frame("/queue/room.other", "alone", {**PERSISTENT, "transaction": "t"})
             + send_frame("/queue/room.b,/queue/full.tx", "z" * 2000, {**PERSISTENT, "transaction": "t"})
             + frame("COMMIT", {"transaction": "t", "receipt": "c"}))
    assert raw.frame().command == "ERROR"
    raw.close()
    assert bodies(producer, "/queue/room.b") == []
    assert bodies(producer, "/queue/room.other") == []
    assert len(bodies(producer, "/queue/full.tx")) == 1
    producer.disconnect()
