"""A real ``twistd jmsgateway`` process: SIGHUP reloads, daemon starts report failure, logs are filtered
and can be JSON lines, STOMP connects and disconnects are logged with the address and login."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.security.passwords import hash_password
from tests.support.gateway import REPO, TWISTD, GatewayProcess, default_config, stopped_after
from tests.support.ports import free_port, wait_for_port
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

PASSWORD = "correct-horse-battery-staple-7"


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def auth_config(writer: str, extra: str = "") -> str:
    digest = hash_password(PASSWORD, 4)
    return (f'[auth]\nallow_weak_passwords = true\nusers = {{ alice = "{digest}", bob = "{digest}" }}\n'
            f'[[authorization]]\ndestination = "/queue/orders.*"\nwrite = ["{writer}"]\nread = ["*"]\n{extra}')


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path)
    process.config_path.write_text(auth_config("alice"))  # (the shipped default has an [auth] table)
    process.start()
    with stopped_after(process):
        yield process


def refused(process: GatewayProcess, login: str) -> bool:
    client = Client(process.address, login=login, passcode=PASSWORD)
    try:
        client.connection.send("/queue/orders.a", "x", headers={"receipt": "r"})
        return client.error(timeout=5) is not None
    finally:
        client.drop()


def test_sighup_reloads_authorization_and_says_what_needs_a_restart(gateway: GatewayProcess) -> None:
    assert not refused(gateway, "alice") and refused(gateway, "bob")
    gateway.config_path.write_text(auth_config("bob", "[stomp]\ndefault_prefetch = 7\n"))
    assert gateway.process is not None
    gateway.process.send_signal(signal.SIGHUP)
    log = gateway.wait_for_log("SIGHUP: configuration")
    assert "applied: auth logins, authorization (1 entries); needs a restart: stomp" in log
    assert refused(gateway, "alice") and not refused(gateway, "bob")
    assert gateway.process.poll() is None


def test_sighup_with_a_broken_file_changes_nothing(gateway: GatewayProcess) -> None:
    gateway.config_path.write_text(gateway.config_path.read_text() + "\n[stomp\n")
    assert gateway.process is not None
    gateway.process.send_signal(signal.SIGHUP)
    log = gateway.wait_for_log("not reloaded, nothing changed")
    assert "not valid TOML" in log
    assert not refused(gateway, "alice") and gateway.process.poll() is None


def test_stomp_connects_disconnects_and_auth_failures_are_logged(gateway: GatewayProcess) -> None:
    client = Client(gateway.address, login="alice", passcode=PASSWORD)
    client.disconnect()
    with socket.create_connection(gateway.address) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:mallory\npasscode:nope\n\n\x00")
        sock.recv(4096)
    log = gateway.wait_for_log("login 'mallory' was refused")
    assert "STOMP 1.2 connect from 127.0.0.1:" in log and "(login alice)" in log
    assert "STOMP disconnect from 127.0.0.1:" in log
    assert "Starting factory" not in log and "#debug]" not in log


def test_json_log_lines_on_stdout(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "gw.toml"
    config.write_text("[gateway]\nlog_level = \"info\"\n")
    process = subprocess.Popen(
        [TWISTD, "-n", "--pidfile=", "jmsgateway", "--config", str(config), "--listen",
         f"tcp:{port}:interface=127.0.0.1", "--data-dir", str(tmp_path / "data"), "--log-format", "json"],
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_port(port, timeout=30)
        Client(("127.0.0.1", port)).disconnect()
        wait_until(lambda: (tmp_path / "data" / "gateway.id").exists(), 5, "a started gateway")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    records = [json.loads(line) for line in output.splitlines() if line.strip()]  # every line is JSON
    messages = [r["message"] for r in records]
    assert any(m.startswith(f"configuration {config} (--config)") for m in messages)
    connect = next(r for r in records if r["message"].startswith("STOMP 1.2 connect from"))
    assert connect["level"] == "info" and connect["login"] == "-" and connect["peer"].startswith("127.0.0.1:")
    assert not any("Starting factory" in m for m in messages)


def test_log_level_warn_drops_info(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path, args=["--log-level", "warn"])
    process.start()
    with stopped_after(process):
        Client(process.address).disconnect()
    assert "STOMP 1.2 connect" not in process.log() and "jmsgateway listening" not in process.log()


def daemon(tmp_path: Path, port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TWISTD, f"--pidfile={tmp_path / 'gw.pid'}", f"--logfile={tmp_path / 'gw.log'}", "jmsgateway",
         "--config", str(REPO / "etc" / "jmsgateway.toml"), "--listen", f"tcp:{port}:interface=127.0.0.1",
         "--data-dir", str(tmp_path / "data")],
        cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=60)


def test_a_daemonized_start_that_fails_exits_non_zero_and_removes_its_pidfile(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = daemon(tmp_path, taken.getsockname()[1])
    assert result.returncode == 1, result
    assert "cannot listen on" in result.stderr
    assert not (tmp_path / "gw.pid").exists()
    assert "Address already in use" in (tmp_path / "gw.log").read_text()


def test_a_daemonized_start_that_works_exits_zero_once_listening(tmp_path: Path) -> None:
    port = free_port()
    result = daemon(tmp_path, port)
    assert result.returncode == 0, result
    pid = int((tmp_path / "gw.pid").read_text())
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # listening already
            pass
        os.kill(pid, signal.SIGUSR1)  # rotates the log file
        wait_until(lambda: (tmp_path / "gw.log.1").exists(), 10, "the rotated log")
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not (tmp_path / "gw.pid").exists(), 30, "the pid file removed at the stop")


def embedded_bridge(name: str, source: str, target: str) -> str:
    return (f'[[bridges]]\nname = "{name}"\nsource = {{ connector = "embedded", destination = "{source}" }}\n'
            f'target = {{ connector = "embedded", destination = "{target}" }}\n')


def test_sighup_adds_and_removes_bridges(tmp_path: Path) -> None:
    """A real gateway: bridge ``old`` moves messages; after a SIGHUP with ``old`` gone and ``new`` in the file,
    ``new`` moves them and ``old`` no longer does; the log names what was applied."""
    process = GatewayProcess(tmp_path, embedded_bridge("old", "/queue/old.in", "/queue/old.out"))
    process.start()
    with stopped_after(process):
        client = Client(process.address)
        client.subscribe("/queue/old.out", "1")
        client.send("/queue/old.in", "before", receipt=True)
        assert client.message(timeout=20).body == b"before"
        process.config_path.write_text(default_config() + "\n" + embedded_bridge("new", "/queue/new.in",
                                                                                 "/queue/new.out"))
        assert process.process is not None
        process.process.send_signal(signal.SIGHUP)
        log = process.wait_for_log("SIGHUP: configuration")
        assert "applied: bridges (added new; removed old); needs a restart: nothing" in log
        client.subscribe("/queue/new.out", "2")
        client.send("/queue/new.in", "through the new bridge", receipt=True)
        assert client.message(timeout=20).body == b"through the new bridge"
        client.send("/queue/old.in", "stays", receipt=True)
        assert client.no_message(2.0)  # the old bridge is gone: the message stays in /queue/old.in
        client.disconnect()
        assert process.process.poll() is None
