"""A2UI ``callFunction`` from Loom flows: a client read (gate) and a client submission (effect).

Run it with ``python -m examples.a2ui_callfunction``; see ``README.md`` beside this file.
"""
