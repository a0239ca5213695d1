"""TLS for `fleetval sim serve`: a self-signed CA and the API server's certificate for 127.0.0.1
and localhost, kept in the state folder and reused while valid.

kubectl (client-go) sends a bearer token over https only, so the simulated API server serves TLS
and its kubeconfig carries the CA as `certificate-authority-data`, as a real cluster's does.

The CA's private key is never written: nothing else is ever signed with it, and a certificate
near its end is replaced by a new CA and certificate (the kubeconfig is rewritten at each start).
`cryptography` comes with Airflow (fleetval's own dependencies do not name it): only `sim serve`
imports this module.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import ipaddress
import os
import pathlib
import ssl
import tempfile
from typing import Final, NamedTuple

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BUNDLE_NAME: Final = "apiserver-tls.pem"  # the server's certificate, the CA's, the server's key
LOCK_NAME: Final = "apiserver-tls.lock"
VALID_FOR: Final = dt.timedelta(days=365)
RENEW_BEFORE: Final = dt.timedelta(days=7)  # a server left running for days stays valid
CLOCK_SKEW: Final = dt.timedelta(hours=1)  # valid from a little before now, as kubeadm's certificates
LOOPBACK_IP: Final = ipaddress.IPv4Address("127.0.0.1")
LOOPBACK_NAME: Final = "localhost"
_CA_NAME: Final = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetval-sim-ca")])
_SERVER_NAME: Final = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetval-sim-apiserver")])


class ServerTls(NamedTuple):
    context: ssl.SSLContext  # the server's side
    ca_pem: bytes  # what clients trust (the kubeconfig's certificate-authority-data)


def server_tls(state_dir: pathlib.Path, now: dt.datetime | None = None) -> ServerTls:
    """The certificates in `state_dir`, made (or replaced) unless still valid at `now`."""
    now = now or dt.datetime.now(dt.UTC)
    state_dir.mkdir(parents=True, exist_ok=True)
    bundle = state_dir / BUNDLE_NAME
    # Two servers started at once on one state folder would otherwise each write a bundle and
    # one of them would load the other's, with a CA its own kubeconfig does not name.
    with open(state_dir / LOCK_NAME, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ca_pem = _valid_ca(bundle, now)
        if ca_pem is None:
            ca_pem = _write_bundle(bundle, now)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(bundle)
    return ServerTls(context, ca_pem)


def _valid_ca(bundle: pathlib.Path, now: dt.datetime) -> bytes | None:
    """The CA's PEM when `bundle` holds a server certificate for loopback, issued by that CA, with
    its key, both valid beyond now + RENEW_BEFORE; None otherwise (missing, damaged, expiring)."""
    try:
        data = bundle.read_bytes()
        server, ca = x509.load_pem_x509_certificates(data)
        key = serialization.load_pem_private_key(_key_block(data), password=None)
        server.verify_directly_issued_by(ca)
        names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return None
    for cert in (server, ca):
        if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc - RENEW_BEFORE:
            return None
    if key.public_key() != server.public_key():
        return None
    if LOOPBACK_IP not in names.get_values_for_type(x509.IPAddress):
        return None
    if LOOPBACK_NAME not in names.get_values_for_type(x509.DNSName):
        return None
    return ca.public_bytes(serialization.Encoding.PEM)


def _key_block(data: bytes) -> bytes:
    start = data.find(b"-----BEGIN PRIVATE KEY-----")
    if start < 0:
        raise ValueError("no private key in the bundle")
    return data[start:]


def _write_bundle(bundle: pathlib.Path, now: dt.datetime) -> bytes:
    """A new CA and server certificate written to `bundle` (readable by its owner only, replaced
    whole); returns the CA's PEM."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    server_key = ec.generate_private_key(ec.SECP256R1())
    ca_key_id = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    not_before, not_after = now - CLOCK_SKEW, now + VALID_FOR
    ca = (
        x509.CertificateBuilder()
        .subject_name(_CA_NAME)
        .issuer_name(_CA_NAME)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ca_key_id, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(_SERVER_NAME)
        .issuer_name(_CA_NAME)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(LOOPBACK_NAME), x509.IPAddress(LOOPBACK_IP)]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_key_id), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    key_pem = server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # load_cert_chain's order: the certificate first, then its chain, the key anywhere
    data = server.public_bytes(serialization.Encoding.PEM) + ca_pem + key_pem
    fd, tmp = tempfile.mkstemp(dir=bundle.parent, prefix=f".{bundle.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, bundle)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return ca_pem


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,  # an ECDSA server key signs the TLS handshake
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
