"""Issue 32 (defect 5): bridges with a ``jms`` (JMS API) source against ``stomp://`` ones, same ActiveMQ.

One ActiveMQ (KahaDB).  For each case a backlog of ``COUNT`` persistent texts is put on the
source queue (JMS transactions of 100), then a gateway starts with that one bridge
(``max_batch_size`` 100, ``max_batch_time`` 100 ms) and the bridge's forwarded counter is
read from /metrics: the rate runs from its first forwarded message to its last.

* **stomp:// -> stomp://** (the reference);
* **jms -> jms** (one provider: the batch is forwarded in the source session's transaction);
* **jms -> stomp://**.

Under DUPLICATES_OK and ONCE_AND_ONLY_ONCE.  The aim: jms-source bridges >= 0.8 x the stomp:// one.

Run: ``.venv/bin/python -m bench.bench_jms_bridges [COUNT]`` (default 5000)
"""

from __future__ import annotations

import re
import signal
import sys
import time
import uuid

from bench.bench_jms_api import gateway_config
from bench.common import activemq_server, gateway_server, host_state, report
from tests.integration.test_admin import http
from tests.support.jms_client import JmsClient
from tests.support.ports import free_port

BATCH = 100
BATCH_TIME = 100
CASES = {"stomp:// -> stomp://": ("viastomp", "viastomp"), "jms -> jms": ("viajms", "viajms"),
         "jms -> stomp://": ("viajms", "viastomp")}


def forwarded(admin: int) -> int:
    text = http(admin, "GET", "/metrics")[1]
    found = re.search(r'jmsgateway_bridge_forwarded_total\{bridge="bench"\} ([0-9.e+]+)', text)
    return int(float(found.group(1))) if found else 0


def bridge_rate(broker_stomp: str, openwire: str, source: str, target: str, qos: str, count: int) -> float:
    """Messages per second the bridge moved a backlog of ``count`` at."""
    name = uuid.uuid4().hex[:8]
    source_queue, target_queue = f"/queue/jmsapi.bench.{name}.src", f"/queue/jmsapi.bench.{name}.dst"
    with JmsClient(openwire) as jms:
        jms.send_texts_in_transactions(source_queue, [(f"body {index:06d}", {}) for index in range(count)])
    admin = free_port()
    config = gateway_config(broker_stomp, openwire) + f"""
[admin]
listen = ["tcp:{admin}:interface=127.0.0.1"]

[[bridges]]
name = "bench"
qos = "{qos}"
max_batch_size = {BATCH}
max_batch_time = {BATCH_TIME}
source = {{ connector = "{source}", destination = "{source_queue}" }}
target = {{ connector = "{target}", destination = "{target_queue}" }}
"""
    with gateway_server(config) as gateway:
        gateway.wait_for_log("admin endpoint", 60)
        deadline = time.monotonic() + 600
        first = None
        while True:
            done = forwarded(admin)
            now = time.perf_counter()
            if done > 0 and first is None:
                first = (now, done)
            if done >= count or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert first is not None, "nothing forwarded"
        with JmsClient(openwire) as jms:
            jms.drain(target_queue)
    return (done - first[1]) / max(now - first[0], 1e-6)


def main(count: int = 5000) -> None:
    print(host_state())
    with activemq_server(kahadb=True) as broker:
        for qos in ("DUPLICATES_OK", "ONCE_AND_ONLY_ONCE"):
            rates = {case: bridge_rate(broker.stomp_uri, broker.openwire_url, source, target, qos, count)
                     for case, (source, target) in CASES.items()}
            report(f"ActiveMQ -> ActiveMQ bridge, {count} persistent texts, batch {BATCH} / {BATCH_TIME} ms, {qos}",
                   list(rates.items()), "stomp:// -> stomp://")
            for case in ("jms -> jms", "jms -> stomp://"):
                print(f"  aim (issue 32): {case} / stomp:// >= 0.8: {rates[case] / rates['stomp:// -> stomp://']:.2f}")
    print(host_state())


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the broker on the way out
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
