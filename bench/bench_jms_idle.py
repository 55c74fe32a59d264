"""Issue 38: what idle subscriptions of the ``jms`` connector cost (threads and CPU of the gateway).

One ActiveMQ and one gateway whose ``jms`` connector (ActiveMQ's OpenWire client jars) takes
``/queue/jmsapi.*``.  The gateway's thread count and CPU are measured with no subscription,
then with ``COUNT`` idle STOMP subscriptions (one client, one queue each, nothing sent) once
they settled; then one message per subscription goes through, to show each one still delivers.

Run: ``.venv/bin/python -m bench.bench_jms_idle [COUNT]`` (default 220)
"""

from __future__ import annotations

import signal
import sys
import time
import uuid
from pathlib import Path

from bench.bench_jms_api import gateway_config
from bench.common import activemq_server, cpu_seconds, gateway_server, host_state
from tests.support.jms_client import JmsClient
from tests.support.stomp_clients import Client

SETTLE = 40.0
"""Seconds the subscriptions are left alone before measuring (the provider's pooled threads idle out in 30 s)."""
WINDOW = 10.0
"""Seconds over which CPU is measured."""


def threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def cpu_share(pid: int, window: float = WINDOW) -> float:
    """Share of one core process ``pid`` used over ``window`` seconds."""
    before = cpu_seconds(pid)
    time.sleep(window)
    return (cpu_seconds(pid) - before) / window


def main(count: int = 220) -> None:
    print(host_state())
    with activemq_server() as broker, gateway_server(gateway_config(broker.stomp_uri, broker.openwire_url)) as gateway:
        gateway.wait_for_log("connected to tcp://", 60)
        assert gateway.process is not None
        pid = gateway.process.pid
        time.sleep(5)
        base_threads, base_cpu = threads(pid), cpu_share(pid)
        print(f"no subscription: {base_threads} threads, {base_cpu:.1%} of a core")
        client = Client(gateway.address)
        queues = [f"/queue/jmsapi.idle.{uuid.uuid4().hex[:8]}.{index}" for index in range(count)]
        for index, queue in enumerate(queues):
            client.subscribe(queue, f"s{index}", ack="client-individual")
        time.sleep(SETTLE)
        idle_threads, idle_cpu = threads(pid), cpu_share(pid)
        print(f"{count} idle subscriptions: {idle_threads} threads (+{idle_threads - base_threads}), "
              f"{idle_cpu:.1%} of a core (+{idle_cpu - base_cpu:.1%})")
        with JmsClient(broker.openwire_url) as jms:
            for queue in queues:
                jms.send_text(queue, "wake up")
        started = time.monotonic()
        frames = client.messages(count, timeout=60)
        for frame in frames:
            client.ack(frame, receipt=False)
        print(f"one message to each: {len(frames)} delivered in {time.monotonic() - started:.1f}s; "
              f"{threads(pid)} threads right after")
        client.disconnect()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the broker on the way out
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 220)
