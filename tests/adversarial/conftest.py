"""Gateways the attacks share: the upstream STOMP server, and two secured gateways with logins with bcrypt
hashes, groups, wildcard ``[[authorization]]`` entries, a WebSocket listener, an admin endpoint and an
upstream ``stomp://`` connector whose URL carries a passcode: ``secured_gateway`` with the keys that
existed before issue 33 only, ``contract_gateway`` with ``[admin] roles`` as well (a gateway that does
not know them refuses to start, so the tests needing no roles use the first)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.adversarial.attack import (
    PASSWORDS,
    UPSTREAM_SECRET,
    admin_toml,
    auth_toml,
    gateway_from_toml,
    grants_toml,
    new_port,
)
from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import Client


@dataclass
class Secured:
    """A running secured gateway: STOMP over TCP on ``process.port``, WebSocket, admin endpoint."""

    process: GatewayProcess
    ws_port: int
    admin_port: int
    upstream: GatewayProcess | None = None

    def address(self, transport: str = "tcp") -> tuple[str, int]:
        return ("127.0.0.1", self.ws_port if transport == "ws" else self.process.port)

    def client(self, login: str, transport: str = "tcp", **headers: str) -> Client:
        return Client(self.address(transport), "1.2", ws_path="/" if transport == "ws" else None,
                      login=login, passcode=PASSWORDS[login], headers=headers)


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A plain gateway (no [auth]) the contract gateway reaches through ``stomp://gwuser:SECRET@…``."""
    process = GatewayProcess(tmp_path_factory.mktemp("upstream"),
                             args=["--set", 'broker.persistence="memory"']).start()
    yield process
    process.stop()


def contract_toml(admin_port: int, upstream_port: int, *, roles: bool) -> str:
    return f"""
{auth_toml()}
[connectors.upstream]
uri = "stomp://gwuser:{UPSTREAM_SECRET}@127.0.0.1:{upstream_port}"

[[destinations]]
pattern = "/queue/up.*"
connector = "upstream"

[[bridges]]
name = "uplink"
source = {{ connector = "embedded", destination = "/queue/bridge.in" }}
target = {{ connector = "upstream", destination = "/queue/up.bridged" }}

{admin_toml(admin_port, roles=roles)}
{grants_toml()}
"""


def secured(tmp_path_factory: pytest.TempPathFactory, upstream: GatewayProcess, *, roles: bool) -> Iterator[Secured]:
    ws_port, admin_port = new_port(), new_port()
    process = gateway_from_toml(tmp_path_factory.mktemp("roles" if roles else "secured"),
                                contract_toml(admin_port, upstream.port, roles=roles),
                                ws_port=ws_port, admin_port=admin_port)
    yield Secured(process, ws_port, admin_port, upstream)
    process.stop()


@pytest.fixture(scope="session")
def secured_gateway(tmp_path_factory: pytest.TempPathFactory, upstream: GatewayProcess) -> Iterator[Secured]:
    """Without [admin] roles: every login has the default role (viewer, by the contract)."""
    yield from secured(tmp_path_factory, upstream, roles=False)


@pytest.fixture(scope="session")
def contract_gateway(tmp_path_factory: pytest.TempPathFactory, upstream: GatewayProcess) -> Iterator[Secured]:
    """With [admin] roles (attack.ROLES) and default_role "none"."""
    yield from secured(tmp_path_factory, upstream, roles=True)
