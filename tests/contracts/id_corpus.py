"""Execution ids every entry point and every store must treat alike (see ``loom.ids``).

``VALID`` ids are accepted everywhere and come back byte for byte; ``INVALID`` ids are
refused everywhere, naming the rule, with nothing written.
"""

from __future__ import annotations

VALID = [
    "e1",
    "order-42",
    "pubsub-1234567890",
    "550e8400-e29b-41d4-a716-446655440000",
    "commission.case:release-7",
    "case-1:3:12",
    "a b",  # a space inside
    "Zoë — 東京",  # letters of any script, an em dash
    "ǅ\u00a0x",  # a no-break space inside is not edge whitespace
    "😀 emoji",
    "x" * 255,  # the longest ASCII id
    "é" * 127,  # 254 bytes
    "%2F%2e%2e",  # percent signs are plain characters, never decoded
    "?q=1#frag",
    "trailing.",
    "_x_",
    "__x",
    "x__",
    "a..b",
    "-",
]

INVALID = [
    "",
    "a/b",
    "a/b/c",
    "/leading",
    "trailing/",
    "a\\b",
    ".",
    "..",
    ".x",
    "../loom.db",
    "__x__",
    "____",
    "__.*__",
    "a\nb",
    "a\rb",
    "a\tb",
    "nul\x00byte",
    "del\x7f",
    "bidi\u202eoverride",
    "zero\u200bwidth",
    "line\u2028separator",
    "lone\ud800surrogate",
    " leading",
    "trailing ",
    "\u00a0nbsp-edge",
    "x" * 256,
    "é" * 128,  # 256 bytes
    "x" * 1501,  # over Firestore's own limit
]
