"""The gateway-process fixture itself (tests/support/gateway.py, ports.py) against the real gateway.

:meth:`GatewayProcess.start` returns once the gateway process itself listens on its STOMP port: a port
that something else took between :func:`free_port` and the gateway's bind accepts connections too, and
a test that took that for the gateway would CONNECT to a stranger (or to a gateway about to exit).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, listening_ports
from tests.support.stomp_clients import Client


def test_start_returns_when_the_gateway_listens_and_connects(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path).start()
    try:
        assert process.process is not None and process.port in listening_ports(process.process.pid)
        client = Client(process.address)
        client.send("/queue/support", "x", receipt=True)
        client.disconnect()
    finally:
        process.stop()


def test_start_does_not_take_a_stranger_on_its_port_for_the_gateway(tmp_path: Path) -> None:
    """Something else listens on the port first: start() raises with the gateway's own words (it cannot
    listen), instead of returning as soon as the stranger accepts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        assert port in listening_ports(os.getpid())
        process = GatewayProcess(tmp_path, port=port)
        try:
            with pytest.raises(RuntimeError, match=f"(?s)cannot listen on 'tcp:{port}:.*already in use"):
                process.start()
        finally:
            process.kill()


def test_listening_ports_are_the_listeners_of_that_process_only() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        bound.bind(("127.0.0.1", 0))  # (bound, not listening)
        mine = listening_ports(os.getpid())
        assert listener.getsockname()[1] in mine and bound.getsockname()[1] not in mine


@pytest.mark.parametrize("worker", ["gw0", "gw1", "gw2"])
def test_free_ports_of_one_worker_are_its_own_and_not_handed_out_twice(
        worker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert {(port >> 1) % 3 for port in ports} == {int(worker[2:])}
