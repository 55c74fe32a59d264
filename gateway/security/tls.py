"""TLS for the gateway's own connections to brokers (``stomp+ssl://``).

:class:`ClientTls` holds a connector's TLS options - which CA certificates to
trust (``tls_ca``, PEM; the system's trust store by default), an optional
client certificate for brokers that require one (``tls_cert`` / ``tls_key``,
PEM), and the host name the broker's certificate must carry
(``tls_hostname``, the URI's host by default) - and turns them into Twisted's
client TLS options.  Files are read and checked when the configuration is
loaded, so a missing or unreadable file is a startup error naming its key.
The server side (``--listen ssl:...``) is Twisted's ``ssl:`` endpoint.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.errors import ConfigError

TLS_OPTIONS = ("tls_ca", "tls_cert", "tls_key", "tls_hostname")
_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ClientTls:
    """A connector's checked TLS options (absolute paths) and the Twisted client TLS
    options built from them (``creator``, read once when the configuration loads)."""

    hostname: str
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    creator: Any = field(default=None, compare=False, repr=False)
    """Twisted's client TLS options (an ``IOpenSSLClientConnectionCreator``)."""

    @classmethod
    def from_options(cls, options: dict[str, Any], *, hostname: str, base_dir: str, key: Any) -> ClientTls:
        """Read the ``tls_*`` options; ``key(option)`` names an option in errors; relative
        paths are relative to ``base_dir`` (the configuration file's directory)."""

        def path(option: str) -> str | None:
            value = options.get(option)
            if value is None:
                return None
            if not isinstance(value, str) or not value:
                raise ConfigError(f"must be a file path, not {value!r}", key=key(option))
            return os.path.join(base_dir, os.path.expanduser(value))

        name = options.get("tls_hostname", hostname)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"must be a host name, not {name!r}", key=key("tls_hostname"))
        tls = cls(hostname=name, ca=path("tls_ca"), cert=path("tls_cert"), key=path("tls_key"))
        if tls.key is not None and tls.cert is None:
            raise ConfigError("a client key needs its certificate (tls_cert)", key=key("tls_key"))
        # read and check every file now: a bad one is a startup error
        return replace(tls, creator=tls._build_creator(key))

    def _build_creator(self, key: Any) -> Any:
        """Twisted's client TLS options from the files; ``key(option)`` names an option in errors."""
        try:
            from twisted.internet import ssl
        except ImportError as error:  # pyOpenSSL / service_identity missing
            raise ConfigError(f"TLS needs Twisted's TLS extra (pip install 'twisted[tls]'): {error}",
                              key=key("uri")) from None
        trust: Any = None
        if self.ca is not None:
            blocks = pem_certificates(_read(self.ca, key("tls_ca")))
            if not blocks:
                raise ConfigError(f"{self.ca} holds no PEM certificate", key=key("tls_ca"))
            trust = ssl.trustRootFromCertificates([_loaded(ssl.Certificate, block, self.ca, key("tls_ca"))
                                                   for block in blocks])
        client: Any = None
        if self.cert is not None:
            pem = _read(self.cert, key("tls_cert"))
            if self.key is not None:
                pem += b"\n" + _read(self.key, key("tls_key"))
            client = _loaded(ssl.PrivateCertificate, pem, self.cert, key("tls_key" if self.key else "tls_cert"))
        return ssl.optionsForClientTLS(self.hostname, trustRoot=trust, clientCertificate=client)


def pem_certificates(data: bytes) -> list[bytes]:
    """The PEM certificate blocks in ``data`` (a CA bundle, a chain), in order."""
    found: list[bytes] = _PEM_CERTIFICATE.findall(data)
    return found


def _read(path: str, option: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}", key=option) from None


def _loaded(kind: Any, pem: bytes, path: str, option: str) -> Any:
    try:
        return kind.loadPEM(pem)
    except Exception as error:  # OpenSSL's errors are not one type
        raise ConfigError(f"{path} is not a usable PEM {kind.__name__}: {error}", key=option) from None
