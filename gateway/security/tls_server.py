"""The ``mtls:`` listener: TLS that requires and verifies client certificates.

Twisted's ``ssl:`` endpoint serves TLS but never asks for a client
certificate.  ``mtls:`` takes the same options plus ``caCerts`` - a PEM file
of the CA certificates that sign the clients' certificates - and refuses
every client without a certificate one of them signed (ActiveMQ's
``needClientAuth=true``, RabbitMQ's ``verify_peer`` with
``fail_if_no_peer_cert``)::

    --listen mtls:61614:privateKey=server.key:certKey=server.pem:caCerts=clients-ca.pem

Options: ``privateKey``, ``certKey`` (default: the key file), ``caCerts``
(required), ``extraCertChain``, ``interface``, ``backlog``.  It is a Twisted
endpoint string parser (``twisted/plugins/jmsgateway.py`` registers it), so it
also works after a ``ws:`` prefix for WebSocket clients.  Files are read when
the listener is made: a missing or bad one stops start-up naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.interfaces import IStreamServerEndpointStringParser
from twisted.plugin import IPlugin
from zope.interface import implementer

from gateway.security.tls import pem_certificates


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read {what} {path}: {error.strerror}") from None


def _certificates(path: str, what: str) -> list[Any]:
    from twisted.internet.ssl import Certificate

    found = pem_certificates(_read(path, what))
    if not found:
        raise ValueError(f"{what} {path} holds no PEM certificate")
    return [Certificate.loadPEM(pem) for pem in found]


def server_options(private_key: str, cert_key: str, ca_certs: str, extra_chain: str | None = None) -> Any:
    """Twisted's server TLS options that require a client certificate signed by one of ``ca_certs``."""
    from twisted.internet.ssl import CertificateOptions, PrivateCertificate, trustRootFromCertificates

    pem = _read(cert_key, "certificate") + b"\n" + _read(private_key, "private key")
    try:
        server = PrivateCertificate.loadPEM(pem)
    except Exception as error:  # OpenSSL's errors for a key that does not fit, a malformed file ...
        raise ValueError(f"cannot load the key {private_key} with the certificate {cert_key}: {error}") from None
    chain = [c.original for c in _certificates(extra_chain, "certificate chain")] if extra_chain else None
    return CertificateOptions(
        privateKey=server.privateKey.original,
        certificate=server.original,
        extraCertChain=chain,
        # a trust root makes OpenSSL ask for a client certificate and refuse a missing or untrusted one
        trustRoot=trustRootFromCertificates(_certificates(ca_certs, "client CA file (caCerts)")),
    )


_OPTIONS = ("privateKey", "certKey", "caCerts", "extraCertChain", "interface", "backlog")


def mutual_tls_endpoint(reactor: Any, port: str, *, privateKey: str = "server.pem", certKey: str | None = None,
                        caCerts: str | None = None, extraCertChain: str | None = None, interface: str = "",
                        backlog: str = "50") -> SSL4ServerEndpoint:
    """The endpoint ``mtls:PORT:option=value...`` describes (raises ValueError naming the problem)."""
    if not caCerts:
        raise ValueError("mtls: needs caCerts=<PEM file of the CAs that sign the client certificates>")
    options = server_options(privateKey, certKey or privateKey, caCerts, extraCertChain)
    return SSL4ServerEndpoint(reactor, int(port), options, backlog=int(backlog), interface=interface)


@implementer(IPlugin, IStreamServerEndpointStringParser)
class MutualTlsServerParser:
    """``mtls:PORT:privateKey=…:certKey=…:caCerts=…`` (see the module docstring)."""

    prefix = "mtls"

    def parseStreamServer(self, reactor: Any, *args: Any, **kwargs: Any) -> SSL4ServerEndpoint:
        unknown = sorted(set(kwargs) - set(_OPTIONS))
        if unknown or len(args) != 1:
            problem = f"unknown option(s) {', '.join(unknown)}" if unknown else "expected mtls:PORT:option=value..."
            raise ValueError(f"mtls: {problem}; options: {', '.join(_OPTIONS)}")
        return mutual_tls_endpoint(reactor, str(args[0]), **kwargs)
