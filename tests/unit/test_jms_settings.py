"""The ``jms`` connector's options reader: every problem named by its key, no JVM started."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from gateway.connectors.jms_settings import JmsSettings, detect_api
from gateway.connectors.registry import create_connector
from gateway.errors import ConfigError
from gateway.java_properties import read_properties_file as read_properties


def api_jar(folder: Path, namespace: str, name: str = "jms-api.jar") -> Path:
    jar = folder / name
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr(f"{namespace}/jms/ConnectionFactory.class", b"\xca\xfe\xba\xbe")
    return jar


def options(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    api_jar(tmp_path, "javax")
    base: dict[str, Any] = {"type": "jms", "classpath": ["*.jar"],
                            "connection_factory": {"class": "com.example.Factory",
                                                   "properties": {"brokerURL": "tcp://h:1", "retries": 3}}}
    base.update(extra)
    return base


def settings(tmp_path: Path, **extra: Any) -> JmsSettings:
    return JmsSettings.from_config("amq", options(tmp_path, **extra), base_dir=str(tmp_path), path="gw.toml")


def problem(tmp_path: Path, **extra: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, **extra)
    return caught.value


def test_defaults_and_the_provider_url(tmp_path: Path) -> None:
    read = settings(tmp_path)
    assert read.api == "javax"
    assert read.classpath == (str((tmp_path / "jms-api.jar").resolve()),)
    assert read.client_id == "jmsgateway-amq"
    assert (read.failure_retry_interval, read.max_retries, read.send_timeout) == (5000, -1, 30000)
    assert read.provider == "tcp://h:1"
    assert read.factory_properties == (("brokerURL", "tcp://h:1"), ("retries", 3))


def test_a_missing_jar_is_named_by_its_key(tmp_path: Path) -> None:
    error = problem(tmp_path, classpath=["*.jar", "lib/vendor-client.jar"])
    assert error.key == "connectors.amq.classpath[1]" and "vendor-client.jar" in error.problem
    assert error.path == "gw.toml"
    assert problem(tmp_path, classpath=["nothing-*.jar"]).key == "connectors.amq.classpath[0]"


def test_a_folder_brings_its_jars(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    api_jar(lib, "jakarta", "jakarta.jms-api.jar")
    read = JmsSettings.from_config("amq", {"type": "jms", "classpath": "lib",
                                           "connection_factory": {"class": "X"}}, base_dir=str(tmp_path))
    assert read.api == "jakarta"
    assert str(lib / "jakarta.jms-api.jar") in read.classpath


def test_without_a_jms_api_jar_the_namespace_must_be_set(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "client.jar").write_bytes(b"not a zip")
    base = {"type": "jms", "classpath": [str(other / "client.jar")], "connection_factory": {"class": "X"}}
    with pytest.raises(ConfigError) as caught:
        JmsSettings.from_config("amq", base)
    assert caught.value.key == "connectors.amq.classpath" and "api" in caught.value.problem
    assert JmsSettings.from_config("amq", {**base, "api": "jakarta"}).api == "jakarta"
    assert detect_api((str(other / "client.jar"),)) is None


def test_exactly_one_of_factory_and_jndi(tmp_path: Path) -> None:
    both = problem(tmp_path, jndi={"environment": {"java.naming.factory.initial": "x"}})
    assert both.key == "connectors.amq.connection_factory"
    neither = options(tmp_path)
    del neither["connection_factory"]
    with pytest.raises(ConfigError):
        JmsSettings.from_config("amq", neither, base_dir=str(tmp_path))


def test_jndi_environment_and_properties_file(tmp_path: Path) -> None:
    (tmp_path / "jndi.properties").write_text(
        "# comment\njava.naming.factory.initial = com.example.InitialContextFactory\n"
        "java.naming.provider.url: tcp://from-file:1\nqueue.orders=ORDERS\n")
    base = options(tmp_path)
    del base["connection_factory"]
    base["jndi"] = {"properties_file": "jndi.properties", "connection_factory": "CF",
                    "environment": {"java.naming.provider.url": "tcp://override:2"}}
    read = JmsSettings.from_config("amq", base, base_dir=str(tmp_path))
    environment = dict(read.jndi_environment)
    assert environment["java.naming.factory.initial"] == "com.example.InitialContextFactory"
    assert environment["queue.orders"] == "ORDERS"
    assert read.provider == "tcp://override:2" and read.jndi_factory_name == "CF"
    base["jndi"] = {"environment": {"java.naming.provider.url": "x"}}
    with pytest.raises(ConfigError) as caught:
        JmsSettings.from_config("amq", base, base_dir=str(tmp_path))
    assert caught.value.key == "connectors.amq.jndi.environment"
    assert "java.naming.factory.initial" in caught.value.problem


@pytest.mark.parametrize(("extra", "key"), [
    ({"max_retry": 3}, "connectors.amq.max_retry"),
    ({"max_retries": -2}, "connectors.amq.max_retries"),
    ({"api": "javaz"}, "connectors.amq.api"),
    ({"destinations": "ldap"}, "connectors.amq.destinations"),
    ({"connection_factory": {"klass": "X"}}, "connectors.amq.connection_factory.klass"),
    ({"connection_factory": {"properties": {}}}, "connectors.amq.connection_factory.class"),
    ({"connection_factory": {"class": "X", "properties": {"a": [1]}}},
     "connectors.amq.connection_factory.properties.a"),
    ({"jvm_options": "-Xmx1g"}, "connectors.amq.jvm_options"),
])
def test_bad_options_are_named(tmp_path: Path, extra: dict[str, Any], key: str) -> None:
    assert problem(tmp_path, **extra).key == key


def test_misspelt_option_gets_a_suggestion(tmp_path: Path) -> None:
    assert "max_retries" in problem(tmp_path, max_retry=3).problem


def test_registry_finds_the_connector_by_type_without_a_jvm(tmp_path: Path) -> None:
    import jpype

    running_before = jpype.isJVMStarted()  # another test of this process may have started it
    connector = create_connector("amq", options(tmp_path, classpath=[str(tmp_path / "*.jar")]), reactor=None,
                                 gateway_id="gw", registry=None)
    assert type(connector).__name__ == "JmsConnector"
    assert connector.settings.client_id == "gw-amq"  # type: ignore[attr-defined]
    assert jpype.isJVMStarted() == running_before
    with pytest.raises(ConfigError) as caught:
        create_connector("amq", {"type": "jsm"}, reactor=None, gateway_id="gw", registry=None)
    assert caught.value.key == "connectors.amq.type" and "jms" in caught.value.problem


def test_read_properties_continuations(tmp_path: Path) -> None:
    path = tmp_path / "p.properties"
    path.write_text("a = one \\\n  two\n! bang comment\nb:2\nc\n")
    assert read_properties(str(path)) == {"a": "one two", "b": "2", "c": ""}


def test_the_config_file_takes_a_jms_table_and_names_a_bad_type(tmp_path: Path) -> None:
    from gateway.config import parse_config

    raw = options(tmp_path, classpath=[str(tmp_path / "*.jar")], jvm_options=["-Xmx64m"])
    config = parse_config({"connectors": {"amq": raw}}, "gw.toml")
    connector = create_connector("amq", config.connectors["amq"], reactor=None, gateway_id="gw", registry=None)
    settings = connector.settings  # type: ignore[attr-defined]
    assert settings.factory_class == "com.example.Factory" and settings.jvm_options == ("-Xmx64m",)
    with pytest.raises(ConfigError) as caught:
        parse_config({"connectors": {"amq": {**raw, "type": "jsm"}}}, "gw.toml")
    assert caught.value.key == "connectors.amq.type" and "did you mean 'jms'" in caught.value.problem
    with pytest.raises(ConfigError) as caught:
        parse_config({"connectors": {"amq": {**raw, "max_retry": 1}}}, "gw.toml")
    assert caught.value.key == "connectors.amq.max_retry"
