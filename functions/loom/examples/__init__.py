"""The example apps ``loom demo`` runs, shipped inside the package so that a plain install
runs the demo from any folder: :mod:`loom.examples.orders` (an order priced, reserved,
approved and charged) and :mod:`loom.examples.entity` (bank accounts as entity flows).

Point the command line at one with ``LOOM_APP=loom.examples.orders:app``. In a checkout,
``examples.orders`` and ``examples.entity`` name the same modules.
"""
