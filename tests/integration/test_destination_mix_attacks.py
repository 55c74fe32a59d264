"""Black-box attacks where the destination features meet (docs/stomp.md "Destination features"): virtual
topics' consumer queues that are last-value or exclusive by policy, scheduled and composite SENDs to a
virtual topic, virtual topics in transactions and dead-lettering from a consumer queue, and a standby
taking over such a store (docs/high-availability.md).  A real gateway process (SQLite), stomp.py, raw sockets.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.support.destination_attacks import collect, drain, frame, pipelined, send_frame
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.raw_stomp import RawStomp
from tests.support.standby import accepts, gateway_pair
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

Make = Callable[..., GatewayProcess]
PERSISTENT = {"persistent": "true"}
CONSUMER_LVQ = """
[broker.destinations."/queue/Consumer.L.>"]
last_value = true
"""


def texts(client: Client, destination: str, quiet: float = 0.7) -> list[str]:
    return [text for text, _ in drain(client, destination, quiet=quiet)]


def test_a_last_value_consumer_queue_keeps_one_value_per_key_across_kill_9(make_gateway: Make) -> None:
    """Group L's consumer queue is last-value by policy, group P's is plain: after 30 keyed messages to the
    virtual topic (3 keys) and kill -9, L holds the last of each key, P all 30."""
    gateway = make_gateway(CONSUMER_LVQ)
    client = Client(gateway.address)
    for name in ("/queue/Consumer.L.VirtualTopic.px", "/queue/Consumer.P.VirtualTopic.px"):
        client.subscribe(name, "s")
        client.unsubscribe("s")
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/topic/VirtualTopic.px", str(index),
                               {**PERSISTENT, "_AMQ_LVQ_NAME": f"k{index % 3}", "receipt": f"r{index}"})
                    for index in range(30)], "end")
    raw.close()
    gateway.kill()
    gateway.start()
    client = Client(gateway.address)
    assert sorted(int(text) for text in texts(client, "/queue/Consumer.L.VirtualTopic.px")) == [27, 28, 29]
    assert [int(text) for text in texts(client, "/queue/Consumer.P.VirtualTopic.px")] == list(range(30))
    client.disconnect()


def test_a_scheduled_send_to_a_virtual_topic_reaches_every_consumer_queue_after_kill_9(make_gateway: Make) -> None:
    """A persistent scheduled SEND to a virtual topic, kill -9 before it is due: when due, each group's
    queue (consumers away) gets one copy."""
    gateway = make_gateway()
    client = Client(gateway.address)
    for name in ("/queue/Consumer.A.VirtualTopic.later", "/queue/Consumer.B.VirtualTopic.later"):
        client.subscribe(name, "s")
        client.unsubscribe("s")
    client.send("/topic/VirtualTopic.later", "due", receipt=True, headers={**PERSISTENT, "AMQ_SCHEDULED_DELAY": "1500"})
    gateway.kill()
    gateway.start()
    client = Client(gateway.address)
    client.subscribe("/queue/Consumer.A.VirtualTopic.later", "a")
    client.subscribe("/queue/Consumer.B.VirtualTopic.later", "b")
    got = sorted((m.body, m.headers["destination"]) for m in client.messages(2, timeout=15))
    assert got == [(b"due", "/queue/Consumer.A.VirtualTopic.later"), (b"due", "/queue/Consumer.B.VirtualTopic.later")]
    assert client.no_message(1.0)
    client.disconnect()


def test_a_composite_with_a_virtual_topic_part_is_one_batch(make_gateway: Make) -> None:
    """Composite SENDs to a virtual topic and a queue, pipelined with receipts, kill -9 at the last RECEIPT:
    the consumer queue and the queue each hold all of them."""
    gateway = make_gateway()
    client = Client(gateway.address)
    client.subscribe("/queue/Consumer.A.VirtualTopic.cmp", "s")
    client.unsubscribe("s")
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/topic/VirtualTopic.cmp,/queue/cmp.audit", str(index),
                               {**PERSISTENT, "receipt": f"r{index}"}) for index in range(200)], "end")
    gateway.kill()
    raw.close()
    gateway.start()
    client = Client(gateway.address)
    expected = [str(index) for index in range(200)]
    assert texts(client, "/queue/Consumer.A.VirtualTopic.cmp") == expected
    assert texts(client, "/queue/cmp.audit") == expected
    client.disconnect()


def test_virtual_topic_in_a_transaction(make_gateway: Make) -> None:
    """SENDs to a virtual topic in a transaction: an ABORT leaves no copy, a COMMIT puts all in each group's
    queue at once (none before), and they survive kill -9."""
    gateway = make_gateway()
    watcher = Client(gateway.address)
    watcher.subscribe("/queue/Consumer.W.VirtualTopic.tx", "w", ack="client-individual",
                      headers={"activemq.prefetchSize": "100"})
    client = Client(gateway.address)
    client.subscribe("/queue/Consumer.A.VirtualTopic.tx", "s")
    client.unsubscribe("s")
    client.begin("t1")
    client.send("/topic/VirtualTopic.tx", "aborted", headers={**PERSISTENT, "transaction": "t1"})
    client.abort("t1")
    client.begin("t2")
    for index in range(5):
        client.send("/topic/VirtualTopic.tx", str(index), headers={**PERSISTENT, "transaction": "t2"})
    assert watcher.no_message(0.5)
    client.commit("t2")
    assert [m.body for m in watcher.messages(5)] == [str(index).encode() for index in range(5)]
    gateway.kill()
    gateway.start()
    client = Client(gateway.address)
    assert texts(client, "/queue/Consumer.A.VirtualTopic.tx") == [str(index) for index in range(5)]
    assert texts(client, "/queue/Consumer.W.VirtualTopic.tx") == [str(index) for index in range(5)]
    client.disconnect()


def test_nacked_past_the_limit_from_a_consumer_queue_goes_to_its_dlq(make_gateway: Make) -> None:
    """A copy NACKed past max_redeliveries in group A's queue goes to A's dead-letter queue; group B still
    has its copy."""
    gateway = make_gateway(args=["--set", "broker.max_redeliveries=1"])
    client = Client(gateway.address)
    client.subscribe("/queue/Consumer.B.VirtualTopic.dlq", "s")
    client.unsubscribe("s")
    client.subscribe("/queue/Consumer.A.VirtualTopic.dlq", "a", ack="client-individual")
    client.send("/topic/VirtualTopic.dlq", "poison", receipt=True, headers=PERSISTENT)
    for _ in range(2):
        client.nack(client.message())
    assert client.no_message(0.5)
    client.unsubscribe("a")
    dead = drain(client, "/queue/DLQ.Consumer.A.VirtualTopic.dlq")
    assert [text for text, _ in dead] == ["poison"], dead
    assert texts(client, "/queue/Consumer.B.VirtualTopic.dlq") == ["poison"]
    client.disconnect()


def test_exclusive_by_policy_on_a_consumer_queue(make_gateway: Make) -> None:
    """Group X's queue is exclusive by policy: its first consumer gets every copy, the second none, until
    the first leaves."""
    gateway = make_gateway("""
