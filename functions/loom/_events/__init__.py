"""The event models behind :mod:`loom.events`, by family; private: import from ``loom.events``.

A package rather than modules beside ``events.py`` so the engine package's top level stays
small (its modules are the foundations and the public names).
"""
