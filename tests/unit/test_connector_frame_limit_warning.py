"""The gateway warns when a stomp:// connector's frame limit is not above the STOMP listener's."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import formatEvent, globalLogPublisher

from gateway.app import build_gateway
from gateway.config import parse_config
from tests.support.log_events import observer


def warnings_building(tmp_path: Path, text: str) -> list[str]:
    config = parse_config(tomllib.loads(text), str(tmp_path / "gw.toml"))
    config.gateway.data_dir = str(tmp_path / "data")
    events: list[dict[str, Any]] = []
    sink = observer(events.append)
    globalLogPublisher.addObserver(sink)
    try:
        build_gateway(config, MemoryReactorClock())
    finally:
        globalLogPublisher.removeObserver(sink)
    return [formatEvent(event) for event in events if "max_frame_size" in formatEvent(event)]


@pytest.mark.parametrize(("settings", "warned"), [
    ("", False),                                                  # 33 MiB above 32 MiB
    ("[stomp]\nmax_frame_size = 67108864\n", True),               # the listener raised alone
    ("[stomp]\nmax_frame_size = 67108864\n[connectors.amq]\nmax_frame_size = 68157440\n", False),
])
def test_a_connector_limit_not_above_the_listeners_is_a_warning(tmp_path: Path, settings: str, warned: bool) -> None:
    connector = '[connectors.amq]\nuri = "stomp://127.0.0.1:1"\nmax_retries = -1\n'
    if "[connectors.amq]" in settings:
        settings, extra = settings.split("[connectors.amq]\n")
        connector += extra
    lines = warnings_building(tmp_path, settings + connector)
    assert bool(lines) == warned, lines
    if warned:
        assert "connectors.amq.max_frame_size (34603008) is not above [stomp] max_frame_size (67108864)" in lines[0]
