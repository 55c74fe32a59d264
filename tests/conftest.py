"""Fixtures shared by every test: the real gateway process and stomp.py clients."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.stomp_clients import StompClients


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Destroy leftover client objects (Kafka producers) now, so their shutdown
    chatter comes before pytest's summary rather than after it."""
    gc.collect()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long runs (marker ``fault_matrix``) are deselected unless ``-m`` names them."""
    if "fault_matrix" in (config.option.markexpr or ""):
        return
    long_runs = [item for item in items if item.get_closest_marker("fault_matrix") is not None]
    if long_runs:
        config.hook.pytest_deselected(items=long_runs)
        items[:] = [item for item in items if item.get_closest_marker("fault_matrix") is None]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway on the default config, shared by a test module."""
    process = GatewayProcess(tmp_path_factory.mktemp("gateway")).start()
    yield process
    process.stop()


@pytest.fixture
def make_gateway(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """Start gateways with extra config for one test; all are stopped afterwards."""
    started: list[GatewayProcess] = []

    def make(extra_config: str = "", **kwargs: object) -> GatewayProcess:
        process = GatewayProcess(tmp_path / f"gw{len(started)}", extra_config, **kwargs)  # type: ignore[arg-type]
        started.append(process)
        return process.start()

    yield make
    for process in started:
        process.kill()


@pytest.fixture
def stomp(gateway: GatewayProcess) -> Iterator[StompClients]:
    """Connected stomp.py clients for the module's gateway, disconnected afterwards."""
    clients = StompClients(gateway.address)
    yield clients
    clients.close()
