"""Scheduled delivery (AMQ_SCHEDULED_DELAY / PERIOD / REPEAT) against the real ActiveMQ 5.17 run
with ``schedulerSupport="true"``: the gateway's embedded broker and ActiveMQ get the same operations
and must show the same outcome (arrival order and counts, each arrival on time ± 1 s, the
``scheduledJobId`` header), across a restart too; and the ``jms`` (JMS 1.1 client: the properties,
typed) and ``stomp://`` (the headers pass) connectors deliver to ActiveMQ on time."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_jms_api import factory_style
from tests.support.activemq import ActiveMQBroker
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client

pytestmark = pytest.mark.activemq

Address = tuple[str, int]
TOLERANCE = 1.0
"""Seconds an arrival may be off its due time (docs/stomp.md)."""
RESTART_DELAY = 20_000
"""ms: long enough for ActiveMQ to be killed and started again before the message is due."""


def arrivals(consumer: Client, count: int, since: float, timeout: float = 30.0) -> list[tuple[bytes, float, bool]]:
    """``(body, seconds since since, has scheduledJobId)`` of the next ``count`` MESSAGEs."""
    got = []
    for _ in range(count):
        frame = consumer.message(timeout)
        got.append((frame.body, time.monotonic() - since, "scheduledJobId" in frame.headers))
    return got


def on_time(got: list[tuple[bytes, float, bool]], due: list[float]) -> list[bool]:
    return [abs(at - when) <= TOLERANCE for (_, at, _), when in zip(got, due, strict=True)]


def observed(got: list[tuple[bytes, float, bool]], due: list[float], quiet: bool) -> dict[str, Any]:
    return {"bodies": [body for body, _, _ in got], "on time": on_time(got, due),
            "job ids": [job for _, _, job in got], "then nothing": quiet,
            "(seconds)": [round(at, 2) for _, at, _ in got]}


def delays(sending: Address, receiving: Address, destination: str, restart: Callable[[], None]) -> dict[str, Any]:
    """Three messages with delays 3 s, 1 s and 2 s come in the order they are due."""
    consumer = Client(receiving)
    consumer.subscribe(destination, "s")
    sender = Client(sending)
    start = time.monotonic()
    for body, delay in (("c", 3000), ("a", 1000), ("b", 2000)):
        sender.send(destination, body, receipt=True, persistent="true", AMQ_SCHEDULED_DELAY=str(delay))
    sender.disconnect()
    got = arrivals(consumer, 3, start)
    quiet = consumer.no_message(1.0)
    consumer.disconnect()
    return observed(got, [1, 2, 3], quiet)


def repeats(sending: Address, receiving: Address, destination: str, restart: Callable[[], None]) -> dict[str, Any]:
    """Delay 1 s, period 1 s, repeat 2: three deliveries, a second apart, then none."""
    consumer = Client(receiving)
    consumer.subscribe(destination, "s")
    sender = Client(sending)
    start = time.monotonic()
    sender.send(destination, "again", receipt=True, persistent="true", AMQ_SCHEDULED_DELAY="1000",
                AMQ_SCHEDULED_PERIOD="1000", AMQ_SCHEDULED_REPEAT="2")
    sender.disconnect()
    got = arrivals(consumer, 3, start)
    quiet = consumer.no_message(1.5)
    consumer.disconnect()
    return observed(got, [1, 2, 3], quiet)


def across_a_restart(sending: Address, receiving: Address, destination: str,
                     restart: Callable[[], None]) -> dict[str, Any]:
    """Two persistent messages due 20 s and 22 s after the SEND; the broker is killed (SIGKILL)
    and started again meanwhile: both come on time after it."""
    sender = Client(sending)
    start = time.monotonic()
    sender.send(destination, "second", receipt=True, persistent="true", AMQ_SCHEDULED_DELAY=str(RESTART_DELAY + 2000))
    sender.send(destination, "first", receipt=True, persistent="true", AMQ_SCHEDULED_DELAY=str(RESTART_DELAY))
    sender.drop()
    restart()
    consumer = Client(receiving)
    consumer.subscribe(destination, "s")
    early = consumer.no_message(max(0.0, RESTART_DELAY / 1000 - TOLERANCE - (time.monotonic() - start)))
    got = arrivals(consumer, 2, start)
    quiet = consumer.no_message(1.0)
    consumer.disconnect()
    return {**observed(got, [RESTART_DELAY / 1000, RESTART_DELAY / 1000 + 2], quiet), "not early": early}


SCENARIOS = {"delays": delays, "repeats": repeats, "across a restart": across_a_restart}
EXPECTED = {
    "delays": {"bodies": [b"a", b"b", b"c"], "on time": [True] * 3, "job ids": [True] * 3, "then nothing": True},
    "repeats": {"bodies": [b"again"] * 3, "on time": [True] * 3, "job ids": [True] * 3, "then nothing": True},
    "across a restart": {"bodies": [b"first", b"second"], "on time": [True] * 2, "job ids": [True] * 2,
                         "then nothing": True, "not early": True},
}


def without_seconds(observation: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in observation.items() if key != "(seconds)"}


@pytest.fixture(scope="module")
def scheduling_activemq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActiveMQBroker]:
    """ActiveMQ with its scheduler on (the session's shared broker runs without, as a stock one)."""
    broker = ActiveMQBroker(tmp_path_factory.mktemp("scheduling-activemq"), scheduler=True,
                            broker_name="jmsgw-scheduler", stomp_no_delay=True).start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture(scope="module")
def embedded_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(Path(tmp_path_factory.mktemp("scheduling-gateway")),
                             args=["--set", 'broker.persistence="sqlite"']).start()
    yield process
    process.kill()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_gateway_and_activemq_schedule_alike(scenario: str, embedded_gateway: GatewayProcess,
                                                 scheduling_activemq: ActiveMQBroker) -> None:
    destination = f"/queue/sched.{uuid.uuid4().hex[:8]}"

    def restart_gateway() -> None:
        embedded_gateway.kill()
        embedded_gateway.start()

    def restart_activemq() -> None:
        scheduling_activemq.kill()
        scheduling_activemq.start()

    ours = SCENARIOS[scenario](embedded_gateway.address, embedded_gateway.address, destination, restart_gateway)
    amq = ("127.0.0.1", scheduling_activemq.stomp_port)
    theirs = SCENARIOS[scenario](amq, amq, destination, restart_activemq)
    assert without_seconds(ours) == without_seconds(theirs) == EXPECTED[scenario], \
        f"gateway {ours} / ActiveMQ {theirs}"


CONNECTORS = {"jms": "/queue/viajms", "stomp": "/queue/viastomp"}


@pytest.fixture(scope="module")
def routed_gateway(scheduling_activemq: ActiveMQBroker,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """``/queue/viajms.*`` goes to the scheduling ActiveMQ through the ``jms`` connector (ActiveMQ's
    JMS 1.1 client), ``/queue/viastomp.*`` through ``stomp://``."""
    config = factory_style(scheduling_activemq) + f"""
[connectors.amqstomp]
uri = "{scheduling_activemq.stomp_uri}"
failure_retry_interval = 200

[[destinations]]
pattern = "{CONNECTORS['jms']}.*"
connector = "amq"

[[destinations]]
pattern = "{CONNECTORS['stomp']}.*"
connector = "amqstomp"
"""
    process = GatewayProcess(Path(tmp_path_factory.mktemp("scheduling-routed")), config).start()
    process.wait_for_log("connected to", timeout=30)
    yield process
    process.kill()


@pytest.mark.parametrize("connector", sorted(CONNECTORS))
@pytest.mark.parametrize("scenario", ["delays", "repeats"])
def test_the_connectors_deliver_at_activemq_on_time(connector: str, scenario: str, routed_gateway: GatewayProcess,
                                                    scheduling_activemq: ActiveMQBroker) -> None:
    """A STOMP client's SEND through the gateway is scheduled by ActiveMQ: a consumer of ActiveMQ
    itself sees it arrive when due."""
    destination = f"{CONNECTORS[connector]}.{uuid.uuid4().hex[:8]}"
    got = SCENARIOS[scenario](routed_gateway.address, ("127.0.0.1", scheduling_activemq.stomp_port), destination,
                              lambda: None)
    assert without_seconds(got) == EXPECTED[scenario], got


def test_the_jms_connector_refuses_an_unreadable_delay(routed_gateway: GatewayProcess,
                                                      scheduling_activemq: ActiveMQBroker) -> None:
    destination = f"{CONNECTORS['jms']}.{uuid.uuid4().hex[:8]}"
    consumer = Client(("127.0.0.1", scheduling_activemq.stomp_port))
    consumer.subscribe(destination, "s")
    sender = Client(routed_gateway.address)
    sender.connection.send(destination, "x", headers={"AMQ_SCHEDULED_DELAY": "soon", "receipt": "r"})
    error = sender.error()
    assert error is not None
    assert "AMQ_SCHEDULED_DELAY must be a whole number of ms, not 'soon'" in (
        error.headers.get("message", "") + error.body.decode()), error
    assert consumer.no_message(1.0), "nothing reached ActiveMQ"
    consumer.disconnect()
