"""One limited login trying to deny service to the others through the destination features:
a scheduled job repeating every millisecond, thousands of waiting scheduled jobs, a connection's
subscription cap, and many wildcard patterns.  Black-box: a real gateway process per test
(the attacks leave state behind), raw STOMP frames.

eve may read and write ``/queue/eve.*`` and ``/topic/eve.*`` only; alice's ``/queue/alice.*`` is
the service that must go on.  "Goes on" is measured as alice's round trip (a SEND and its
RECEIPT, then the MESSAGE at her subscriber) while the attack runs.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.test_feature_authorization_attacks import (
    answer,
    frame,
    messages,
    send,
    subscribe,
    unique,
)
from tests.support.authorization import ROOT_GRANT, grant, weak_logins
from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp

PASSWORDS = {"root": "r00t!x", "alice": "alice-pw", "eve": "eve-pw"}
GRANTS = (ROOT_GRANT + grant("/queue/eve.*", read=["eve"], write=["eve"])
          + grant("/topic/eve.*", read=["eve"], write=["eve"])
          + grant("/queue/alice.*", read=["alice"], write=["alice"]))


@pytest.fixture
def gateway(make_gateway: Callable[..., GatewayProcess]) -> GatewayProcess:
    return make_gateway(GRANTS, args=weak_logins(**PASSWORDS))


def login(gateway: GatewayProcess, who: str) -> RawStomp:
    client = RawStomp(gateway.address)
    client.connect(extra=f"login:{who}\npasscode:{PASSWORDS[who]}\n")
    return client


def round_trips(gateway: GatewayProcess, count: int) -> list[float]:
    """alice's SEND-to-MESSAGE times, one at a time."""
    queue = f"/queue/alice.{unique('rt')}"
    consumer, producer = login(gateway, "alice"), login(gateway, "alice")
    assert subscribe(consumer, queue).command == "RECEIPT"
    times = []
    for i in range(count):
        start = time.monotonic()
        assert send(producer, queue, f"ping {i}").command == "RECEIPT"
        got = messages(consumer, 0.0) or [consumer.frame(10.0)]
        assert got[0].command == "MESSAGE", got
        times.append(time.monotonic() - start)
    consumer.close()
    producer.close()
    return times


