"""``python -m loom`` is the ``loom`` command."""

from loom.cli import main

main()
