"""The certificates of a loopback cluster: one CA, the serving certificates of kube-apiserver, the
virtual kubelet and Kueue's webhooks, and one client certificate per identity (the admin, each
control-plane component, the virtual kubelet, and kube-apiserver towards the kubelets).

ECDSA P-256 keys: a certificate costs about a millisecond, so a fresh cluster needs no cache. A CA
made with `rsa=True` gives RSA keys in PKCS#1, the only kind cert-controller (Kueue's certificate
manager) reads.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=365)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _new_key(use_rsa: bool) -> PrivateKey:
    if use_rsa:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _write(directory: Path, stem: str, cert: x509.Certificate, key: PrivateKey) -> KeyPair:
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_format = (
        serialization.PrivateFormat.TraditionalOpenSSL  # PKCS#1
        if isinstance(key, rsa.RSAPrivateKey)
        else serialization.PrivateFormat.PKCS8
    )
    pair.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, key_format, serialization.NoEncryption())
    )
    pair.key.chmod(0o600)
    return pair


class CertificateAuthority:
    """A CA in `directory` (`<stem>.crt`, `<stem>.key`) that signs the cluster's certificates. Its
    name is also its DNS name (cert-controller, which Kueue's certificates go through, checks it)."""

    def __init__(
        self,
        directory: Path,
        *,
        name: str = "fleetval-loopback-ca",
        organizations: tuple[str, ...] = (),
        stem: str = "ca",
        rsa: bool = False,
    ) -> None:
        self.directory = directory
        self._rsa = rsa
        directory.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        self._key = _new_key(rsa)
        subject = _name(name, organizations)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pair = _write(directory, stem, self._cert, self._key)

    @property
    def pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
        client: bool = False,
        server: bool = False,
    ) -> KeyPair:
        """A certificate for `common_name` (RBAC user; `organizations` are its groups); `hosts`
        (DNS names or IP addresses) make it a serving certificate for them."""
        now = dt.datetime.now(dt.UTC)
        key = _new_key(self._rsa)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return _write(self.directory, stem, builder.sign(self._key, hashes.SHA256()), key)


def signing_key(path: Path) -> Path:
    """The service-account token signing key (an ECDSA key; kube-apiserver signs ES256)."""
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path
