"""Checks of the decision records Loom was specified from, one module per record; each
test quotes the sentence it checks."""
