"""The bridge fault matrix (issue 25): source x target (embedded, ActiveMQ over STOMP,
Kafka) x QoS x fault, each run bridging hundreds of messages through the real gateway
process and counting exactly (tests/integration/bridge_fault_run.py says how).

The whole matrix is a long run: ``pytest -m fault_matrix tests/integration/test_bridge_faults.py``
(deselected by default).  A sample, one case per fault, runs with the normal suite.
Cases a fault does not apply to are not generated (``applies`` says why).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bridge_fault_run import FAULTS, QOS_MODES, SIDES, Brokers, FaultRun, applies, check
from tests.support.activemq import ActiveMQBroker, activemq, fresh_activemq
from tests.support.kafka import kafka_bootstrap, proxied_kafka

__all__ = ["activemq", "fresh_activemq", "kafka_bootstrap", "proxied_kafka"]

SAMPLE = {
    ("embedded", "kafka", "ONCE_AND_ONLY_ONCE", "kill"),
    ("amq", "embedded", "AT_MOST_ONCE", "cut-source"),
    ("amq", "embedded", "ONCE_AND_ONLY_ONCE", "cut-source"),
    ("embedded", "kafka", "ONCE_AND_ONLY_ONCE", "refused"),
    ("kafka", "embedded", "DUPLICATES_OK", "transformer-reject"),
    ("kafka", "kafka", "DUPLICATES_OK", "routed"),
    ("kafka", "embedded", "ONCE_AND_ONLY_ONCE", "recreate"),
    ("kafka", "embedded", "ONCE_AND_ONLY_ONCE", "rebalance"),
}
"""The cases of the normal suite: one per fault that the issue found broken, and the crash."""


def cases() -> Iterator[object]:
    for source in SIDES:
        for target in SIDES:
            for qos in QOS_MODES:
                for fault in FAULTS:
                    if applies(source, target, fault) is not None:
                        continue
                    marks = [] if (source, target, qos, fault) in SAMPLE else [pytest.mark.fault_matrix]
                    if "amq" in (source, target):
                        marks.append(pytest.mark.activemq)
                    if "kafka" in (source, target):
                        marks.append(pytest.mark.kafka)
                    yield pytest.param(source, target, qos, fault, marks=marks,
                                       id=f"{source}-{target}-{qos}-{fault}")


@pytest.fixture
def brokers(request: pytest.FixtureRequest) -> Brokers:
    """The brokers a case needs, from the existing fixtures (ActiveMQ of its own to restart,
    a proxied Tansu of its own to cut)."""
    source, target, fault = (request.node.callspec.params[key] for key in ("source", "target", "fault"))
    found = Brokers()
    if "amq" in (source, target):
        fixture = "fresh_activemq" if fault == "broker-restart" else "activemq"
        broker: ActiveMQBroker = request.getfixturevalue(fixture)
        found.activemq = broker
    if "kafka" in (source, target):
        cut = (fault == "cut-source" and source == "kafka") or (fault == "cut-target" and target == "kafka")
        if cut:
            found.proxied_kafka = request.getfixturevalue("proxied_kafka")
        else:
            found.kafka = request.getfixturevalue("kafka_bootstrap")
    return found


@pytest.mark.parametrize(("source", "target", "qos", "fault"), list(cases()))
def test_bridge_keeps_its_promise(tmp_path: Path, brokers: Brokers, source: str, target: str, qos: str,
                                  fault: str) -> None:
    run = FaultRun(tmp_path, source, target, qos, fault, brokers, batch=100 if qos == "ONCE_AND_ONLY_ONCE" else 10)
    check(run.run(), qos, fault)
