"""``loom``: the command line (``loom --help``), assembled from the modules of this package.

``loom.cli.base`` holds what commands share (settings, the embedded runtime, the click
group :func:`main`); each command lives in ``loom.cli.commands`` or a module of its own
group, and is added to the group here.
"""

from __future__ import annotations

from loom.cli.base import main
from loom.cli.bulk import bulk
from loom.cli.commands import cancel, demo, execute, resume, serve, show, start, verdict
from loom.cli.deploy import register as register_deploy_commands
from loom.cli.fork import fork
from loom.cli.ls import list_executions
from loom.cli.messages import get_event, send
from loom.cli.purge import purge
from loom.cli.queues import queues
from loom.cli.retry import retry
from loom.cli.schedules import schedules
from loom.cli.streams import stream
from loom.cli.updates import query, update

__all__ = ["main"]

for command in (start, execute, resume, verdict, cancel, show, demo, serve):
    main.add_command(command)
register_deploy_commands(main)
for command in (list_executions, purge, retry, fork, bulk, schedules, queues, send, get_event):
    main.add_command(command)
for command in (update, query, stream):
    main.add_command(command)

if __name__ == "__main__":  # pragma: no cover
    main()
