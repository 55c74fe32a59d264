"""A bridge whose source is the ``jms`` connector fills its batches (issue 32, defect 5).

The source session hands the bridge a batch once it holds ``max_batch_size`` messages or
``max_batch_time`` ran out, not as soon as the provider has nothing *at once*: a
backlog moves in full batches (the bridge's batch-size histogram says so), for a
``jms`` target (one local transaction) and a ``stomp://`` one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.test_admin import http
from tests.integration.test_jms_api_bridge import bridge_toml, collect_until, connector_toml, fill, seqs_of, unique
from tests.support.activemq import ActiveMQBroker, activemq  # noqa: F401
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.jms_client import JmsClient
from tests.support.ports import free_port

pytestmark = pytest.mark.activemq


def batch_sizes(admin: int, bridge: str) -> tuple[float, float]:
    """(batches sent, messages in them) of ``bridge`` from /metrics."""
    text = http(admin, "GET", "/metrics")[1]
    counts = re.findall(rf'jmsgateway_bridge_batch_size_count{{bridge="{bridge}"}} ([0-9.e+]+)', text)
    sums = re.findall(rf'jmsgateway_bridge_batch_size_sum{{bridge="{bridge}"}} ([0-9.e+]+)', text)
    assert counts and sums, text
    return float(counts[0]), float(sums[0])


@pytest.mark.parametrize("target", ["jms", "stomp"])
def test_a_jms_source_fills_its_batches(tmp_path: Path, activemq: ActiveMQBroker,  # noqa: F811
                                        target: str) -> None:
    source, destination = unique("fill-src"), unique("fill-dst")
    count = 200
    sent = fill(activemq, source, count)
    admin = free_port()
    target_name = "amq" if target == "jms" else "viastomp"
    config = (connector_toml(activemq)
              + f'\n[connectors.viastomp]\nuri = "{activemq.stomp_uri}"\n'
              + bridge_toml("fill", ("amq", source), (target_name, destination), qos="DUPLICATES_OK",
                            max_batch_size=50, max_batch_time=300)
              + f'[admin]\nlisten = ["tcp:{admin}:interface=127.0.0.1"]\n')
    gateway = GatewayProcess(tmp_path / "gw", config).start()
    received: list = []  # type: ignore[type-arg]
    with stopped_after(gateway):
        with JmsClient(activemq.openwire_url) as jms:
            collect_until(jms, destination, received, count)
        batches, messages = batch_sizes(admin, "fill")
    assert set(seqs_of(received)) == sent
    assert messages == count
    # a backlog of 200 in batches of at most 50: 4 full ones (a few more if the first came early)
    assert batches <= 10, f"{messages:.0f} messages in {batches:.0f} batches"
