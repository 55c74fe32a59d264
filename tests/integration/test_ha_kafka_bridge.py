"""A standby pair with a Kafka consumer (issue 35 #1): a ONCE_AND_ONLY_ONCE ``[[bridges]]`` entry from a
Kafka topic (4 partitions, on Tansu) to an embedded queue runs on the active gateway only; the standby
starts no connector, so it is no member of the bridge's consumer group and its bridge is ``stopped``.
SIGKILL of the active gateway while the bridge moves records; the standby takes over, opens its Kafka
consumer, goes on from the committed offsets and checks what it had in doubt.  Counted at the target
by the records' ``seq``: every record arrived, none twice.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.integration.test_admin import http
from tests.integration.test_bridge_gateway import Tally, drain
from tests.integration.test_bridge_kafka import bridge_toml, kafka_connector_toml
from tests.integration.test_ha_standby import metrics
from tests.support.kafka import create_topics, kafka_bootstrap, produce
from tests.support.standby import accepts, gateway_pair
from tests.support.waiting import wait_until

__all__ = ["kafka_bootstrap"]

COUNT = 3000


def moved(admin: int) -> float:
    """Messages the gateway's embedded broker took (the bridge's deliveries to its target)."""
    return metrics(admin).get(("jmsgateway_broker_enqueued_total", ()), 0.0)


def bridge_states(admin: int) -> list[str]:
    return [bridge["state"] for bridge in http(admin, "GET", "/status")[1]["bridges"]]


def test_a_kafka_bridge_runs_on_the_active_only_and_goes_on_after_a_takeover(tmp_path: Path,
                                                                             kafka_bootstrap: str) -> None:
    topic = f"ha-bridge-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, topic, partitions=4)
    tally = Tally()
    config = kafka_connector_toml(kafka_bootstrap) + bridge_toml(
        "k2e", ("kafka", f"/queue/{topic}"), ("embedded", "/queue/ha.k2e"), qos="ONCE_AND_ONLY_ONCE",
        max_batch_size=20, max_batch_time=20, failure_retry_interval=200)
    active, active_admin, standby, standby_admin = gateway_pair(tmp_path, extra_config=config)
    try:
        wait_until(lambda: bridge_states(active_admin) == ["running"], 30, "the active gateway's bridge running")
        assert bridge_states(standby_admin) == ["stopped"]
        assert "kafka connector kafka connected" not in standby.log(), "a standby started its Kafka connector"
        records = [{"value": f"body {i}".encode(), "key": str(i).encode(), "headers": [("jms.seq", f"k-{i}".encode())]}
                   for i in range(COUNT)]
        produce(kafka_bootstrap, topic, records)
        tally.receipted.update(f"k-{i}" for i in range(COUNT))
        wait_until(lambda: moved(active_admin) >= 200, 60, "the bridge moving records")
        assert active.process is not None
        active.process.kill()
        active.process.wait(15)
        wait_until(lambda: accepts(standby.port), 60, "the standby's takeover")
        assert "kafka connector kafka connected" in standby.log()
        wait_until(lambda: bridge_states(standby_admin) == ["running"], 30, "the bridge running after the takeover")
        drain(standby, "/queue/ha.k2e", tally, tally.receipted)
        after = moved(standby_admin)
        assert after > 0, "the new active gateway's bridge moved nothing: the kill was not mid-stream"
    except BaseException:
        print(active.log()[-3000:], standby.log()[-3000:])
        raise
    finally:
        active.kill()
        standby.kill()
    print(f"\nkafka -> embedded ONCE_AND_ONLY_ONCE across a takeover: {tally.summary()}; {after:.0f} moved "
          "after the takeover")
    assert not tally.lost, f"lost {sorted(tally.lost)[:10]} ({tally.summary()})"
    assert not tally.duplicated, f"duplicated {list(tally.duplicated.items())[:5]} ({tally.summary()})"
