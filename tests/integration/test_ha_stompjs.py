"""@stomp/stompjs over WebSocket fails over to the standby (issue 35 #2).

Two ``twistd jmsgateway`` processes on one data directory, each with a ``ws:tcp:`` listener;
the real @stomp/stompjs client (``tests/js/stompjs_failover.mjs``, run by Node with the ``ws``
package) gets both URLs and moves to the next one before each reconnection.  It sends persistent
messages with receipts and ``x-dedup-id``, consumes them with client-individual acks; the active
gateway gets SIGKILL in the middle.  Counted by id: every message receipted and delivered, the
client reconnected to the standby's URL, nothing delivered twice unless flagged ``redelivered``.
"""

from __future__ import annotations

import collections
import json
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import REPO, GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.standby import SQLITE, accepts, launch
from tests.support.waiting import wait_until

JS = REPO / "tests" / "js"
QUEUE = "/queue/ha.stompjs"
COUNT = 200


@pytest.fixture(scope="module")
def node() -> str:
    """Node with @stomp/stompjs and ws installed in tests/js (scripts/install-system-deps.sh does it)."""
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "@stomp" / "stompjs").is_dir():
        raise AssertionError("node or tests/js/node_modules is missing: run scripts/install-system-deps.sh "
                             "(apt-get install nodejs npm; npm ci --prefix tests/js)")
    return node


def ws_pair(workdir: Path) -> tuple[GatewayProcess, int, GatewayProcess, int]:
    """(active, its WebSocket port, standby, its WebSocket port) on one data directory."""
    ws_ports = free_port(), free_port()
    active, standby = (GatewayProcess(workdir / name, args=[*SQLITE, "--listen", f"ws:tcp:{port}:interface=127.0.0.1"])
                       for name, port in zip("ab", ws_ports, strict=True))
    standby.data_dir = active.data_dir
    active.start()
    wait_for_port(ws_ports[0], timeout=30)
    launch(standby)
    standby.wait_for_log("jmsgateway role standby")
    return active, ws_ports[0], standby, ws_ports[1]


def test_stompjs_with_two_urls_reconnects_to_the_standby_and_loses_nothing(tmp_path: Path, node: str) -> None:
    active, active_ws, standby, standby_ws = ws_pair(tmp_path)
    urls = [f"ws://127.0.0.1:{port}/stomp" for port in (active_ws, standby_ws)]
    client = subprocess.Popen([node, str(JS / "stompjs_failover.mjs"), QUEUE, str(COUNT), *urls], cwd=str(JS),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    seen: list[dict[str, Any]] = []

    def read() -> None:
        assert client.stdout is not None
        for line in client.stdout:
            try:
                events.put(json.loads(line))
            except ValueError:
                events.put({"event": "output", "line": line.rstrip()})

    threading.Thread(target=read, daemon=True).start()

    def until(predicate: Any, timeout: float, what: str) -> None:
        def drained() -> bool:
            while not events.empty():
                seen.append(events.get_nowait())
            return bool(predicate())
        wait_until(drained, timeout, what)

    try:
        until(lambda: sum(e["event"] == "receipted" for e in seen) >= 50, 60, "50 receipted messages")
        assert active.process is not None
        active.process.kill()
        active.process.wait(15)
        wait_until(lambda: accepts(standby.port), 60, "the standby's STOMP listener")
        until(lambda: any(e["event"] in ("done", "timeout") for e in seen), 120, "the client finishing")
        assert client.wait(30) == 0, seen[-20:]
    finally:
        if client.poll() is None:
            client.kill()
        active.kill()
        standby.kill()
    connected = [e["url"] for e in seen if e["event"] == "connected"]
    assert connected[0] == urls[0] and connected[-1] == urls[1], connected
    assert [e for e in seen if e["event"] in ("error", "output")] == []
    receipted = {e["body"] for e in seen if e["event"] == "receipted"}
    assert receipted == {f"m-{n}" for n in range(COUNT)}
    deliveries = collections.Counter(e["body"] for e in seen if e["event"] == "message")
    assert set(deliveries) == receipted, "receipted and never delivered"
    first: set[str] = set()
    unflagged = []
    for e in (e for e in seen if e["event"] == "message"):
        if e["body"] in first and not e["redelivered"]:
            unflagged.append(e["body"])  # (a second copy stored, or a redelivery without its flag)
        first.add(e["body"])
    assert unflagged == []
    print(f"\nstompjs: connected to {connected}; {COUNT} receipted, {sum(deliveries.values())} deliveries "
          f"({sum(n - 1 for n in deliveries.values())} redelivered)")
