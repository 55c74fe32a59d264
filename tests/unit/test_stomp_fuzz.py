"""The project's own STOMP fuzzer (tests/support/stomp_fuzz.py) against the server protocol, in
process: about 10^5 generated frames (mutated valid ones, malformed ones, CONNECT pipelined or
awaited, random write splits) through :class:`StompServerProtocol` on StringTransports and the
embedded broker.  No malformed frame is accepted, every complete stream ends with the connection
closed, and a bystander connection is served throughout.  bench/bench_fuzz.py runs the same
generator for as long as one likes, against a gateway process."""

from __future__ import annotations

import os
import random
import uuid

from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from gateway.broker.broker import EmbeddedBroker
from gateway.errors import StompProtocolError
from gateway.message.convert import message_to_frame
from gateway.stomp.protocol import StompServerFactory
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame
from tests.support.stomp_fuzz import Case, judge, make_case
from tests.unit.test_session import Peer, connect, make_factory

FRAMES = int(os.environ.get("JMSGATEWAY_FUZZ_FRAMES", "100000"))
SEED = int(os.environ.get("JMSGATEWAY_FUZZ_SEED", "20261125"))


def run_case(factory: StompServerFactory, clock: Clock, broker: EmbeddedBroker, case: Case,
             rng: random.Random) -> list[str]:
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    if not case.pipelined:
        protocol.dataReceived(case.connect)
    for chunk in case.writes(rng):
        protocol.dataReceived(chunk)
        clock.advance(0)  # input beyond one slice is handled on later reactor turns
    closed = transport.disconnecting
    items = FrameDecoder(version=case.version).frames(transport.value())
    replies: list[Frame] = []
    for item in items:
        if isinstance(item, StompProtocolError):
            return [f"the server wrote an unreadable frame: {item}"]
        replies.append(item)
    protocol.connectionLost(Failure(ConnectionDone()))
    if not replies or replies[0].command != "CONNECTED":
        return [f"no CONNECTED: {replies[:2]}"]
    stored = [message_to_frame(message, "s", None) for message in broker.queues[case.destination].messages()] \
        if case.destination in broker.queues else []
    messages = []
    for frame in stored:  # as a 1.2 subscriber reads it
        (message,) = FrameDecoder(version="1.2").feed(encode_frame(frame, "1.2"))
        assert isinstance(message, Frame)
        messages.append(message)
    if case.destination in broker.queues:
        broker.delete_destination(case.destination)
    return judge(case, replies[1:], closed, messages)


def test_fuzzed_streams_are_refused_or_handled_as_the_spec_says(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = make_factory(clock, broker)
    bystander = Peer(factory)
    connect(bystander)
    bystander.send("SUBSCRIBE", {"id": "b", "destination": "/queue/bystander"})
    rng = random.Random(SEED)
    frames = cases = 0
    problems: list[tuple[int, Case, list[str]]] = []
    while frames < FRAMES:
        case = make_case(rng, f"/queue/fz-{uuid.UUID(int=rng.getrandbits(128)).hex}", rng.randint(1, 12))
        found = run_case(factory, clock, broker, case, rng)
        if found:
            problems.append((cases, case, found))
        frames += case.frames + 2  # (with CONNECT and DISCONNECT)
        cases += 1
        if cases % 500 == 0:  # the bystander is served all along
            bystander.send("SEND", {"destination": "/queue/bystander", "receipt": f"b{cases}"}, b"still here")
            replies = bystander.received()
            assert sorted(f.command for f in replies) == ["MESSAGE", "RECEIPT"], replies
            assert [f.body for f in replies if f.command == "MESSAGE"] == [b"still here"]
    assert not problems, "\n".join(
        f"case {index} (STOMP {case.version}, pipelined={case.pipelined}): {found}\n  stream: {case.stream!r}"
        for index, case, found in problems[:5]
    )
    assert frames >= FRAMES and cases > FRAMES // 10
    assert len(factory.connections) == 1  # only the bystander is left
