"""Configuration loading: defaults, overrides and the messages for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import load_config, parse_config, parse_override
from gateway.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gw.toml"
    path.write_text(text)
    return str(path)


def test_shipped_default_config_is_valid() -> None:
    config = load_config(str(REPO / "etc" / "jmsgateway.toml"))
    assert config.listen == ["tcp:61613:interface=127.0.0.1"]
    assert config.broker.persistence == "sqlite"
    assert config.stomp.max_frame_size >= 32 * 1024 * 1024


def test_overrides_are_typed_as_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[stomp]\ndefault_prefetch = 10\n")
    config = load_config(path, ["stomp.default_prefetch=25", "broker.default_persistent=true", "gateway.id=gw-7"])
    assert config.stomp.default_prefetch == 25
    assert config.broker.default_persistent is True
    assert config.id == "gw-7"
    assert parse_override('gateway.listen=["tcp:1"]') == (["gateway", "listen"], ["tcp:1"])


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("[stomp]\nmax_frame_sise = 5\n", "stomp.max_frame_sise", "did you mean 'max_frame_size'"),
        ("[stomp]\nmax_frame_size = 'big'\n", "stomp.max_frame_size", "expected an integer"),
        ("[stomp]\nmax_frame_size = 0\n", "stomp.max_frame_size", "at least 1"),
        ("[brokr]\n", "brokr", "did you mean 'broker'"),
        ("[broker]\npersistence = 'disk'\n", "broker.persistence", "one of memory, sqlite"),
        ("[[destinations]]\npattern = '/queue/*'\nconnector = 'amq'\n", "destinations[0].connector", "not defined"),
        ("[stomp]\nheartbeat_grace = 0.5\n", "stomp.heartbeat_grace", "at least 1.0"),
    ],
)
def test_bad_values_name_file_key_and_problem(tmp_path: Path, text: str, key: str, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert path in message
    assert key in message
    assert problem in message


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[stomp\n"))


def test_listen_accepts_a_single_string() -> None:
    assert parse_config({"gateway": {"listen": "tcp:1234"}}).listen == ["tcp:1234"]
