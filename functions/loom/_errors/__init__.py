"""The definitions behind :mod:`loom.errors`, by family; private: import from ``loom.errors``.

A package rather than modules beside ``errors.py`` so the engine package's top level stays
small (its modules are the foundations and the public names).
"""
