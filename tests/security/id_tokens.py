"""A stand-in for Google's ID-token issuer, for the caller-check tests.

No real Google token issuer exists offline, so the tests are the issuer: an RSA key and a
self-signed certificate, the certificate served on loopback in Google's format
(``{key id: PEM}``), and the worker's check pointed at it with ``LOOM_AUTH_CERTS_URL``.
"""

from __future__ import annotations

import datetime
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt, jwt

from tests import procs

AUDIENCE = "https://loom-worker-abc123-ew.a.run.app"
OPS = "ops@project.iam.gserviceaccount.com"


@dataclass
class Issuer:
    """A stand-in for Google's token issuer (see the module docstring)."""

    signer: crypt.RSASigner
    rogue: crypt.RSASigner
    certs_url: str
    cert: str = ""

    def certs(self) -> dict[str, str]:
        """The published certificates, ``{key id: PEM}`` (what a verifier fetches)."""
        return {"key-1": self.cert}

    def token(self, signer: crypt.RSASigner | None = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {
            "iss": "https://accounts.google.com",
            "aud": AUDIENCE,
            "sub": "1234567890",
            "email": OPS,
            "email_verified": True,
            "iat": now,
            "exp": now + 600,
            **claims,
        }
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(signer or self.signer, payload).decode()

    def bearer(self, **claims: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(**claims)}"}


def _key_and_cert(key_id: str) -> tuple[crypt.RSASigner, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test issuer")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    signer = crypt.RSASigner.from_string(pem, key_id=key_id)
    return signer, cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    signer, cert = _key_and_cert("key-1")
    rogue, _ = _key_and_cert("key-1")  # same key id, a key the certs endpoint never shows
    body = json.dumps({"key-1": cert}).encode()

    class Certs(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer((procs.LOOPBACK, 0), Certs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Issuer(signer, rogue, f"http://{procs.LOOPBACK}:{server.server_port}/certs", cert)
    finally:
        server.shutdown()
        server.server_close()
