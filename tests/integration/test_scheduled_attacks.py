"""Black-box attacks on scheduled delivery (``AMQ_SCHEDULED_*``, docs/stomp.md "Destination features").

The promise: the message reaches its destination DELAY ms later, then REPEAT more times every PERIOD ms;
with SQLite the RECEIPT comes once the job is on disk, jobs survive kill -9 and come on time after it
(± 1 s); memory holds one timer and no job bodies; at least once (a crash may repeat an occurrence, same
id); a temporary destination that is gone drops it; CRON, negative or non-numeric values and a repeat
without a period are an ERROR; in a transaction the job is made at COMMIT.  A real gateway process,
stomp.py clients and raw sockets that pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from stomp.utils import Frame as StompPyFrame

from tests.support.destination_attacks import collect, drain, pipelined, rss_kib, send_frame
from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import Client

Make = Callable[..., GatewayProcess]
PERSISTENT = {"persistent": "true"}


def test_kill_9_before_the_due_time_delivers_on_time_not_before(make_gateway: Make) -> None:
    """A job due in 4 s, kill -9 after 1 s, restart: it comes after 4 s (never before), within 1.5 s of it,
    once."""
    gateway = make_gateway()
    producer = Client(gateway.address)
    sent = time.monotonic()
    producer.send("/queue/sched.k9", "later", receipt=True, headers={**PERSISTENT, "AMQ_SCHEDULED_DELAY": "4000"})
    time.sleep(1.0)
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.k9", "s")
    message = consumer.message(timeout=10)
    arrived = time.monotonic() - sent
    assert 4.0 <= arrived <= 5.5, arrived
    assert message.body == b"later" and "AMQ_SCHEDULED_DELAY" not in message.headers
    assert consumer.no_message(1.0)
    consumer.disconnect()


def test_due_while_down_comes_once_after_the_restart(make_gateway: Make) -> None:
    """Jobs due while the gateway is dead (kill -9 right after their RECEIPTs, down past their time): each
    comes once, soon after the restart."""
    gateway = make_gateway()
    raw = RawStomp(gateway.address)
    raw.connect()
    pipelined(raw, [send_frame("/queue/sched.down", str(index), {**PERSISTENT, "AMQ_SCHEDULED_DELAY": "500",
                                                                 "receipt": f"r{index}"}) for index in range(50)],
              "end")
    gateway.kill()
    raw.close()
    time.sleep(1.0)
    gateway.start()
    consumer = Client(gateway.address)
    assert sorted(int(text) for text, _ in drain(consumer, "/queue/sched.down", quiet=1.5)) == list(range(50))
    consumer.disconnect()


def test_repeats_across_a_kill_9_each_occurrence_at_least_once_nothing_else(make_gateway: Make) -> None:
    """A job of 5 occurrences 700 ms apart, kill -9 after the second arrived: after the restart the rest
    come; the ids seen are exactly the job's five (a repeat of one is allowed: at least once)."""
    gateway = make_gateway()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.rep", "s")
    producer = Client(gateway.address)
    producer.send("/queue/sched.rep", "tick", receipt=True, headers={
        **PERSISTENT, "AMQ_SCHEDULED_DELAY": "300", "AMQ_SCHEDULED_PERIOD": "700", "AMQ_SCHEDULED_REPEAT": "4"})
    first = [consumer.message(timeout=5) for _ in range(2)]
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.rep", "s")
    rest = [consumer.message(timeout=5) for _ in range(3)]
    rest += [m for m in iter(lambda: None if consumer.no_message(1.5) else consumer.message(), None)]
    ids = [m.headers["message-id"] for m in first + rest]
    base = ids[0]
    assert set(ids) == {base} | {f"{base}:{n}" for n in range(1, 5)}, ids
    assert len({m.headers["scheduledJobId"] for m in first + rest}) == 1
    consumer.disconnect()


