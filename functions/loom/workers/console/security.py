"""Who may see the console and act through it, and how a browser proves it.

The console uses the worker's own checks (:mod:`loom.workers.auth`), never a check of its
own:

* **Reading** a page runs the *caller* authenticator (``LOOM_CALLER_AUTH``), as every API
  route does. With none configured, the worker is a loopback-only one (``loom serve``
  refuses another address without it), and the console answers only requests that come
  from a loopback address *and* name a loopback host: a page served to another machine, or
  to a browser tricked by DNS rebinding into calling a name it resolves to 127.0.0.1, is
  refused with 401.
* **Acting** (a verdict, a resume, a cancel) runs the same authenticator as the API route
  for that action, over the action, the execution id and the raw form body.

A browser cannot add an ``Authorization`` header to a form post, so the console accepts the
credential once (the sign-in page) and keeps it in an ``HttpOnly``, ``SameSite=Strict``
cookie scoped to ``/console``, which stands in for a missing ``Authorization`` header. A
request that does carry ``Authorization`` (an identity-aware proxy, ``gcloud run services
proxy``) keeps it for the caller check; the signed-in credential is what actions present,
so an operator can hold a verdict secret distinct from the caller's identity token.

Every form post is CSRF-checked: a random token in a ``SameSite=Strict`` cookie must come
back in the form (a page of another site can neither read nor set it), and the browser's
``Sec-Fetch-Site`` must say the post comes from this site (or, from a browser that does not
send it, the ``Origin``).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from urllib.parse import quote, unquote, urlsplit

from flask import Request
from werkzeug.datastructures import Headers

from loom.workers.auth import Authenticator, AuthError, AuthRequest, Forbidden, Unauthenticated
from loom.workers.http_base import Services

TOKEN_COOKIE = "loom_console_token"
CSRF_COOKIE = "loom_console_csrf"
CSRF_FIELD = "csrf"
COOKIE_PATH = "/console"
ANONYMOUS_LOCAL = "anonymous (loopback)"


def secure(req: Request) -> bool:
    """Whether the browser reached us over HTTPS (directly or through Cloud Run's front end)."""
    return req.scheme == "https" or req.headers.get("X-Forwarded-Proto", "") == "https"


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    """The host of a ``Host`` header, without its port (``[::1]:8080`` -> ``::1``)."""
    return urlsplit(f"//{host_header}").hostname or ""


def _with_cookie(req: Request) -> Headers:
    """The request headers, the signed-in credential standing in for a missing
    ``Authorization``."""
    headers = Headers(req.headers)
    token = req.cookies.get(TOKEN_COOKIE)
    if token and "Authorization" not in headers:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _for_action(req: Request) -> Headers:
    """The headers an action's check sees: the signed-in credential comes first."""
    headers = Headers(req.headers)
    token = req.cookies.get(TOKEN_COOKIE)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def reader(services: Services, req: Request, action: str, execution_id: str = "") -> str:
    """Who is reading: the caller check's principal, or anonymous on loopback only.

    Raises:
        AuthError: The caller check refused, or no check is configured and the request is
            not a loopback one.
    """
    if services.caller_auth is not None:
        return services.caller_auth(AuthRequest(action, execution_id, _with_cookie(req), b""))
    peer = req.remote_addr or ""
    if _is_loopback(peer) and _is_loopback(_host_name(req.host)):
        return ANONYMOUS_LOCAL
    raise Unauthenticated(
        "the console answers anonymous requests on loopback only: configure a caller "
        "authenticator (LOOM_CALLER_AUTH) to open it to other machines"
    )


def actor(
    check: Authenticator, req: Request, action: str, execution_id: str, body: bytes, who: str
) -> str:
    """The principal an action is recorded with: the caller's when a caller check named one
    (as the API records it), else whoever ``check`` accepts.

    Raises:
        AuthError: ``check`` refused the credential.
    """
    principal = check(AuthRequest(action, execution_id, _for_action(req), body))
    return who if who != ANONYMOUS_LOCAL else principal


def csrf_token(req: Request) -> tuple[str, bool]:
    """The CSRF token of this browser, and whether it is new (to be set as a cookie)."""
    token = req.cookies.get(CSRF_COOKIE, "")
    if len(token) >= 32:
        return token, False
    return secrets.token_urlsafe(32), True


def check_csrf(req: Request, form: Mapping[str, str]) -> None:
    """Refuse a form post that did not come from a page of this console.

    Raises:
        Forbidden: No CSRF cookie, a form token that differs, or a cross-site origin.
    """
    site = req.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        raise Forbidden(f"a {site} request cannot post to the console")
    # Only without Sec-Fetch-Site (an old browser) is Origin compared with our own host:
    # behind a local proxy (`gcloud run services proxy`) the two hosts differ legitimately.
    origin = req.headers.get("Origin")
    if site is None and origin is not None and origin not in (_origin(req), req.host_url[:-1]):
        raise Forbidden("the request comes from another origin")
    cookie = req.cookies.get(CSRF_COOKIE, "")
    sent = form.get(CSRF_FIELD, "")
    if len(cookie) < 32 or not hmac.compare_digest(cookie.encode(), sent.encode()):
        raise Forbidden("the form's CSRF token is missing or stale: reload the page and retry")


def _origin(req: Request) -> str:
    scheme = "https" if secure(req) else req.scheme
    return f"{scheme}://{req.host}"


def principal_of(services: Services, credential: str) -> str | None:
    """The principal one of the worker's checks (caller, verdict, resume) names for a bearer
    ``credential``, or ``None`` when none accepts it."""
    probe = AuthRequest("read", "", {"Authorization": f"Bearer {credential}"}, b"")
    for check in (services.caller_auth, services.verdict_auth, services.resume_auth):
        if check is None:
            continue
        try:
            return check(probe)
        except AuthError:
            continue
    return None


def signed_in_as(services: Services, req: Request) -> str | None:
    """Who the signed-in credential acts as (shown in the header), if a check accepts it."""
    credential = req.cookies.get(TOKEN_COOKIE, "")
    return principal_of(services, credential) if credential else None


# The key this process signs its one-off notices with: a notice cookie it did not write (one
# planted by another site sharing the domain, or by a script) is never shown as the page's.
_NOTICE_KEY = secrets.token_bytes(32)


def sign_notice(notice: str) -> str:
    """The cookie value carrying ``notice``: its MAC, then the notice percent-encoded."""
    text = quote(notice[:512])
    mac = hmac.new(_NOTICE_KEY, text.encode(), "sha256").hexdigest()
    return f"{mac}.{text}"


def read_notice(cookie: str) -> str:
    """The notice in a cookie :func:`sign_notice` made in this process; ``""`` for any other
    (planted, altered, or written by another instance: the notice is only a courtesy)."""
    mac, _, text = cookie.partition(".")
    expected = hmac.new(_NOTICE_KEY, text.encode(), "sha256").hexdigest()
    if not hmac.compare_digest(mac.encode(), expected.encode()):
        return ""
    return unquote(text)[:512]
