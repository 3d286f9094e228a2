"""The worker's caller check on Cloud Run: the caller's Google-signed ID token, verified again.

Cloud Run IAM (``roles/run.invoker``) is the first wall: it lets through only principals
holding the invoker role, whatever their token says about anything else. This check is the
defense in depth behind it, in the worker itself: every route but ``/health`` and
``/openapi.json`` needs ``Authorization: Bearer <ID token>`` whose

* signature verifies against Google's published certificates,
* ``aud`` is this service's URL (``LOOM_AUTH_AUDIENCE``; comma-separated to accept more
  than one, e.g. the URL of a custom domain too),
* ``iss`` is Google's, and ``exp``/``iat`` hold (with a little clock skew),
* ``email`` is verified and in the allowed principals (``LOOM_AUTH_PRINCIPALS``,
  comma-separated).

The principal returned (and recorded as ``by`` in the log) is that email. Send the token in
``Authorization``: Cloud Run passes it through, while it strips the signature from an
``X-Serverless-Authorization`` header before the request reaches the container (replacing
it with ``SIGNATURE_REMOVED_BY_GOOGLE``).

**Behind Cloud Run's IAM** (``LOOM_AUTH_TRUST_CLOUD_RUN=true``, which Terraform sets on
services that admit no public invoker): a request reaches the container only after Cloud
Run verified the ID token it carried for IAM, in ``X-Serverless-Authorization`` when there
is one, else in ``Authorization``. That token is then the credential, and one whose
signature Cloud Run removed is accepted on Cloud Run's word: its claims are checked (issuer,
expiry, audience, a verified email among the principals), not its signature. This is how an
operator's own identity reaches the console: ``gcloud run services proxy`` sends the
operator's gcloud ID token in ``X-Serverless-Authorization`` (its audience is gcloud's own
OAuth client id, :data:`GCLOUD_CLIENT_ID`, which Terraform adds to the audiences when
operators are configured). A token in any other header is ignored; outside that mode a
token without its signature is refused.

Configure it with ``LOOM_CALLER_AUTH=loom_gcp.auth:google_id_token`` (built from the
environment on first use). ``LOOM_AUTH_CERTS_URL`` replaces Google's certificate endpoint
(tests point it at one they serve; offline there is no real Google token issuer).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from google.auth import exceptions as google_exceptions
from google.auth import jwt

from loom.errors import ConfigurationError
from loom.workers.auth import AuthRequest, Forbidden, Unauthenticated

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
GOOGLE_ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})
GCLOUD_CLIENT_ID = "32555940559.apps.googleusercontent.com"
"""The audience of a user's ID token minted by gcloud (``gcloud auth print-identity-token``,
``gcloud run services proxy``): Cloud Run IAM accepts it for its users."""
REMOVED_SIGNATURE = "SIGNATURE_REMOVED_BY_GOOGLE"
SERVERLESS_HEADER = "X-Serverless-Authorization"

CertsFetcher = Callable[[], Mapping[str, str]]


def http_certs(url: str, timeout: float = 10.0) -> CertsFetcher:
    """Fetch ``{key id: x509 PEM}`` from ``url`` (Google's format)."""

    def fetch() -> Mapping[str, str]:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = json.loads(response.read())
        if not isinstance(data, dict):
            raise ValueError(f"certificates at {url} are not a JSON object")
        return {str(k): str(v) for k, v in data.items()}  # type: ignore[misc]

    return fetch


class _CachedCerts:
    """Certificates kept for ``ttl`` seconds; fetched again at once for an unknown key id."""

    def __init__(self, fetch: CertsFetcher, ttl: float, clock: Callable[[], float]) -> None:
        self._fetch, self._ttl, self._clock = fetch, ttl, clock
        self._certs: Mapping[str, str] = {}
        self._at = float("-inf")
        self._lock = threading.Lock()

    def get(self, key_id: str | None) -> Mapping[str, str]:
        with self._lock:
            stale = self._clock() - self._at > self._ttl
            if stale or (key_id is not None and key_id not in self._certs):
                self._certs, self._at = self._fetch(), self._clock()
            return self._certs


class GoogleIdTokenAuth:
    """An engine authenticator (``AuthRequest -> principal``) over Google ID tokens.

    Args:
        audience: The service URL tokens must be minted for (or several).
        principals: The emails allowed to call (service accounts or users).
        certs: Fetches the signing certificates (default: Google's endpoint).
        issuers: Accepted ``iss`` values.
        clock_skew: Seconds of tolerance on ``iat``/``exp``.
        clock: Epoch seconds, for the certificate cache and the expiry of a token Cloud
            Run verified.
        certs_ttl: Seconds certificates are cached.
        trust_cloud_run: Behind Cloud Run's IAM: the token Cloud Run verified is the
            credential, its removed signature accepted (see the module docstring).

    Raises:
        ConfigurationError: No audience or no principals.
    """

    def __init__(
        self,
        audience: str | Iterable[str],
        principals: Iterable[str],
        *,
        certs: CertsFetcher | None = None,
        issuers: Iterable[str] = GOOGLE_ISSUERS,
        clock_skew: int = 10,
        clock: Callable[[], float] = time.time,
        certs_ttl: float = 3600.0,
        trust_cloud_run: bool = False,
    ) -> None:
        self.trust_cloud_run = trust_cloud_run
        self._clock = clock
        given = [audience] if isinstance(audience, str) else list(audience)
        self.audiences = [a.strip() for a in given if a.strip()]
        self.principals = frozenset(p.strip() for p in principals if p.strip())
        if not self.audiences or not self.principals:
            raise ConfigurationError("the ID-token check needs an audience and principals")
        self.issuers = frozenset(issuers)
        self.clock_skew = clock_skew
        self._certs = _CachedCerts(certs or http_certs(GOOGLE_CERTS_URL), certs_ttl, clock)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GoogleIdTokenAuth:
        """Built from ``LOOM_AUTH_AUDIENCE``, ``LOOM_AUTH_PRINCIPALS``, ``LOOM_AUTH_CERTS_URL``.

        Raises:
            ConfigurationError: A required variable is missing.
        """
        env = os.environ if env is None else env
        audiences = [a for a in env.get("LOOM_AUTH_AUDIENCE", "").split(",") if a.strip()]
        principals = env.get("LOOM_AUTH_PRINCIPALS", "").split(",")
        if not audiences or not any(p.strip() for p in principals):
            raise ConfigurationError(
                "LOOM_CALLER_AUTH=loom_gcp.auth:google_id_token needs LOOM_AUTH_AUDIENCE "
                "(the service URL) and LOOM_AUTH_PRINCIPALS (comma-separated emails)"
            )
        certs_url = env.get("LOOM_AUTH_CERTS_URL") or GOOGLE_CERTS_URL
        trust = env.get("LOOM_AUTH_TRUST_CLOUD_RUN", "").strip().lower() in ("1", "true", "yes")
        return cls(audiences, principals, certs=http_certs(certs_url), trust_cloud_run=trust)

    def __call__(self, request: AuthRequest) -> str:
        """The verified email of the caller.

        Raises:
            Unauthenticated: No bearer token.
            Forbidden: A token that does not verify, or names someone not allowed.
        """
        token = self._credential(request.headers)
        if token is None:
            raise Unauthenticated(f"{request.action} needs 'Authorization: Bearer <ID token>'")
        if token.endswith(f".{REMOVED_SIGNATURE}"):
            claims = self._verified_by_cloud_run(token)
        else:
            claims = self._verify(token)
        email = claims.get("email")
        if not isinstance(email, str) or claims.get("email_verified") is not True:
            raise Forbidden("the ID token names no verified email")
        if email not in self.principals:
            raise Forbidden(f"{email} may not call this service")
        return email

    def _credential(self, headers: Mapping[str, str] | Any) -> str | None:
        """The token to check: behind Cloud Run's IAM, the one Cloud Run verified (in
        ``X-Serverless-Authorization`` when the request has one); else ``Authorization``."""
        if self.trust_cloud_run and headers.get(SERVERLESS_HEADER) is not None:
            return _bearer(headers, SERVERLESS_HEADER)
        return _bearer(headers)

    def _verified_by_cloud_run(self, token: str) -> Mapping[str, Any]:
        """The claims of a token Cloud Run verified and stripped of its signature.

        Raises:
            Forbidden: Not behind Cloud Run's IAM, or claims that do not hold.
        """
        if not self.trust_cloud_run:
            raise Forbidden(
                "ID token refused: its signature was removed, and this check does not run "
                "behind Cloud Run's IAM (LOOM_AUTH_TRUST_CLOUD_RUN)"
            )
        try:
            claims: Mapping[str, Any] = jwt.decode(token, verify=False)
        except (ValueError, google_exceptions.GoogleAuthError) as exc:
            raise Forbidden(f"ID token refused: {exc}") from None
        if claims.get("iss") not in self.issuers:
            raise Forbidden(f"ID token refused: issuer {claims.get('iss')!r} is not Google's")
        audiences: Any = claims.get("aud")
        given: list[Any] = (
            cast(list[Any], audiences) if isinstance(audiences, list) else [audiences]
        )
        if not any(isinstance(a, str) and a in self.audiences for a in given):
            raise Forbidden("ID token refused: it is for another audience")
        expiry = claims.get("exp")
        if not isinstance(expiry, int | float) or expiry + self.clock_skew < self._clock():
            raise Forbidden("ID token refused: it expired")
        return claims

    def _verify(self, token: str) -> Mapping[str, Any]:
        try:
            header = jwt.decode_header(token)
            key_id = header.get("kid") if isinstance(header, dict) else None  # type: ignore[union-attr]
            claims: Mapping[str, Any] = jwt.decode(
                token,
                certs=self._certs.get(key_id if isinstance(key_id, str) else None),
                audience=self.audiences,
                clock_skew_in_seconds=self.clock_skew,
            )
        except (ValueError, google_exceptions.GoogleAuthError, OSError) as exc:
            raise Forbidden(f"ID token refused: {exc}") from None
        if claims.get("iss") not in self.issuers:
            raise Forbidden(f"ID token refused: issuer {claims.get('iss')!r} is not Google's")
        return claims


def _bearer(headers: Mapping[str, str] | Any, name: str = "Authorization") -> str | None:
    scheme, _, token = str(headers.get(name, "")).partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class _FromEnv:
    """``google_id_token``: a :class:`GoogleIdTokenAuth` built from the environment on the
    first request (so importing this module never fails)."""

    def __init__(self) -> None:
        self._auth: GoogleIdTokenAuth | None = None

    def __call__(self, request: AuthRequest) -> str:
        if self._auth is None:
            self._auth = GoogleIdTokenAuth.from_env()
        return self._auth(request)


google_id_token = _FromEnv()
"""What ``LOOM_CALLER_AUTH=loom_gcp.auth:google_id_token`` names."""
