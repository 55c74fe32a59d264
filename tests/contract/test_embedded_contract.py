"""The connector contract for the embedded broker, with its SQLite store in a temporary directory.

Its broker going away is a restart: the broker stops and a new one recovers the
same SQLite file (live subscriptions end with the process; it declares no
``reconnect``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.sqlite_store import SqliteStore
from gateway.message.model import Message
from tests.contract.connector_contract import ConnectorContract, Target, text, unique
from tests.support.reactor_waits import reactor, wait_for


class EmbeddedTarget(Target):
    """An embedded broker on ``<directory>/broker.sqlite``."""

    def __init__(self, directory: Path) -> None:
        self.path = str(directory / "broker.sqlite")
        super().__init__(self._start())

    def _start(self) -> EmbeddedBroker:
        broker = EmbeddedBroker(reactor, BrokerSettings(), SqliteStore(self.path, reactor))
        wait_for(broker.start)
        return broker

    async def queue(self) -> str:
        return f"/queue/{unique()}"

    async def topic(self) -> str:
        return f"/topic/{unique()}"

    def refused(self, destination: str) -> Message:
        return text(f"/nowhere/{unique()}", "no such kind of destination")

    async def go_away(self) -> None:
        await self.connector.stop()

    async def come_back(self) -> EmbeddedBroker:
        self.connector = broker = EmbeddedBroker(reactor, BrokerSettings(), SqliteStore(self.path, reactor))
        await broker.start()
        return broker

    def stop(self) -> None:
        wait_for(self.connector.stop)


class TestEmbeddedBroker(ConnectorContract):
    @pytest.fixture
    def target(self, tmp_path: Path) -> Iterator[EmbeddedTarget]:
        target = EmbeddedTarget(tmp_path)
        yield target
        target.stop()

    @pytest.fixture
    def faulty_target(self, target: EmbeddedTarget) -> EmbeddedTarget:
        return target