@pytest.mark.parametrize(("headers", "why"), [
    ({"AMQ_SCHEDULED_DELAY": "-1"}, "negative"),
    ({"AMQ_SCHEDULED_DELAY": "soon"}, "whole number"),
    ({"AMQ_SCHEDULED_DELAY": "1_000"}, "whole number"),
    ({"AMQ_SCHEDULED_DELAY": "\u0663"}, "whole number"),
    ({"AMQ_SCHEDULED_DELAY": str(2**63)}, "at most"),
    ({"AMQ_SCHEDULED_DELAY": "1" + "0" * 40}, "at most"),
    ({"AMQ_SCHEDULED_DELAY": str(2**63 - 1)}, "would be due after"),
    ({"AMQ_SCHEDULED_DELAY": "10", "AMQ_SCHEDULED_PERIOD": str(2**63 - 1), "AMQ_SCHEDULED_REPEAT": "1"},
     "would be due after"),
    ({"AMQ_SCHEDULED_PERIOD": "1", "AMQ_SCHEDULED_REPEAT": str(2**63)}, "at most"),
    ({"AMQ_SCHEDULED_PERIOD": "0", "AMQ_SCHEDULED_REPEAT": "3"}, "PERIOD above 0"),
    ({"AMQ_SCHEDULED_CRON": "* * * * *"}, "not supported"),
], ids=["negative", "word", "underscore", "arabic-indic", "past-a-long", "huge", "due-overflows",
        "last-repeat-overflows", "repeat-overflows", "period-0", "cron"])
def test_bad_values_are_an_error_that_says_why_and_store_nothing(make_gateway: Make, headers: dict[str, str],
                                                                why: str) -> None:
    """Each bad schedule is an ERROR naming the problem (not an internal error), nothing is delivered, and
    the gateway serves the next client.  (Before 2026-11-29 a value past a 64-bit integer failed the SEND as
    an internal error, ``1_000`` and other scripts' digits were numbers, and a period whose second due time
    overflowed was accepted, its first occurrence then delivered again every second for ever: the job could
    not advance.)"""
    gateway = make_gateway()
    raw = RawStomp(gateway.address)
    raw.connect()
    raw.send(send_frame("/queue/sched.bad", "bad", {**PERSISTENT, **headers, "receipt": "r"}))
    answer = raw.frame()
    assert answer.command == "ERROR", answer
    assert why in answer.body.decode() + answer.headers.get("message", ""), answer
    assert "internal error" not in answer.headers.get("message", "")
    raw.close()
    client = Client(gateway.address)
    assert drain(client, "/queue/sched.bad", quiet=0.5) == []
    client.disconnect()
    assert "unexpected error" not in gateway.log()


def test_a_tiny_period_does_not_starve_other_clients(make_gateway: Make) -> None:
    """A job repeating every 1 ms 2,000 times (and another every 2 ms): every occurrence arrives, once, in
    order, and meanwhile another client's SEND is receipted promptly."""
    gateway = make_gateway()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.flood", "s")
    producer = Client(gateway.address)
    producer.send("/queue/sched.flood", "a", receipt=True, headers={
        "AMQ_SCHEDULED_DELAY": "100", "AMQ_SCHEDULED_PERIOD": "1", "AMQ_SCHEDULED_REPEAT": "1999"})
    producer.send("/queue/sched.flood", "b", receipt=True, headers={
        "AMQ_SCHEDULED_DELAY": "100", "AMQ_SCHEDULED_PERIOD": "2", "AMQ_SCHEDULED_REPEAT": "999"})
    time.sleep(0.5)
    other = Client(gateway.address)
    started = time.monotonic()
    other.send("/queue/sched.other", "x", receipt=True)
    assert time.monotonic() - started < 2.0
    got: list[StompPyFrame] = []
    deadline = time.monotonic() + 60
    while len(got) < 3000 and time.monotonic() < deadline:
        got.append(consumer.message(timeout=10))
    assert consumer.no_message(0.5)
    ids = [m.headers["message-id"] for m in got]
    assert len(set(ids)) == 3000
    for body in (b"a", b"b"):
        numbers = [int(i.rsplit(":", 1)[1]) if i.count(":") > 1 else 0
                   for m, i in zip(got, ids, strict=True) if m.body == body]
        assert numbers == sorted(numbers)
    for client in (consumer, producer, other):
        client.disconnect()


