"""``jmsgateway bridge`` logs its bridges' progress while it runs: a real bridge process moving messages
between two queues of a real gateway (over stomp://), read from the process's output."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.gateway import REPO, GatewayProcess, stopped_after
from tests.support.ports import free_port
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


def _get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_standalone_bridge_serves_probes_bridges_and_metrics(tmp_path: Path) -> None:
    """``[admin] listen`` in the bridge's file: /livez at once, /readyz 503 while the source broker is away
    and 200 once it is up, /bridges (behind the [auth] login, the probes open) and /metrics with the
    bridge's counters, the build and the process."""
    from gateway.security.passwords import hash_password

    broker_port, admin = free_port(), free_port()
    config = tmp_path / "bridges.toml"
    config.write_text(
        f'[gateway]\nid = "gw-watched"\ndata_dir = "{tmp_path / "data"}"\n'
        f'[auth]\nusers = {{ ops = "{hash_password("ops-secret", 4)}" }}\nallow_weak_passwords = true\n'
        f'[admin]\nlisten = "tcp:{admin}:interface=127.0.0.1"\nroles = {{ ops = "administrator" }}\n'
        f'[connectors.gw]\nuri = "stomp://127.0.0.1:{broker_port}"\nfailure_retry_interval = 200\n'
        '[[bridges]]\nname = "watched"\nsource = { connector = "gw", destination = "/queue/watched.in" }\n'
        'target = { connector = "gw", destination = "/queue/watched.out" }\nfailure_retry_interval = 200\n')
    output = tmp_path / "bridge.out"
    base = f"http://127.0.0.1:{admin}"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "bridge", "--config", str(config)],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=sink, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: "admin endpoint on" in output.read_text(), 60, "the admin endpoint")
            assert _get(f"{base}/livez")[0] == 200
            code, body = _get(f"{base}/readyz")
            assert code == 503 and b"connector gw" in body, body  # the broker is not there yet
            gateway = GatewayProcess(tmp_path / "gw", port=broker_port)
            gateway.start()
            with stopped_after(gateway):
                wait_until(lambda: _get(f"{base}/readyz")[0] == 200, 60, "ready once the broker is up")
                client = Client(gateway.address)
                client.subscribe("/queue/watched.out")
                for number in range(5):
                    client.send("/queue/watched.in", f"m{number}", receipt=True)
                assert len(client.messages(5, timeout=30)) == 5
                client.disconnect()
                assert _get(f"{base}/bridges")[0] == 401
                code, body = _get(f"{base}/bridges", ("ops", "ops-secret"))
                assert code == 200 and json.loads(body)[0]["name"] == "watched", body
                wait_until(lambda: json.loads(_get(f"{base}/bridges/watched", ("ops", "ops-secret"))[1])
                           ["forwarded"] == 5, 30, "5 forwarded")
                code, body = _get(f"{base}/metrics", ("ops", "ops-secret"))
                text = body.decode()
                assert code == 200
                assert 'jmsgateway_bridge_forwarded_total{bridge="watched"} 5.0' in text, text
                assert "jmsgateway_build_info{" in text and "process_resident_memory_bytes" in text
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    assert process.returncode == 0, output.read_text()


def test_the_standalone_bridge_stops_with_one_line_when_the_admin_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "bridges.toml"
        config.write_text(
            f'[gateway]\ndata_dir = "{tmp_path / "data"}"\n[admin]\nlisten = "tcp:{port}:interface=127.0.0.1"\n'
            '[connectors.gw]\nuri = "stomp://127.0.0.1:1"\n'
            '[[bridges]]\nname = "b"\nsource = { connector = "gw", destination = "/queue/a" }\n'
            'target = { connector = "gw", destination = "/queue/b" }\n')
        done = subprocess.run([sys.executable, "-m", "gateway.cli", "bridge", "--config", str(config)], cwd=tmp_path,
                              env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"jmsgateway bridge: cannot listen on 'tcp:{port}:interface=127.0.0.1' (admin): " in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
