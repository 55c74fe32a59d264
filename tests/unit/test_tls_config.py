"""The stomp+ssl connector's TLS options: checked when the configuration loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from gateway.connectors.stomp_broker import StompBrokerConnector
from gateway.connectors.stomp_settings import StompBrokerSettings
from gateway.errors import ConfigError
from tests.support.tls import TlsFiles, make_tls_files

URI = "stomp+ssl://broker.local:61614"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def settings(base_dir: str = "", **options: Any) -> StompBrokerSettings:
    return StompBrokerSettings.from_config("amq", {"uri": URI, **options}, base_dir=base_dir)


def problem(**options: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        settings(**options)
    return caught.value


def test_defaults_and_relative_paths(tls: TlsFiles) -> None:
    plain = settings()
    assert plain.tls is not None and plain.tls.hostname == "broker.local" and plain.tls.ca is None
    relative = settings(base_dir=str(tls.ca_cert.parent), tls_ca="ca.pem", tls_cert="client.pem",
                        tls_key="client-key.pem", tls_hostname="amq.example")
    assert relative.tls is not None
    assert relative.tls.ca == str(tls.ca_cert) and relative.tls.key == str(tls.client_key)
    assert relative.tls.hostname == "amq.example"
    assert StompBrokerSettings.from_config("amq", {"uri": "stomp://h:61613"}).tls is None


def test_a_certificate_file_holding_key_and_certificate(tls: TlsFiles, tmp_path: Path) -> None:
    both = tmp_path / "client-both.pem"
    both.write_bytes(tls.client_cert.read_bytes() + tls.client_key.read_bytes())
    assert settings(tls_ca=str(tls.ca_cert), tls_cert=str(both)).tls is not None


def test_problems_name_the_key_and_the_file(tls: TlsFiles, tmp_path: Path) -> None:
    missing = problem(tls_ca=str(tmp_path / "nope.pem"))
    assert missing.key == "connectors.amq.tls_ca" and "nope.pem" in str(missing)
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    assert "holds no PEM certificate" in str(problem(tls_ca=str(empty)))
    assert problem(tls_cert=str(empty)).key == "connectors.amq.tls_cert"
    assert problem(tls_cert=str(tls.client_cert)).key == "connectors.amq.tls_cert"  # no key anywhere
    wrong_key = problem(tls_cert=str(tls.client_cert), tls_key=str(tls.server_key))
    assert wrong_key.key == "connectors.amq.tls_key"
    assert problem(tls_key=str(tls.client_key)).key == "connectors.amq.tls_key"  # a key without a certificate
    assert problem(tls_hostname="").key == "connectors.amq.tls_hostname"
    assert "did you mean 'tls_ca'" in str(problem(tls_cafile="x"))


def test_tls_options_need_a_stomp_ssl_uri(tls: TlsFiles) -> None:
    with pytest.raises(ConfigError) as caught:
        StompBrokerSettings.from_config("amq", {"uri": "stomp://h:61613", "tls_ca": str(tls.ca_cert)})
    assert caught.value.key == "connectors.amq.tls_ca" and "stomp+ssl" in str(caught.value)


def test_the_connector_names_its_config_file(tmp_path: Path) -> None:
    config_file = tmp_path / "gateway.toml"
    with pytest.raises(ConfigError) as caught:
        StompBrokerConnector.from_config("amq", {"uri": URI, "tls_ca": "missing-ca.pem"}, reactor=Clock(),
                                         gateway_id="gw", path=str(config_file))
    assert str(tmp_path / "missing-ca.pem") in str(caught.value) and str(config_file) in str(caught.value)