def test_due_together_into_a_paging_queue_all_arrive_in_order(make_gateway: Make) -> None:
    """600 jobs of 2 KB due at once into a queue past its max_size (it pages): all arrive, in the order the
    jobs were made."""
    gateway = make_gateway("""
[broker.destinations."/queue/sched.page"]
max_size = "64KB"
full_policy = "PAGE"
""")
    raw = RawStomp(gateway.address)
    raw.connect()
    body = "s" * 2000
    pipelined(raw, [send_frame("/queue/sched.page", f"{index}:{body}",
                               {**PERSISTENT, "AMQ_SCHEDULED_DELAY": "800"}) for index in range(600)], "end")
    raw.close()
    time.sleep(2.0)
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.page", "s", ack="client-individual", headers={"activemq.prefetchSize": "20"})
    got = []
    for _ in range(600):
        message = consumer.message()
        consumer.ack(message, receipt=False)
        got.append(int(message.body.split(b":")[0]))
    assert got == list(range(600))
    consumer.disconnect()


def test_a_temp_queue_whose_owner_left_drops_its_job_and_the_rest_go_on(make_gateway: Make) -> None:
    """Jobs to the owner's temporary queue and to a plain queue; the owner leaves; the temporary ones are
    dropped (a warning), the plain one comes, and the gateway keeps serving."""
    gateway = make_gateway()
    owner = Client(gateway.address)
    owner.subscribe("/temp-queue/mine", "t")
    owner.send("/temp-queue/mine", "gone", receipt=True, headers={"AMQ_SCHEDULED_DELAY": "600"})
    owner.send("/queue/sched.after", "kept", receipt=True, headers={**PERSISTENT, "AMQ_SCHEDULED_DELAY": "900"})
    owner.disconnect()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.after", "s")
    assert consumer.message(timeout=5).body == b"kept"
    gateway.wait_for_log("dropped")
    consumer.send("/queue/sched.after", "still", receipt=True)
    assert consumer.message().body == b"still"
    consumer.disconnect()


def test_a_transaction_makes_the_job_at_commit_and_abort_makes_none(make_gateway: Make) -> None:
    """A scheduled SEND in an aborted transaction never comes; in a committed one it comes DELAY after the
    COMMIT, not after the SEND."""
    gateway = make_gateway()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.tx", "s")
    producer = Client(gateway.address)
    producer.begin("a")
    producer.send("/queue/sched.tx", "aborted", headers={"AMQ_SCHEDULED_DELAY": "200", "transaction": "a"})
    producer.abort("a")
    producer.begin("c")
    producer.send("/queue/sched.tx", "committed", headers={"AMQ_SCHEDULED_DELAY": "1000", "transaction": "c"})
    time.sleep(1.2)
    committed = time.monotonic()
    producer.commit("c")
    message = consumer.message(timeout=5)
    assert message.body == b"committed" and time.monotonic() - committed >= 0.95
    assert consumer.no_message(0.7)
    consumer.disconnect()


def test_composite_scheduled_send_reaches_every_part_when_due(make_gateway: Make) -> None:
    """A scheduled SEND to a composite destination: each part gets it once, when due."""
    gateway = make_gateway()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.c1", "a")
    consumer.subscribe("/queue/sched.c2", "b")
    producer = Client(gateway.address)
    producer.send("/queue/sched.c1,sched.c2", "both", receipt=True, headers={"AMQ_SCHEDULED_DELAY": "500"})
    assert consumer.no_message(0.3)
    got = sorted(m.headers["destination"] for m in consumer.messages(2, timeout=5))
    assert got == ["/queue/sched.c1", "/queue/sched.c2"]
    assert consumer.no_message(0.5)
    consumer.disconnect()


