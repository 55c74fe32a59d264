"""``jmsgateway bridge`` logs its bridges' progress while it runs: a real bridge process moving messages
between two queues of a real gateway (over stomp://), read from the process's output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.gateway import REPO, GatewayProcess, stopped_after
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until


def test_the_standalone_bridge_logs_states_and_rates(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw")
    gateway.start()
    config = tmp_path / "bridges.toml"
    config.write_text(
        f'[gateway]\nid = "gw-progress"\ndata_dir = "{tmp_path / "data"}"\n'
        f'[connectors.gw]\nuri = "stomp://127.0.0.1:{gateway.port}"\n'
        '[[bridges]]\nname = "watched"\nsource = { connector = "gw", destination = "/queue/progress.in" }\n'
        'target = { connector = "gw", destination = "/queue/progress.out" }\nqos = "DUPLICATES_OK"\n')
    output = tmp_path / "bridge.out"
    with stopped_after(gateway), output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "bridge", "--config", str(config), "--progress-interval", "1"],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=sink, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: "-> running" in output.read_text(), 60, "the bridge running")
            client = Client(gateway.address)
            client.subscribe("/queue/progress.out")
            for number in range(20):
                client.send("/queue/progress.in", f"m{number}", receipt=True)
            assert len(client.messages(20, timeout=30)) == 20
            client.disconnect()
            wait_until(lambda: "20 forwarded" in output.read_text(), 30, "a progress line counting 20")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    text = output.read_text()
    assert process.returncode == 0, text
    assert "bridge watched: new -> " in text
    line = next(line for line in text.splitlines() if "20 forwarded" in line)
    assert "bridge watched: running, 20 forwarded (" in line and "/s over " in line and "0 pending" in line
