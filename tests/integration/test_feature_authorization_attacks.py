"""An attacker with a valid but limited login against the destination features (issue 37 and later)
and the admin endpoint: black-box, a real gateway process, raw STOMP frames and raw HTTP.

Written from the promise (docs/security.md: deny by default, "Authorization judges the resolved
target", what a refused client sees; docs/stomp.md's destination features; docs/admin.md's roles),
not from the code.  eve is the attacker: she may read and write ``/queue/public.*`` and
``/topic/public.*``, read ``/queue/shard.?`` (ten shards ``0``-``9``), use her virtual-topic group
``Consumer.eve``, and is a console viewer.  alice owns ``/queue/secret.*``; root reads everything.
Every attack checks what root then finds (nothing eve may not write got written) or what eve
received (nothing she may not read), not only the ERROR.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from gateway.wire.frame import Frame
from tests.support.authorization import ROOT_GRANT, grant, weak_logins
from tests.support.gateway import REPO, GatewayProcess
from tests.support.ports import free_port
from tests.support.raw_stomp import RawStomp

PASSWORDS = {"root": "r00t!x", "alice": "alice-pw", "eve": "eve-pw", "olga": "olga-pw"}

GRANTS = (
    ROOT_GRANT
    + grant("/queue/public.*", read=["eve", "alice"], write=["eve", "alice"])
    + grant("/topic/public.*", read=["eve", "alice"], write=["eve", "alice"])
    + grant("/queue/shard.?", read=["eve"])
    + grant("/queue/secret.*", read=["alice"], write=["alice"], admin=["alice"])
    + grant("/topic/secret.*", read=["alice"], write=["alice"])
    + grant("/topic/VirtualTopic.news", read=["eve", "alice"], write=["eve", "alice"])
    + grant("/queue/Consumer.eve.*", read=["eve"])
    + grant("/queue/Consumer.alice.*", read=["alice"])
    + grant("/queue/lvq.alice", read=["alice"], write=["alice"])
    + grant("/queue/lvq.eve", read=["eve"], write=["eve"])
    + grant("/queue/olga.*", read=["olga"], write=["olga"], admin=["olga"])
    + grant("/queue/DLQ.olga.*", read=["olga"], write=["olga"], admin=["olga"])
)


def config(admin_port: int) -> str:
    return f"""
[admin]
listen = ["tcp:{admin_port}:interface=127.0.0.1"]
roles = {{ root = "administrator", olga = "operator" }}

[broker.destinations."/queue/lvq.*"]
last_value = true

[transform]
plugin_dirs = ["{REPO / 'plugins'}"]

[transform.options.route]
property = "region"
routes = {{ eu = "/queue/secret.eu" }}

