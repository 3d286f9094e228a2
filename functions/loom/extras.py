"""Optional backends and the pip extra each needs.

The base install serves the engine, SQLite and the HTTP worker; a backend named by URL
(``firestore://``, ``gs://``, ``cloudtasks://``, ``cloudrun://``, ``s3://``) or the A2UI
WebSocket transport imports a client library that only an extra installs.
:func:`requires_extra` turns that library's absence into an error saying which extra to
install, instead of a bare ``ModuleNotFoundError`` from deep inside the backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator

from loom.errors import MissingExtraError

DISTRIBUTION = "loom-cloudrun"

# Top-level module -> the extra that installs it.
EXTRA_OF_MODULE = {
    "google": "gcp",
    "grpc": "gcp",
    "proto": "gcp",
    "boto3": "s3",
    "botocore": "s3",
    "websockets": "a2ui",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "VERSION"


def install_hint(extra: str) -> str:
    """How to install ``extra``.

    Loom is not published on a package index, so the hint never names a distribution there
    (anyone could register the name): it installs the extra from Loom's source, or from the
    wheel ``python -m build`` makes of it.
    """
    wheel = f"dist/loom_cloudrun-{_version()}-py3-none-any.whl"
    return (
        f"install it from Loom's source: pip install '.[{extra}]' in a checkout of Loom, or "
        f"pip install '{wheel}[{extra}]' with the wheel `python -m build` makes there"
    )


@contextlib.contextmanager
def requires_extra(what: str) -> Generator[None]:
    """Run imports for ``what``; a missing optional library names the extra to install.

    Args:
        what: What needs the library, for the message (``"firestore://"``, ``"LOOM_BLOBS
            gs://"``...).

    Raises:
        MissingExtraError: A module that an extra installs is missing (also an
            ``ImportError``). Any other missing module propagates unchanged.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        module = exc.name or ""
        extra = EXTRA_OF_MODULE.get(module.partition(".")[0])
        if extra is None:
            raise
        raise MissingExtraError(
            f"{what} needs the {extra!r} extra ({module} is not installed): {install_hint(extra)}",
            details={"extra": extra, "module": module},
        ) from exc
