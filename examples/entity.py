"""``examples.entity`` is ``loom.examples.entity`` (the demo's flows ship inside the package, so
that ``loom demo`` runs after a plain install): this name keeps ``LOOM_APP=examples.entity:app``
and ``from examples import entity`` working, as the very same module object."""

import sys

from loom.examples import entity as _module

sys.modules[__name__] = _module