[[transform.chain]]
transformer = "route"
destinations = ["/queue/orders.in"]
direction = "inbound"
""" + GRANTS


class Gateway:
    def __init__(self, process: GatewayProcess, admin_port: int) -> None:
        self.process = process
        self.address = process.address
        self.admin_port = admin_port


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    admin_port = free_port()
    process = GatewayProcess(tmp_path_factory.mktemp("featsec"), config(admin_port),
                             args=weak_logins(**PASSWORDS)).start()
    try:
        yield Gateway(process, admin_port)
    except BaseException:
        print(process.log()[-4000:])
        raise
    finally:
        process.stop()


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def login(gw: Gateway, who: str, version: str = "1.2") -> RawStomp:
    client = RawStomp(gw.address, version=version)
    client.connect(version, extra=f"login:{who}\npasscode:{PASSWORDS[who]}\n")
    return client


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")


def frame(command: str, headers: dict[str, str], body: str = "", *, raw_values: bool = False) -> bytes:
    lines = [command] + [f"{k}:{v if raw_values else escape(v)}" for k, v in headers.items()]
    return ("\n".join(lines) + "\n\n" + body + "\x00").encode()


def answer(client: RawStomp, receipt: str, timeout: float = 10.0) -> Frame:
    """The RECEIPT or ERROR answering ``receipt`` (MESSAGEs before it are kept for :func:`messages`)."""
    deadline = time.monotonic() + timeout
    kept: list[Frame] = []
    try:
        while True:
            got = client.frame(max(0.05, deadline - time.monotonic()))
            unanswered_error = got.command == "ERROR" and "receipt-id" not in got.headers
            if got.command in ("RECEIPT", "ERROR") and (got.headers.get("receipt-id") == receipt or unanswered_error):
                return got
            kept.append(got)
    finally:
        client.pending[:0] = kept


def send(client: RawStomp, destination: str, body: str, *, raw_values: bool = False, **headers: str) -> Frame:
    receipt = unique("r")
    client.send(frame("SEND", {"destination": destination, "receipt": receipt, **headers}, body,
                      raw_values=raw_values))
    return answer(client, receipt)


def subscribe(client: RawStomp, destination: str, sub_id: str = "s", **headers: str) -> Frame:
    receipt = unique("r")
    client.send(frame("SUBSCRIBE", {"destination": destination, "id": sub_id, "receipt": receipt, **headers}))
    return answer(client, receipt)


def messages(client: RawStomp, wait: float) -> list[Frame]:
    """Every MESSAGE that arrives within ``wait`` seconds."""
    deadline = time.monotonic() + wait
    got = [f for f in client.pending if isinstance(f, Frame) and f.command == "MESSAGE"]
    client.pending = [f for f in client.pending if f not in got]
    while time.monotonic() < deadline:
        item = client.item(max(0.01, deadline - time.monotonic()))
        if item is None:
            break
        if isinstance(item, Frame) and item.command == "MESSAGE":
            got.append(item)
    return got


def root_reads(gw: Gateway, destination: str, wait: float = 0.5) -> list[str]:
    """What root finds at ``destination`` (a queue: consumed; a topic: nothing, subscribe first)."""
    root = login(gw, "root")
    assert subscribe(root, destination).command == "RECEIPT"
    bodies = [f.body.decode() for f in messages(root, wait)]
    root.close()
    return bodies


def refused(reply: Frame, permission: str = "") -> bool:
    return reply.command == "ERROR" and permission in reply.headers.get("message", "")


# -- composite destinations -----------------------------------------------------------------


@pytest.mark.parametrize("shape", [
    "{ok},{secret}",
    "{secret},{ok}",
    "{ok},secret.{tag}",              # a part without a prefix is of the kind before it
    " {ok} , {secret} ",               # whitespace around the parts
    "{ok},,{secret}",                  # an empty part
    "{ok},{secret},",                  # a trailing comma
    "{ok},/topic/secret.{tag},{secret}",
    "/temp-queue/x,{secret}",          # a temporary part first (its own destination is always allowed)
    "{ok},/temp-queue/x,{secret}",
])
def test_composite_send_with_a_refused_part_writes_nothing(gw: Gateway, shape: str) -> None:
    tag = unique("c")
    ok, secret = f"/queue/public.{tag}", f"/queue/secret.{tag}"
    destination = shape.format(ok=ok, secret=secret, tag=tag)
    eve = login(gw, "eve")
    reply = send(eve, destination, "from eve")
    assert reply.command == "ERROR", reply
    assert not eve.closed or "not authorized" not in reply.headers.get("message", "")
    eve.close()
    assert root_reads(gw, secret) == []
    assert root_reads(gw, ok) == []  # the whole SEND was refused


def test_composite_send_escaped_in_a_stomp_12_header_is_still_judged_per_part(gw: Gateway) -> None:
    r"""A ``\c`` escape decodes to ``:``; a part with a colon is still a part of its own."""
    tag = unique("e")
    eve = login(gw, "eve")
    reply = send(eve, f"/queue/public.{tag}\\c,/queue/secret.{tag}", "x", raw_values=True)
    assert refused(reply, "write"), reply
    eve.close()
    assert root_reads(gw, f"/queue/secret.{tag}") == []


def test_composite_subscribe_cannot_reach_a_forbidden_queue(gw: Gateway) -> None:
    tag = unique("cs")
    secret = f"/queue/secret.{tag}"
    alice = login(gw, "alice")
    assert send(alice, secret, "alice's").command == "RECEIPT"
    eve = login(gw, "eve")
    for name in (f"/queue/public.{tag},{secret}", f"/temp-queue/x,{secret}"):
        eve = eve if not eve.closed else login(gw, "eve")
        subscribe(eve, name, unique("s"))
        assert messages(eve, 0.3) == []
    eve.close()
    assert root_reads(gw, secret) == ["alice's"]


# -- wildcard subscriptions -----------------------------------------------------------------


def test_wildcard_queue_subscription_matches_only_granted_queues(gw: Gateway) -> None:
    """eve reads ``/queue/shard.?`` (the shards 0-9); ``/queue/shard.*`` would match every shard name."""
    tag = unique("w")
    root = login(gw, "root")
    assert send(root, f"/queue/shard.{tag}", "not a shard").command == "RECEIPT"
    assert send(root, "/queue/shard.7", "shard seven").command == "RECEIPT"
    eve = login(gw, "eve")
    reply = subscribe(eve, "/queue/shard.*")
    got = [f.body.decode() for f in messages(eve, 1.0)] if reply.command == "RECEIPT" else []
    eve.close()
    assert "not a shard" not in got, "eve read a queue no entry grants her through a wildcard"
    assert root_reads(gw, f"/queue/shard.{tag}") == ["not a shard"]
    root_reads(gw, "/queue/shard.7")
    root.close()


@pytest.mark.parametrize("kind", ["queue", "topic"])
def test_wildcard_rest_does_not_reach_the_parent_name(gw: Gateway, kind: str) -> None:
    """``>`` matches zero segments too (as in ActiveMQ): ``/queue/public.>`` receives what is sent to
    ``/queue/public``, which eve's ``/queue/public.*`` does not grant: refused, nothing received."""
    tag = unique("p")
    pattern, parent = f"/{kind}/public.>", f"/{kind}/public"
    eve = login(gw, "eve")
    reply = subscribe(eve, pattern)
    root = login(gw, "root")
    assert send(root, parent, f"parent {tag}").command == "RECEIPT"
    got = [f.body.decode() for f in messages(eve, 1.0)] if reply.command == "RECEIPT" else []
    eve.close()
    root.close()
    assert f"parent {tag}" not in got, f"eve read {parent} through {pattern} with a grant on {parent}.*"
    assert refused(reply, f"not authorized to read {pattern}"), reply
    if kind == "queue":
        assert f"parent {tag}" in root_reads(gw, parent)


def test_wildcard_topic_subscription_on_a_forbidden_topic_is_refused(gw: Gateway) -> None:
    tag = unique("t")
    eve = login(gw, "eve")
    for pattern in ("/topic/>", "/topic/secret.>", "/topic/*", f"/topic/*.{tag}", "/queue/>", "/queue/secret.*"):
        assert refused(subscribe(eve, pattern, unique("s")), "read"), pattern
    alice = login(gw, "alice")
    assert send(alice, f"/topic/secret.{tag}", "s").command == "RECEIPT"
    assert messages(eve, 0.5) == []
    eve.close()
    alice.close()
