"""The ``mtls:`` endpoint parser: the options it takes and the errors that name what is wrong.

The handshake itself is tested with a real gateway process in tests/integration/test_mtls.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.endpoints import SSL4ServerEndpoint, serverFromString
from twisted.internet.testing import MemoryReactor

from gateway.security.tls_server import MutualTlsServerParser
from tests.support.tls import TlsFiles, make_tls_files


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def parse(**options: str) -> SSL4ServerEndpoint:
    return MutualTlsServerParser().parseStreamServer(MemoryReactor(), "61614", **options)


def test_a_complete_description_makes_an_endpoint_that_requires_client_certificates(tls: TlsFiles) -> None:
    endpoint = parse(privateKey=str(tls.server_key), certKey=str(tls.server_cert), caCerts=str(tls.ca_cert),
                     interface="127.0.0.1", backlog="7")
    assert (endpoint._port, endpoint._interface, endpoint._backlog) == (61614, "127.0.0.1", 7)
    options = endpoint._sslContextFactory
    assert options.verify and options.requireCertificate


def test_twisted_finds_the_parser_by_its_prefix(tls: TlsFiles) -> None:
    description = f"mtls:61614:privateKey={tls.server_key}:certKey={tls.server_cert}:caCerts={tls.ca_cert}"
    assert isinstance(serverFromString(MemoryReactor(), description), SSL4ServerEndpoint)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, "mtls: needs caCerts="),
        ({"caCerts": "CA", "verify": "yes"}, "mtls: unknown option(s) verify; options: privateKey, certKey"),
        ({"caCerts": "MISSING"}, "cannot read client CA file (caCerts)"),
        ({"caCerts": "KEY"}, "holds no PEM certificate"),
        ({"caCerts": "CA", "certKey": "CA"}, "cannot load the key"),
    ],
)
def test_bad_descriptions_say_what_is_wrong(tls: TlsFiles, tmp_path: Path, options: dict[str, str],
                                             problem: str) -> None:
    files = {"CA": str(tls.ca_cert), "KEY": str(tls.server_key), "MISSING": str(tmp_path / "none.pem")}
    given = {name: files.get(value, value) for name, value in options.items()}
    with pytest.raises(ValueError) as caught:
        parse(**{"privateKey": str(tls.server_key), "certKey": str(tls.server_cert), **given})
    assert problem in str(caught.value)
