"""Who the command line acts as, and the verdict episode it looks up for the operator.

Locally the principal is the operating-system user, as ``local:<name>``: the CLI opens the
store directly, so the grant policy (``LOOM_GRANTS``/``LOOM_GRANTS_FILE``, else the app's)
is what limits the capabilities ``loom start --capability`` may grant, and every start,
resume, verdict and cancel is recorded with that name.
"""

from __future__ import annotations

import getpass

import click

from loom.errors import VerdictError
from loom.grants import GrantPolicy
from loom.runtime import Runtime


def local_principal() -> str:
    """``local:<user>``: the CLI's principal."""
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "local:unknown"


def apply_env_grants(runtime: Runtime) -> None:
    """Use the deployment's grant policy when the environment configures one."""
    policy = GrantPolicy.from_env()
    if policy is not None:
        runtime.grants = policy


async def open_episode(runtime: Runtime, execution_id: str, step_id: str) -> int:
    """The seq of the ``EffectInDoubt`` a verdict on ``step_id`` would settle, shown to the user.

    Raises:
        VerdictError: The step is not in doubt.
    """
    result = await runtime.result(execution_id)
    for doubt in result.in_doubt:
        if doubt.step_id == step_id and doubt.episode is not None:
            click.echo(
                f"settling episode {doubt.episode} of step {step_id} "
                f"(effect {doubt.effect}, in doubt since seq {doubt.episode})",
                err=True,
            )
            return doubt.episode
    known = ", ".join(d.step_id for d in result.in_doubt) or "none"
    raise VerdictError(
        f"step {step_id!r} of {execution_id!r} is not in doubt (in doubt: {known})",
        details={"step_id": step_id},
    )
