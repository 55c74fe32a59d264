"""An installed gateway, run the way an operator does: from an empty directory, outside the checkout.

One throwaway venv (``pip install <checkout>``: the runtime only, from the warm package cache) serves
every test of the module; nothing here imports the checkout into the gateway's process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port, wait_for_port
from tests.support.stomp_clients import Client
from tests.support.wheel import compiled_wheel


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    wheel = compiled_wheel(tmp_path_factory)
    subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True)
    return root


@pytest.fixture
def empty_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "anywhere"
    folder.mkdir()
    return folder


def outside_env() -> dict[str, str]:
    """The environment without the checkout on the path and without a configuration variable."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JMSGATEWAY_CONFIG")}
    return env


def run(venv: Path, command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / command[0]), *command[1:]], cwd=cwd, env=outside_env(),
                          capture_output=True, text=True, timeout=120)


def test_the_runtime_install_has_no_extras(venv: Path, empty_dir: Path) -> None:
    installed = run(venv, ["python", "-m", "pip", "list", "--format=freeze"], empty_dir).stdout.lower()
    assert "twisted==" in installed and "jmsgateway==" in installed
    for extra in ("pyspark", "confluent-kafka", "jpype1", "pytest", "mypy", "selenium", "pandas"):
        assert f"{extra}==" not in installed, extra


def test_check_config_and_plugins_work_from_an_empty_directory_and_write_nothing(venv: Path,
                                                                                  empty_dir: Path) -> None:
    checked = run(venv, ["jmsgateway", "check-config"], empty_dir)
    assert checked.returncode == 0, checked.stderr
    assert "gateway/shipped/etc/jmsgateway.toml: OK" in checked.stdout
    example = run(venv, ["python", "-c", "from gateway.locations import shipped_folder; "
                                         "print(shipped_folder('etc'))"], empty_dir).stdout.strip()
    bridges = run(venv, ["jmsgateway", "plugins", "--config", f"{example}/examples/bridges.toml"], empty_dir)
    assert bridges.returncode == 0, bridges.stderr
    assert "header-map" in bridges.stdout and "gateway/shipped/plugins/header_map.py" in bridges.stdout
    assert list(empty_dir.iterdir()) == []


@pytest.fixture
def gateway(venv: Path, empty_dir: Path) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    port = free_port()
    log = empty_dir.parent / "twistd.log"
    process = subprocess.Popen(
        [str(venv / "bin" / "twistd"), "-n", "--pidfile=", f"--logfile={log}", "jmsgateway",
         "--listen", f"tcp:{port}:interface=127.0.0.1"],
        cwd=empty_dir, env=outside_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_port(port, timeout=60)
    except TimeoutError:
        process.kill()
        raise AssertionError(f"{process.communicate()[0]}\n{log.read_text() if log.exists() else ''}") from None
    yield process, port, log
    process.terminate()
    process.wait(30)


def test_twistd_jmsgateway_runs_from_an_empty_directory(gateway: tuple[subprocess.Popen[str], int, Path],
                                                         empty_dir: Path) -> None:
    _, port, log = gateway
    client = Client(("127.0.0.1", port))
    try:
        client.subscribe("/queue/anywhere")
        client.send("/queue/anywhere", "from anywhere", receipt=True, persistent="true")
        assert client.message().body == b"from anywhere"
    finally:
        client.disconnect()
    text = log.read_text()
    assert "gateway/shipped/etc/jmsgateway.toml (the default shipped with the package)" in text
    assert f"data directory {empty_dir / 'var'}" in text
    assert "hot modules compiled (mypyc): gateway.wire.codec, gateway.stomp.delivery" in text  # (pip install .)
