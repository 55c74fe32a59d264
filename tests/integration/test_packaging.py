"""Installing and starting the gateway the way a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.gateway import REPO, TWISTD, GatewayProcess


def test_plain_pip_install_registers_the_twistd_plugin(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target),
         str(REPO)],
        check=True, cwd=tmp_path,
    )
    assert (target / "twisted" / "plugins" / "jmsgateway.py").exists()
    assert not (target / "twisted" / "plugins" / "__init__.py").exists()
    for page in ("index.html", "console.js", "console.css"):  # the admin console ships with the package
        assert (target / "gateway" / "admin" / "static" / page).is_file(), page
    probe = (
        "from twisted.plugin import getPlugins\n"
        "from twisted.application.service import IServiceMaker\n"
        "import gateway\n"
        "names = {p.tapname: p.module for p in getPlugins(IServiceMaker)}\n"
        "print(names.get('jmsgateway'), gateway.__file__)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, env=env,
                         cwd=tmp_path).stdout.split()
    assert out[0] == "gateway.tap"
    assert out[1].startswith(str(target))
    help_text = subprocess.run([TWISTD, "--help"], capture_output=True, text=True, env=env, cwd=tmp_path).stdout
    assert "jmsgateway" in help_text


def test_bad_config_stops_startup_with_one_clear_message(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[stomp]\nmax_frame_size = -3\n")
    result = subprocess.run(
        [TWISTD, "-n", "--pidfile=", "jmsgateway", "--config", str(config)],
        capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60,
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert str(config) in output
    assert "stomp.max_frame_size" in output
    assert "Traceback" not in output


def test_check_config_command(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    good = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(REPO / "etc" / "jmsgateway.toml")],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert good.returncode == 0, good.stderr
    assert "OK" in good.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[gateway]\nlisten = 5\n")
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(bad)],
                            capture_output=True, text=True, env=env, cwd=REPO)
    assert result.returncode == 1
    assert "gateway.listen" in result.stderr and str(bad) in result.stderr


def test_listen_and_set_options_override_the_config(make_gateway: Callable[..., GatewayProcess]) -> None:
    process = make_gateway(args=["--set", "stomp.default_prefetch=3", "--set", 'gateway.id="gw-x"'])
    import socket

    with socket.create_connection(process.address, timeout=5) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
        reply = sock.recv(4096)
    assert reply.startswith(b"CONNECTED\n")
    assert (process.data_dir).is_dir()