def test_many_jobs_keep_their_bodies_out_of_memory(make_gateway: Make) -> None:
    """15,000 persistent jobs of 4 KB (60 MB of bodies) due in an hour, pipelined: the gateway's resident
    memory grows by well under the bodies' size (memory holds one timer, no job bodies)."""
    gateway = make_gateway()
    assert gateway.process is not None
    raw = RawStomp(gateway.address, timeout=60)
    raw.connect()
    body = "j" * 4096
    before = rss_kib(gateway.process.pid)
    for start in range(0, 15000, 1500):
        pipelined(raw, [send_frame("/queue/sched.mem", body, {**PERSISTENT, "AMQ_SCHEDULED_DELAY": "3600000"})
                        for _ in range(start, start + 1500)], f"batch{start}", timeout=60)
    grown = rss_kib(gateway.process.pid) - before
    assert grown < 25 * 1024, f"resident memory grew by {grown} KiB for 60 MB of job bodies"
    raw.close()
    consumer = Client(gateway.address)
    assert collect(consumer, 0.3) == []
    consumer.disconnect()


def test_more_than_a_window_due_together_come_in_the_order_made(make_gateway: Make) -> None:
    """2,500 jobs (two and a half windows of 1,000) with one delay, pipelined, due together: every one
    arrives once, in the order the jobs were made."""
    gateway = make_gateway()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.window", "s")
    raw = RawStomp(gateway.address, timeout=30)
    raw.connect()
    pipelined(raw, [send_frame("/queue/sched.window", str(index), {**PERSISTENT, "AMQ_SCHEDULED_DELAY": "1000"})
                    for index in range(2500)], "end")
    raw.close()
    got = [int(body) for body in collect(consumer, 2.0)]
    assert got == list(range(2500)), (len(got), got[:5])
    consumer.disconnect()


def test_a_job_for_a_remote_temp_queue_whose_owner_left_is_dropped(make_gateway: Make) -> None:
    """A requester's temporary queue reached through its reply-to (``/remote-temp-queue/…``): a job for it
    comes while the owner is there; one due after the owner left is dropped (a warning), not retried for
    ever, and a later job elsewhere still comes."""
    gateway = make_gateway()
    owner = Client(gateway.address)
    owner.subscribe("/temp-queue/replies", "r")
    owner.send("/queue/sched.requests", "ask", receipt=True, headers={"reply-to": "/temp-queue/replies"})
    worker = Client(gateway.address)
    worker.subscribe("/queue/sched.requests", "w")
    reply_to = worker.message().headers["reply-to"]
    assert reply_to.startswith("/remote-temp-queue/"), reply_to
    worker.send(reply_to, "soon", receipt=True, headers={"AMQ_SCHEDULED_DELAY": "300"})
    worker.send(reply_to, "too late", receipt=True, headers={"AMQ_SCHEDULED_DELAY": "1500"})
    worker.send("/queue/sched.after2", "kept", receipt=True, headers={"AMQ_SCHEDULED_DELAY": "2500"})
    assert owner.message(timeout=5).body == b"soon"
    owner.disconnect()
    worker.subscribe("/queue/sched.after2", "a")
    assert worker.message(timeout=5).body == b"kept"
    gateway.wait_for_log("dropped")
    assert gateway.log().count("refused for now") == 0, "the gone temporary queue was retried"
    worker.disconnect()


def test_keyed_jobs_into_a_last_value_queue_leave_the_last(make_gateway: Make) -> None:
    """Scheduled keyed messages to a last-value queue, due one after another while nobody consumes, kill -9
    after all are due: one message of the key remains, the last due."""
    gateway = make_gateway('\n[broker.destinations."/queue/lvq.>"]\nlast_value = true\n')
    producer = Client(gateway.address)
    for index in range(5):
        producer.send("/queue/lvq.sched", str(index), receipt=True, headers={
            **PERSISTENT, "_AMQ_LVQ_NAME": "k", "AMQ_SCHEDULED_DELAY": str(300 + 100 * index)})
    time.sleep(3.0)  # (the last is due 0.7 s after its SEND: a margin for a loaded host)
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    assert [text for text, _ in drain(consumer, "/queue/lvq.sched")] == ["4"]
    consumer.disconnect()