[broker.destinations."/queue/Consumer.X.>"]
exclusive = true
""")
    first, second = Client(gateway.address), Client(gateway.address)
    first.subscribe("/queue/Consumer.X.VirtualTopic.ex", "s")
    second.subscribe("/queue/Consumer.X.VirtualTopic.ex", "s")
    producer = Client(gateway.address)
    for index in range(20):
        producer.send("/topic/VirtualTopic.ex", str(index), receipt=index == 19)
    assert len(collect(first, 0.5)) == 20 and second.no_message(0.1)
    first.disconnect()
    producer.send("/topic/VirtualTopic.ex", "after", receipt=True)
    assert second.message().body == b"after"
    for client in (second, producer):
        client.disconnect()


def test_a_standby_takes_over_last_values_consumer_queues_and_jobs(tmp_path: Path) -> None:
    """An active gateway holds a last-value queue (values replaced), a virtual topic's consumer queue without
    consumers, and a scheduled job; it is killed; the standby takes over: the last values only, the
    consumer queue still gets copies, the job comes when due."""
    lvq = '\n[broker.destinations."/queue/lvq.>"]\nlast_value = true\n'
    active, _, standby, _ = gateway_pair(tmp_path, extra_config=lvq)
    try:
        raw = RawStomp(active.address)
        raw.connect()
        pipelined(raw, [send_frame("/queue/lvq.ha", str(index),
                                   {**PERSISTENT, "_AMQ_LVQ_NAME": f"k{index % 4}", "receipt": f"r{index}"})
                        for index in range(400)], "lvq")
        raw.close()
        client = Client(active.address)
        client.subscribe("/queue/Consumer.A.VirtualTopic.ha", "s")
        client.unsubscribe("s")
        client.send("/queue/ha.later", "job", receipt=True, headers={**PERSISTENT, "AMQ_SCHEDULED_DELAY": "4000"})
        active.kill()
        wait_until(lambda: accepts(standby.port), 30, "the standby's takeover")
        client = Client(standby.address)
        assert sorted(int(text) for text in texts(client, "/queue/lvq.ha")) == [396, 397, 398, 399]
        client.send("/topic/VirtualTopic.ha", "copy", receipt=True, headers=PERSISTENT)
        assert texts(client, "/queue/Consumer.A.VirtualTopic.ha") == ["copy"]
        client.subscribe("/queue/ha.later", "j")
        assert client.message(timeout=10).body == b"job"
        client.disconnect()
    finally:
        standby.kill()
        active.kill()


def console_post(port: int, action: str, destination: str) -> tuple[int, object]:
    """``POST /console/api/<action>`` ``{"destination": …}`` on an admin endpoint without logins."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/console/api/{action}",
                                     data=json.dumps({"destination": destination}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())["result"]
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def test_console_purge_and_removal_of_deep_recovered_queues_take_everything(make_gateway: Make) -> None:
    """450 persistent messages in a queue and in a virtual topic's consumer queue, kill -9 (recovered lazily,
    read 200 rows at a time): the console's purge drops all 450 and its removal of the consumer queue
    drops all 450 and the queue; after a restart neither message nor consumer queue comes back."""
    admin = free_port()
    gateway = make_gateway(f'[admin]\nlisten = ["tcp:{admin}:interface=127.0.0.1"]\n')
    client = Client(gateway.address)
    client.subscribe("/queue/Consumer.A.VirtualTopic.gone", "s")
    client.unsubscribe("s")
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/deep.purge", str(index), PERSISTENT) for index in range(450)]
              + [send_frame("/topic/VirtualTopic.gone", str(index), PERSISTENT) for index in range(450)], "end")
    raw.close()
    gateway.kill()
    gateway.start()
    wait_for_port(admin, timeout=15)
    assert console_post(admin, "purge", "/queue/deep.purge") == (200, 450)
    assert console_post(admin, "remove", "/queue/Consumer.A.VirtualTopic.gone") == (200, 450)
    gateway.stop()
    gateway.start()
    client = Client(gateway.address)
    client.send("/topic/VirtualTopic.gone", "after", receipt=True, headers=PERSISTENT)
    assert texts(client, "/queue/deep.purge") == []
    assert texts(client, "/queue/Consumer.A.VirtualTopic.gone") == []
    client.disconnect()


