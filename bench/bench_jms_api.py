"""Issue 19 benchmark: STOMP -> gateway -> JMS API (JPype, OpenWire) -> ActiveMQ -> JMS consumer,
against the same through the ``stomp://`` connector and STOMP straight to ActiveMQ.

One ActiveMQ (KahaDB, ``transport.tcpNoDelay=true`` on its STOMP port) and one gateway
process serve the three paths in one run:

* **direct**: the raw-socket STOMP producer sends to ActiveMQ's STOMP port;
* **via stomp://**: to the gateway, whose ``stomp://`` connector takes ``/queue/jms.*``;
* **via JMS API**: to the gateway, whose ``jms`` connector (ActiveMQ's OpenWire client jars
  from the Debian package, a ConnectionFactory set up from TOML) takes ``/queue/jmsapi.*``.

Workload and consumer as in :mod:`bench.bench_jms` (100-byte bodies, a receipt every 100
SENDs, the real ActiveMQ JMS client counting in a process of its own); non-persistent,
then persistent; best of three rounds after a warm-up.  The aim: JMS API / stomp:// >= 0.8.

Run: ``.venv/bin/python -m bench.bench_jms_api [COUNT]``
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Callable

from bench.bench_jms import BODY_SIZE, RECEIPT_EVERY, JmsCounter
from bench.common import activemq_server, gateway_server, report
from bench.stomp_load import Workload

ROUNDS = 3
ACTIVEMQ_LIB = "/usr/share/activemq/lib"
CLIENT_JARS = ("activemq-client.jar", "geronimo-jms_1.1_spec.jar", "hawtbuf.jar", "slf4j-api.jar",
               "geronimo-j2ee-management-1.1-spec.jar")


def gateway_config(stomp_uri: str, openwire_url: str) -> str:
    """Both connectors to the one ActiveMQ, each with its own destinations."""
    classpath = json.dumps([f"{ACTIVEMQ_LIB}/{jar}" for jar in CLIENT_JARS])
    return f"""
[connectors.viastomp]
uri = "{stomp_uri}"

[connectors.viajms]
type = "jms"
classpath = {classpath}

[connectors.viajms.connection_factory]
class = "org.apache.activemq.ActiveMQConnectionFactory"
properties = {{ brokerURL = "{openwire_url}", watchTopicAdvisories = false }}

[[destinations]]
pattern = "/queue/jms.*"
connector = "viastomp"

[[destinations]]
pattern = "/queue/jmsapi.*"
connector = "viajms"
"""


def main(count: int = 20_000, rounds: int = ROUNDS) -> None:
    persistent_count = max(count // 4, 1)
    counter = JmsCounter()
    try:
        with activemq_server(kahadb=True, stomp_no_delay=True) as broker, \
                gateway_server(gateway_config(broker.stomp_uri, broker.openwire_url)) as gateway:
            gateway.wait_for_log("connected to tcp://", 60)
            direct = ("127.0.0.1", broker.stomp_port)

            def run(address: tuple[str, int], prefix: str, persistent: bool, size: int) -> Callable[[], float]:
                return lambda: counter.rate(broker.openwire_url, address, Workload(
                    f"/queue/{prefix}.bench.{uuid.uuid4().hex}", count=size, body_size=BODY_SIZE,
                    persistent=persistent, receipt_every=RECEIPT_EVERY))

            variants: dict[str, dict[str, Callable[[], float]]] = {}
            for name, persistent, size in (("non-persistent", False, count),
                                           ("persistent", True, persistent_count)):
                variants[name] = {
                    "direct to ActiveMQ": run(direct, "jms", persistent, size),
                    "via stomp://": run(gateway.address, "jms", persistent, size),
                    "via JMS API": run(gateway.address, "jmsapi", persistent, size),
                }
            for variant in variants.values():  # warm up the JITs, connections and consumer
                for case in variant.values():
                    case()
            rates: dict[tuple[str, str], list[float]] = {}
            for _ in range(rounds):
                for name, variant in variants.items():
                    for case_name, case in variant.items():
                        rates.setdefault((name, case_name), []).append(case())
    finally:
        counter.close()
    for name, variant in variants.items():
        size = count if name == "non-persistent" else persistent_count
        best = {case: max(rates[name, case]) for case in variant}
        report(f"STOMP -> gateway -> ActiveMQ -> JMS consumer, {size} x {BODY_SIZE} B, {name}, receipt every "
               f"{RECEIPT_EVERY} SENDs (best of {rounds})",
               [(f"{name}, {case}", rate) for case, rate in best.items()], f"{name}, via stomp://")
        for case in variant:
            print(f"  rounds, {case}: {' '.join(f'{rate:.0f}' for rate in rates[name, case])}")
        ratio = best["via JMS API"] / best["via stomp://"]
        print(f"  aim (issue 19): JMS API / stomp:// >= 0.8: {ratio:.2f}; JMS API / direct: "
              f"{best['via JMS API'] / best['direct to ActiveMQ']:.2f}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the broker on the way out
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