def test_an_occurrence_refused_by_a_full_destination_is_tried_again_until_it_fits(make_gateway: Make) -> None:
    """Jobs due into a queue that is full (full_policy FAIL): refused for now, tried again every second, and
    delivered once room is made, each once; none dropped."""
    gateway = make_gateway("""
[broker.destinations."/queue/sched.full"]
max_size = "4KB"
full_policy = "FAIL"
""")
    producer = Client(gateway.address)
    producer.send("/queue/sched.full", "f" * 3500, receipt=True, headers=PERSISTENT)
    for index in range(3):
        producer.send("/queue/sched.full", f"job{index}", receipt=True,
                      headers={**PERSISTENT, "AMQ_SCHEDULED_DELAY": "300"})
    gateway.wait_for_log("refused for now")
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.full", "s")
    got = [body.decode() for body in collect(consumer, 3.0)]
    assert got[0] == "f" * 3500 and sorted(got[1:]) == ["job0", "job1", "job2"], got
    consumer.disconnect()
    producer.disconnect()


def test_a_non_persistent_job_across_kill_9(make_gateway: Make) -> None:
    """A receipted non-persistent scheduled SEND, kill -9 before it is due: the job is on disk (the RECEIPT
    came once it was, whatever the message's persistence), so it comes after the restart, once."""
    gateway = make_gateway()
    producer = Client(gateway.address)
    producer.send("/queue/sched.np", "np", receipt=True, headers={"persistent": "false", "AMQ_SCHEDULED_DELAY": "1500"})
    gateway.kill()
    gateway.start()
    consumer = Client(gateway.address)
    consumer.subscribe("/queue/sched.np", "s")
    assert collect(consumer, 3.0) == [b"np"]
    consumer.disconnect()


def test_scheduled_sends_past_max_scheduled_size_get_an_error_and_others_go_on(make_gateway: Make) -> None:
    """The defect: nothing bounded what waits in the schedule; one client sending 1 MB bodies with a year's
    delay filled the disk (SQLite) or the memory (persistence = "memory") for everyone.  Now past
    ``[broker] max_scheduled_size`` the scheduled SEND gets ERROR "destination full" naming the setting,
    nothing is stored, and plain SENDs and what was scheduled before go on."""
    gateway = make_gateway(args=["--set", "broker.max_scheduled_size=1MB"])
    body = "x" * 200_000
    year = {**PERSISTENT, "AMQ_SCHEDULED_DELAY": str(365 * 24 * 3600 * 1000)}
    raw = RawStomp(gateway.address)
    raw.connect()
    refused = None
    for index in range(8):
        raw.send(send_frame("/queue/sched.full", body, {**year, "receipt": f"r{index}"}))
        reply = raw.frame()
        if reply.command == "ERROR":
            refused = (index, reply)
            break
        assert reply.command == "RECEIPT", reply
    assert refused is not None, "8 scheduled SENDs of 200 KB passed a 1 MB max_scheduled_size"
    index, error = refused
    assert index == 5, f"refused at the {index + 1}th SEND"  # (5 of 200 KB stored fit in 1 MiB, the 6th does not)
    assert error.headers["message"] == "destination full", error
    assert "max_scheduled_size" in error.body.decode() and "/queue/sched.full" in error.body.decode()
    other = Client(gateway.address)
    other.subscribe("/queue/sched.plain", "p")
    other.subscribe("/queue/sched.soon", "s")
    other.send("/queue/sched.plain", "now", receipt=True)
    other.send("/queue/sched.soon", "small", receipt=True, headers={"AMQ_SCHEDULED_DELAY": "200"})
    assert sorted(collect(other)) == [b"now", b"small"], "a plain SEND and a small scheduled one still go"
    other.disconnect()
