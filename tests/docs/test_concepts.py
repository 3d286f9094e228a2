"""The concept pages' examples run and print what their comments say."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import Ref, run_python

EXPECTED = {
    Ref("docs/concepts/flows.md", 'Loom("hello")'): "completed hello ada",
    Ref("docs/concepts/flows.md", 'Loom("demo")'): "suspended\nexpired",
    Ref("docs/concepts/delivery.md", 'durability="batched"'): "300",
}
RUNS = list(EXPECTED)


@pytest.mark.parametrize("ref", RUNS, ids=lambda r: f"{r.page}:{r.marker}")
def test_the_example_prints_what_it_says(ref: Ref, tmp_path: Path) -> None:
    assert run_python(ref, tmp_path).strip() == EXPECTED[ref]
