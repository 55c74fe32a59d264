"""``jmsgateway backup`` while a real gateway takes persistent SENDs, then ``restore`` into another
data directory: every message receipted before the backup began is there, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.gateway import REPO, GatewayProcess, stopped_after
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

QUEUE = "/queue/backup.orders"


def jmsgateway(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


class Producer(threading.Thread):
    """Persistent SENDs with a receipt each; remembers when each receipt arrived."""

    def __init__(self, gateway: GatewayProcess) -> None:
        super().__init__(daemon=True)
        self.gateway = gateway
        self.receipted: list[tuple[str, float]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            client = Client(self.gateway.address)
            number = 0
            while not self.stop.is_set():
                body = f"order-{number}"
                client.send(QUEUE, body, receipt=True, persistent="true")
                self.receipted.append((body, time.monotonic()))
                number += 1
            client.disconnect()
        except BaseException as error:  # reported by the test
            self.error = error


def drain(address: tuple[str, int]) -> list[str]:
    client = Client(address)
    client.subscribe(QUEUE)
    bodies = []
    try:
        while True:
            try:
                bodies.append(client.message(timeout=3).body.decode())
            except AssertionError:
                return bodies
    finally:
        client.disconnect()


def test_an_online_backup_under_traffic_restores_every_receipted_message(tmp_path: Path) -> None:
    live = GatewayProcess(tmp_path / "live", '[transform]\nplugin_dirs = []\n')
    destination = tmp_path / "backup"
    live.start()
    with stopped_after(live):
        producer = Producer(live)
        producer.start()
        wait_until(lambda: len(producer.receipted) >= 300, 60, "300 receipted SENDs")
        began = time.monotonic()
        result = jmsgateway("backup", str(destination), "--config", str(live.config_path),
                            "--data-dir", str(live.data_dir))
        ended = time.monotonic()
        count = len(producer.receipted)
        wait_until(lambda: len(producer.receipted) >= count + 50, 60, "SENDs after the backup")
        producer.stop.set()
        producer.join(30)
    assert producer.error is None, producer.error
    assert result.returncode == 0, result.stderr
    assert "broker.sqlite" in result.stdout and "gateway.id" in result.stdout
    during = [body for body, at in producer.receipted if began <= at <= ended]
    assert during, "no SEND was receipted while the backup ran: not under traffic"
    manifest = json.loads((destination / "MANIFEST.json").read_text())
    assert {f["name"] for f in manifest["files"]} == {"broker.sqlite", "schedule.sqlite", "gateway.id"}
    assert (destination / "jmsgateway.toml").read_text() == live.config_path.read_text()

    restored = GatewayProcess(tmp_path / "restored", '[transform]\nplugin_dirs = []\n')
    done = jmsgateway("restore", str(destination), "--config", str(restored.config_path),
                      "--data-dir", str(restored.data_dir))
    assert done.returncode == 0, done.stderr
    assert (restored.data_dir / "gateway.id").read_text() == (live.data_dir / "gateway.id").read_text()
    restored.start()
    with stopped_after(restored):
        bodies = drain(restored.address)
    before = {body for body, at in producer.receipted if at < began}
    assert before <= set(bodies), f"missing after restore: {sorted(before - set(bodies))[:10]}"
    assert len(bodies) == len(set(bodies))
    assert set(bodies) <= {body for body, _ in producer.receipted} | {f"order-{len(producer.receipted)}"}


def test_restore_refuses_a_running_gateway_and_existing_files_without_force(tmp_path: Path) -> None:
    live = GatewayProcess(tmp_path / "live")
    live.start()
    with stopped_after(live):
        client = Client(live.address)
        client.send(QUEUE, "kept", receipt=True, persistent="true")
        client.disconnect()
        assert jmsgateway("backup", str(tmp_path / "b"), "--config", str(live.config_path),
                          "--data-dir", str(live.data_dir)).returncode == 0
        running = jmsgateway("restore", str(tmp_path / "b"), "--config", str(live.config_path),
                             "--data-dir", str(live.data_dir), "--force")
        assert running.returncode == 1 and "in use by a running gateway: stop it first" in running.stderr
        again = jmsgateway("backup", str(tmp_path / "b"), "--config", str(live.config_path),
                           "--data-dir", str(live.data_dir))
        assert again.returncode == 1 and "not an empty directory" in again.stderr
    refused = jmsgateway("restore", str(tmp_path / "b"), "--config", str(live.config_path),
                         "--data-dir", str(live.data_dir))
    assert refused.returncode == 1 and "--force" in refused.stderr
    forced = jmsgateway("restore", str(tmp_path / "b"), "--config", str(live.config_path),
                        "--data-dir", str(live.data_dir), "--force")
    assert forced.returncode == 0, forced.stderr
    aside = [p for p in live.data_dir.iterdir() if p.name.startswith("before-restore-")]
    assert len(aside) == 1 and (aside[0] / "broker.sqlite").is_file()
    live.start()
    with stopped_after(live):
        assert drain(live.address) == ["kept"]
    not_a_backup = jmsgateway("restore", str(tmp_path), "--data-dir", str(live.data_dir))
    assert not_a_backup.returncode == 1 and "is not a jmsgateway backup" in not_a_backup.stderr
