"""``examples.orders`` is ``loom.examples.orders`` (the demo's flows ship inside the package, so
that ``loom demo`` runs after a plain install): this name keeps ``LOOM_APP=examples.orders:app``
and ``from examples import orders`` working, as the very same module object."""

import sys

from loom.examples import orders as _module

sys.modules[__name__] = _module