def rss_kb(gateway: GatewayProcess) -> int:
    assert gateway.process is not None
    status = Path(f"/proc/{gateway.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def test_a_job_repeating_every_millisecond_does_not_starve_other_logins(gateway: GatewayProcess) -> None:
    """The most repeats, every 1 ms, into eve's own queue: her queue grows, alice is still served."""
    before = statistics.median(round_trips(gateway, 20))
    eve = login(gateway, "eve")
    reply = send(eve, "/queue/eve.flood", "x" * 100, AMQ_SCHEDULED_PERIOD="1", AMQ_SCHEDULED_REPEAT=str(2**31 - 1),
                 persistent="true")
    assert reply.command == "RECEIPT", reply
    time.sleep(2.0)
    during = round_trips(gateway, 20)
    assert subscribe(eve, "/queue/eve.flood").command == "RECEIPT"
    flooded = len(messages(eve, 1.0))
    eve.close()
    print(f"eve's queue took {flooded} occurrences in a second")
    assert flooded > 100, "the attack did not run: the job was not repeated"
    print(f"alice round trip median {before * 1000:.1f} ms before, {statistics.median(during) * 1000:.1f} ms during, "
          f"max {max(during) * 1000:.1f} ms")
    assert statistics.median(during) < max(0.25, 10 * before), (before, during)
    assert max(during) < 2.0, during


def test_thousands_of_waiting_jobs_hold_no_bodies_in_memory(gateway: GatewayProcess) -> None:
    """docs/stomp.md: with SQLite persistence waiting jobs are on disk, "memory holds one timer and
    no job bodies": 2,000 jobs of 20 KB (40 MB) an hour away."""
    eve = login(gateway, "eve")
    body = "j" * 20_000
    warm = send(eve, "/queue/eve.later", body, AMQ_SCHEDULED_DELAY="3600000")
    assert warm.command == "RECEIPT", warm
    start_kb = rss_kb(gateway)
    last = ""
    for start in range(0, 2000, 200):  # pipelined in batches: 200 SENDs, then their RECEIPTs
        batch = b"".join(frame("SEND", {"destination": "/queue/eve.later", "AMQ_SCHEDULED_DELAY": "3600000",
                                        "receipt": (last := f"j{i}")}, body) for i in range(start, start + 200))
        eve.send(batch)
        assert answer(eve, last, timeout=30.0).command == "RECEIPT"
    grown_mb = (rss_kb(gateway) - start_kb) / 1024
    print(f"RSS grew {grown_mb:.1f} MB for 40 MB of waiting jobs")
    eve.close()
    assert grown_mb < 20, f"the gateway grew {grown_mb:.0f} MB holding 40 MB of waiting jobs"
    assert max(round_trips(gateway, 5)) < 2.0


def test_a_connection_past_its_subscription_cap_gets_a_clear_error(gateway: GatewayProcess) -> None:
    """``[stomp] max_subscriptions`` (1000) with wildcard patterns: the 1001st is an ERROR naming the cap."""
    eve = login(gateway, "eve")
    batch = b"".join(frame("SUBSCRIBE", {"destination": f"/topic/eve.*.p{i}", "id": f"s{i}"}) for i in range(1000))
    eve.send(batch)
    reply = subscribe(eve, "/topic/eve.*.last", "s-last")
    assert reply.command == "ERROR" and reply.headers.get("message") == "too many subscriptions", reply
    assert "1000" in reply.body.decode()
    eve.close()


def test_many_wildcard_patterns_do_not_starve_other_publishers(gateway: GatewayProcess) -> None:
    """Five connections of eve's with 1,000 wildcard topic patterns each (5,000): alice's SENDs to
    her own queues are still served (a queue SEND matches no topic pattern), and eve's own topics
    are what gets slower."""
    before = statistics.median(round_trips(gateway, 20))
    clients = []
    for c in range(5):
        eve = login(gateway, "eve")
        batch = b"".join(frame("SUBSCRIBE", {"destination": f"/topic/eve.*.c{c}p{i}", "id": f"s{i}"})
                         for i in range(999))
        eve.send(batch)
        assert subscribe(eve, f"/topic/eve.>.c{c}", "last").command == "RECEIPT"
        clients.append(eve)
    during = round_trips(gateway, 20)
    for client in clients:
        client.close()
    print(f"alice round trip median {before * 1000:.1f} ms before, {statistics.median(during) * 1000:.1f} ms during, "
          f"max {max(during) * 1000:.1f} ms")
    assert statistics.median(during) < max(0.25, 10 * before), (before, during)


def test_a_revoked_write_does_not_stop_a_job_already_accepted(gateway: GatewayProcess) -> None:
    """docs/operations.md: a SIGHUP's new ``[[authorization]]`` judges "the next SEND, SUBSCRIBE or
    admin action"; docs/security.md says what that leaves: a scheduled job eve made while she held
    ``write`` is still delivered after her grant is gone (as a live subscription keeps receiving),
    until its repeats end.  Her next SEND is refused at once."""
    eve = login(gateway, "eve")
    reply = send(eve, "/queue/eve.jobs", "tick", AMQ_SCHEDULED_DELAY="1500", AMQ_SCHEDULED_PERIOD="200",
                 AMQ_SCHEDULED_REPEAT="4")
    assert reply.command == "RECEIPT", reply
    text = gateway.config_path.read_text().replace('write = ["eve"]', 'write = ["root"]')
    gateway.config_path.write_text(text)
    assert gateway.process is not None
    gateway.process.send_signal(signal.SIGHUP)
    gateway.wait_for_log("reloaded")
    refused_now = send(eve, "/queue/eve.jobs", "after the revoke")
    assert refused_now.command == "ERROR" and "not authorized to write" in refused_now.headers["message"]
    eve.close()
    root = login(gateway, "root")
    assert subscribe(root, "/queue/eve.jobs").command == "RECEIPT"
    delivered = [f.body.decode() for f in messages(root, 3.5)]
    root.close()
    assert delivered == ["tick"] * 5, delivered