def test_a_takeover_in_the_middle_of_a_pipelined_load(tmp_path: Path) -> None:
    """Keyed values to a last-value queue and composite SENDs pipelined with receipts; the active gateway is
    killed once 300 RECEIPTs are in: the standby holds one value per key, not older than the last receipted
    one, and each composite SEND in both parts or in neither, every receipted one in both."""
    lvq = '\n[broker.destinations."/queue/lvq.>"]\nlast_value = true\n'
    active, _, standby, _ = gateway_pair(tmp_path, extra_config=lvq)
    try:
        raw = RawStomp(active.address, timeout=30)
        raw.connect()
        frames = []
        for index in range(1500):
            if index % 2:
                frames.append(send_frame("/queue/lvq.mid", str(index),
                                         {**PERSISTENT, "_AMQ_LVQ_NAME": f"k{index % 5}", "receipt": str(index)}))
            else:
                frames.append(send_frame("/queue/mid.a,/queue/mid.b", str(index),
                                         {**PERSISTENT, "receipt": str(index)}))
        raw.send(b"".join(frames))
        receipted: set[int] = set()
        while len(receipted) < 300:
            answer = raw.frame(timeout=30)
            assert answer.command == "RECEIPT", answer
            receipted.add(int(answer.headers["receipt-id"]))
        active.kill()
        raw.close()
        wait_until(lambda: accepts(standby.port), 30, "the standby's takeover")
        client = Client(standby.address)
        values = drain(client, "/queue/lvq.mid")
        by_key: dict[str, list[int]] = {}
        for text, headers in values:
            by_key.setdefault(headers["_AMQ_LVQ_NAME"], []).append(int(text))
        assert all(len(kept) == 1 for kept in by_key.values()), by_key
        for index in receipted:
            if index % 2:
                assert by_key[f"k{index % 5}"][0] >= index, (index, by_key)
        parts = [{int(text) for text in texts(client, queue)} for queue in ("/queue/mid.a", "/queue/mid.b")]
        assert parts[0] == parts[1]
        assert {index for index in receipted if not index % 2} <= parts[0]
        client.disconnect()
    finally:
        standby.kill()
        active.kill()


def test_a_receipted_subscribe_makes_a_consumer_queue_that_survives_kill_9_at_once(make_gateway: Make) -> None:
    """A SUBSCRIBE to a new group's queue, kill -9 the moment its RECEIPT is read (no other write after it),
    three times: after each restart the group's queue exists, without consumers, and gets the topic's next
    message (its RECEIPT came before its record was stored: the group could miss everything)."""
    gateway = make_gateway()
    for group in range(3):
        raw = RawStomp(gateway.address)
        raw.connect()
        raw.send(frame("SUBSCRIBE", {"destination": f"/queue/Consumer.G{group}.VirtualTopic.k9", "id": "s",
                                     "receipt": "sub"}))
        assert raw.frame().headers.get("receipt-id") == "sub"
        gateway.kill()
        raw.close()
        gateway.start()
        client = Client(gateway.address)
        client.send("/topic/VirtualTopic.k9", f"after{group}", receipt=True, headers=PERSISTENT)
        for earlier in range(group + 1):
            got = texts(client, f"/queue/Consumer.G{earlier}.VirtualTopic.k9", quiet=0.3)
            assert got == [f"after{group}"], (earlier, group, got)
        client.disconnect()
