"""Two real gateway processes on one data directory: an active one and a standby (tests and bench).

:func:`gateway_pair` starts the active gateway (it listens for STOMP) and
launches the standby (only its admin endpoint opens until it takes over), each
with its own STOMP and admin ports.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from pathlib import Path

from tests.support.gateway import REPO, GatewayProcess
from tests.support.ports import free_port, wait_for_port

SQLITE = ["--set", 'broker.persistence="sqlite"']


def gateway_pair(workdir: Path, args: list[str] | None = None, timeout: float = 30.0, extra_config: str = "",
                 ) -> tuple[GatewayProcess, int, GatewayProcess, int]:
    """(active, its admin port, standby, its admin port), the standby waiting on the active's store;
    both get ``extra_config`` (TOML) and ``args``."""
    admins = free_port(), free_port()
    active, standby = (GatewayProcess(workdir / name, f'[admin]\nlisten = "tcp:{port}:interface=127.0.0.1"\n\n'
                                      + extra_config, args=[*SQLITE, *(args or [])])
                       for name, port in zip("ab", admins, strict=True))
    standby.data_dir = active.data_dir
    active.start(timeout)
    try:
        launch(standby)
        wait_for_port(admins[1], timeout=timeout)
    except BaseException:
        standby.kill()
        active.kill()
        raise
    return active, admins[0], standby, admins[1]


def launch(gateway: GatewayProcess) -> None:
    """Start ``gateway``'s process without waiting for its STOMP port (a standby does not open it)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    gateway.process = subprocess.Popen(gateway.command(), cwd=str(gateway.workdir), env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def accepts(port: int) -> bool:
    """Whether 127.0.0.1:``port`` accepts a TCP connection now."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def role(admin_port: int) -> str | None:
    """The role in the gateway's ``/status`` (None while its admin endpoint does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/status", timeout=10) as response:
            return str(json.loads(response.read())["role"])
    except OSError:
        return None
