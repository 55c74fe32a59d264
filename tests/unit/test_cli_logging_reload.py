"""The log observer (level, noise, JSON lines) and what a SIGHUP reload applies to a built gateway."""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import Logger, LogLevel, LogPublisher, globalLogPublisher
from twisted.python.failure import Failure

from gateway.app import Gateway, build_gateway
from gateway.config import GatewayConfig, parse_config
from gateway.errors import ConfigError
from gateway.log_observer import GatewayLogObserver, json_line_observer, json_record, parse_level
from gateway.reload import ConfigReloader
from gateway.security.passwords import hash_password
from tests.support.log_events import observer as log_observer

PASSWORD = "correct-horse-battery-staple-7"


def logged(level: LogLevel, lines: list[tuple[LogLevel, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    observer = GatewayLogObserver(log_observer(seen.append), level)
    publisher = LogPublisher(observer)
    log = Logger(namespace="test", observer=publisher)
    for line_level, text, fields in lines:
        log.emit(line_level, text, **fields)
    return seen


def test_levels_below_the_threshold_are_dropped() -> None:
    lines: list[tuple[LogLevel, str, dict[str, Any]]] = [(LogLevel.debug, "d", {}), (LogLevel.info, "i", {}),
                                                         (LogLevel.warn, "w", {}),
             (LogLevel.error, "e", {})]
    assert [e["log_format"] for e in logged(LogLevel.info, lines)] == ["i", "w", "e"]
    assert [e["log_format"] for e in logged(LogLevel.warn, lines)] == ["w", "e"]
    assert len(logged(LogLevel.debug, lines)) == 4


def test_twisteds_starting_factory_lines_are_debug_only() -> None:
    noise = [(LogLevel.info, "Starting factory {factory!r}", {"factory": object()}),
             (LogLevel.info, "Stopping factory {factory!r}", {"factory": object()})]
    assert logged(LogLevel.info, noise) == []
    assert len(logged(LogLevel.debug, noise)) == 2


def test_parse_level() -> None:
    assert parse_level("WARNING") is LogLevel.warn
    assert parse_level("debug") is LogLevel.debug
    with pytest.raises(ValueError, match="one of debug, info, warn, error, critical"):
        parse_level("loud")


def test_json_lines_are_one_object_each_with_plain_fields() -> None:
    stream = io.StringIO()
    observer = json_line_observer(stream)
    log = Logger(namespace="gateway.x", observer=LogPublisher(observer))
    log.info("STOMP connect from {peer} (login {login})", peer="127.0.0.1:5", login="alice", obj=object())
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        log.failure("broken {what}", Failure(), what="thing")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "info" and first["namespace"] == "gateway.x"
    assert first["message"] == "STOMP connect from 127.0.0.1:5 (login alice)"
    assert first["peer"] == "127.0.0.1:5" and first["login"] == "alice" and "obj" not in first
    assert first["time"].endswith("Z")
    assert second["level"] == "critical" and "ZeroDivisionError" in second["traceback"]


def test_json_record_of_a_legacy_event() -> None:
    record = json_record({"log_format": "{log_text}", "log_text": "hello", "log_level": LogLevel.info,
                          "message": ("hello",), "isError": 0, "log_time": 0.0})
    assert record["message"] == "hello" and record["level"] == "info"
    assert record["time"] == "1970-01-01T00:00:00.000Z"


# -- SIGHUP ---------------------------------------------------------------------------------------

AUTH = """
[auth]
users = {{ alice = "{alice}", bob = "{bob}" }}
allow_weak_passwords = true
[[authorization]]
destination = "/queue/orders.*"
write = ["{writer}"]
read = ["*"]
"""


@pytest.fixture(scope="module")
def hashed() -> str:
    return hash_password(PASSWORD, 4)


def gateway_from(tmp_path: Path, text: str) -> tuple[Gateway, Path]:
    path = tmp_path / "gw.toml"
    path.write_text(text)
    config = parse_config(tomllib.loads(text), str(path))
    config.gateway.data_dir = str(tmp_path / "data")
    return build_gateway(config, MemoryReactorClock()), path


def loader(path: Path, tmp_path: Path) -> Any:
    def load() -> GatewayConfig:
        from gateway.config import load_config

        config = load_config(str(path))
        config.gateway.data_dir = str(tmp_path / "data")
        return config

    return load


def password_of(gateway: Gateway, login: str) -> str:
    """The hash the running portal checks ``login`` against (the real login runs bcrypt in the reactor's
    thread pool: the integration tests log in)."""
    from twisted.cred.credentials import IUsernamePassword

    assert gateway.portal is not None
    checker: Any = gateway.portal.checkers[IUsernamePassword]
    return str(checker.passwords[login])


def test_a_reload_applies_authorization_logins_and_the_log_level(tmp_path: Path, hashed: str) -> None:
    gateway, path = gateway_from(tmp_path, AUTH.format(alice=hashed, bob=hashed, writer="alice"))
    observer = GatewayLogObserver(log_observer(lambda event: None), LogLevel.info)
    reloader = ConfigReloader(gateway, loader(path, tmp_path), gateway.reactor, observer)
    authorizer = gateway.factory.authorizer
    assert authorizer is not None
    assert authorizer.permits("alice", "write", "/queue/orders.a")
    assert not authorizer.permits("bob", "write", "/queue/orders.a")

    new_hash = hash_password("another-long-passphrase-9", 4)
    path.write_text(AUTH.format(alice=new_hash, bob=hashed, writer="bob")
                    + '[gateway]\nlog_level = "warn"\n[stomp]\ndefault_prefetch = 7\n')
    outcome = reloader.reload()
    assert outcome is not None
    assert "gateway.log_level = warn" in outcome.applied and observer.level is LogLevel.warn
    assert "auth logins" in outcome.applied
    assert "authorization (1 entries)" in outcome.applied
    assert outcome.restart == ["stomp"]
    assert gateway.factory.authorizer is authorizer  # the same object, new rules
    assert authorizer.permits("bob", "write", "/queue/orders.a")
    assert not authorizer.permits("alice", "write", "/queue/orders.a")
    assert password_of(gateway, "alice") == new_hash


def test_a_reload_applies_the_inactive_queue_timeout_to_the_next_sweep(tmp_path: Path, hashed: str) -> None:
    text = AUTH.format(alice=hashed, bob=hashed, writer="alice")
    gateway, path = gateway_from(tmp_path, text)
    reloader = ConfigReloader(gateway, loader(path, tmp_path), gateway.reactor)
    assert gateway.broker.inactive.timeout == 300
    path.write_text(text + "[broker]\ninactive_queue_timeout = 5\n")
    outcome = reloader.reload()
    assert outcome is not None
    assert "broker.inactive_queue_timeout = 5" in outcome.applied and outcome.restart == []
    assert gateway.broker.inactive.timeout == 5
    path.write_text(text + "[broker]\ninactive_queue_timeout = 0\nmax_redeliveries = 1\n")
    outcome = reloader.reload()
    assert outcome is not None
    assert "broker.inactive_queue_timeout = 0" in outcome.applied and outcome.restart == ["broker"]
    assert gateway.broker.inactive.timeout == 0


def test_a_reload_applies_max_scheduled_size_to_the_next_scheduled_send(tmp_path: Path, hashed: str) -> None:
    text = AUTH.format(alice=hashed, bob=hashed, writer="alice")
    gateway, path = gateway_from(tmp_path, text)
    reloader = ConfigReloader(gateway, loader(path, tmp_path), gateway.reactor)
    assert gateway.broker.scheduler.max_size == 1 << 30
    path.write_text(text + '[broker]\nmax_scheduled_size = "64MB"\n')
    outcome = reloader.reload()
    assert outcome is not None
    assert f"broker.max_scheduled_size = {64 << 20}" in outcome.applied and outcome.restart == []
    assert gateway.broker.scheduler.max_size == 64 << 20


def test_turning_authentication_off_or_other_auth_keys_need_a_restart(tmp_path: Path, hashed: str) -> None:
    gateway, path = gateway_from(tmp_path, AUTH.format(alice=hashed, bob=hashed, writer="alice"))
    reloader = ConfigReloader(gateway, loader(path, tmp_path), gateway.reactor)
    path.write_text("[auth]\nmax_failed_logins = 9\n")
    outcome = reloader.reload()
    assert outcome is not None
    assert "auth.allow_weak_passwords, auth.max_failed_logins" in outcome.restart
    assert "auth.users (turning authentication off)" in outcome.restart
    assert password_of(gateway, "alice") == hashed  # still in force


def test_a_bad_file_changes_nothing(tmp_path: Path, hashed: str) -> None:
    gateway, path = gateway_from(tmp_path, AUTH.format(alice=hashed, bob=hashed, writer="alice"))
    reloader = ConfigReloader(gateway, loader(path, tmp_path), gateway.reactor)
    path.write_text(AUTH.format(alice=hashed, bob=hashed, writer="group:nobody"))  # an unknown group
    seen: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(log_observer(seen.append))
    try:
        assert reloader.reload() is None
    finally:
        globalLogPublisher.removeObserver(log_observer(seen.append))
    assert any("nothing changed" in str(e.get("log_format")) for e in seen)
    assert gateway.factory.authorizer is not None
    assert gateway.factory.authorizer.permits("alice", "write", "/queue/orders.a")


def test_the_reloader_reports_a_load_error(tmp_path: Path, hashed: str) -> None:
    gateway, path = gateway_from(tmp_path, AUTH.format(alice=hashed, bob=hashed, writer="alice"))

    def broken() -> GatewayConfig:
        raise ConfigError("not valid TOML", path=str(path))

    assert ConfigReloader(gateway, broken, gateway.reactor).reload() is None


def test_twistd_options_refuse_an_unknown_log_format_or_level() -> None:
    from twisted.python import usage

    from gateway.tap import Options

    options = Options()
    options.parseOptions(["--log-format", "json", "--log-level", "WARN"])
    assert options["log-format"] == "json" and options["log-level"] == "WARN"
    with pytest.raises(usage.UsageError, match="one of text, json"):
        Options().parseOptions(["--log-format", "xml"])
    with pytest.raises(usage.UsageError, match="unknown log level 'loud'"):
        Options().parseOptions(["--log-level", "loud"])


def test_login_limits_without_logins_are_warned_about_at_start(tmp_path: Path, hashed: str) -> None:
    """``[auth.limits]`` counts what a login holds; with no ``[auth]`` users no connection has a login, so the
    limits do nothing: the start says so (with users, no such line)."""
    seen: list[dict[str, Any]] = []
    for part in ("a", "b"):
        (tmp_path / part).mkdir()
    globalLogPublisher.addObserver(log_observer(seen.append))
    try:
        gateway_from(tmp_path / "a", '[auth.limits."*"]\nmax_queues = 3\n')
        warned = [e for e in seen if "has no effect" in str(e.get("log_format"))]
        seen.clear()
        gateway_from(tmp_path / "b", AUTH.format(alice=hashed, bob=hashed, writer="alice")
                     + '[auth.limits."*"]\nmax_queues = 3\n')
    finally:
        globalLogPublisher.removeObserver(log_observer(seen.append))
    assert len(warned) == 1 and "[auth.limits]" in str(warned[0]["log_format"])
    assert not [e for e in seen if "has no effect" in str(e.get("log_format"))]
