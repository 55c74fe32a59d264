"""TLS material for tests: a private CA and certificates it signed, written as files.

:func:`make_tls_files` writes a CA certificate, a server certificate for
``localhost`` / ``127.0.0.1`` (PEM key and certificate, and a PKCS#12 keystore
for Java brokers) and a client certificate, all made with ``cryptography``.
Tests use them for the gateway's ``ssl:`` listener, for ActiveMQ's
``stomp+ssl`` connector, and as a CA the gateway trusts (``tls_ca``).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEYSTORE_PASSWORD = "changeit"


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the files :func:`make_tls_files` wrote."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    server_keystore: Path
    """PKCS#12: server key and certificate, password :data:`KEYSTORE_PASSWORD`."""
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                 issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool, usage: x509.ObjectIdentifier | None,
                 names: list[x509.GeneralName]) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                          encipher_only=False, decipher_only=False), critical=True)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_tls_files(directory: Path, ca_name: str = "jmsgateway test CA") -> TlsFiles:
    """Write a CA, a ``localhost`` server certificate and a client certificate into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate(ca_name, ca_key, _name(ca_name), ca_key, ca=True, usage=None, names=[])
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _certificate(
        "localhost", server_key, ca_cert.subject, ca_key, ca=False, usage=ExtendedKeyUsageOID.SERVER_AUTH,
        names=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _certificate("jmsgateway client", client_key, ca_cert.subject, ca_key, ca=False,
                               usage=ExtendedKeyUsageOID.CLIENT_AUTH, names=[])
    pem = serialization.Encoding.PEM
    files = TlsFiles(
        ca_cert=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server-key.pem",
        server_keystore=directory / "server.p12",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
    )
    files.ca_cert.write_bytes(ca_cert.public_bytes(pem))
    files.server_cert.write_bytes(server_cert.public_bytes(pem))
    files.server_key.write_bytes(_pem_key(server_key))
    files.client_cert.write_bytes(client_cert.public_bytes(pem))
    files.client_key.write_bytes(_pem_key(client_key))
    files.server_keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", server_key, server_cert, [ca_cert],
        serialization.BestAvailableEncryption(KEYSTORE_PASSWORD.encode())))
    return files
