"""Fixtures of the fault tests: each test module gets its own Firestore emulator."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests import procs
from tests.emulators import _sdk_root, _unavailable  # pyright: ignore[reportPrivateUsage]
from tests.faults.emulator import Emulator


@pytest.fixture(scope="module")
def emulator(
    offline_google_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Emulator]:
    """This module's own emulator; ``FIRESTORE_EMULATOR_HOST`` points at it meanwhile."""
    if shutil.which("java") is None:
        _unavailable("java is not installed (the Firestore emulator needs it)")
    jar = _sdk_root() / "platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
    if not jar.is_file():
        _unavailable(f"Firestore emulator jar missing: {jar}")
    emu = Emulator(jar, procs.free_port(), tmp_path_factory.mktemp("faults-firestore"))
    emu.start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("FIRESTORE_EMULATOR_HOST", emu.host)
            yield emu
    finally:
        emu.stop()
