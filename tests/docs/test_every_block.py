"""Every code block of the README and the documentation site is run by a test under
``tests/docs`` or says, in a ``<!-- not run: ... -->`` comment before it, why it cannot be."""

from __future__ import annotations

from tests.docs import test_concepts, test_first_screen, test_guides, test_operations
from tests.docs.blocks import Block, Ref, block, blocks, pages

RUN: list[Ref] = [
    *test_first_screen.RUNS,
    *test_concepts.RUNS,
    *test_guides.RUNS,
    *test_operations.RUNS,
]


def unaccounted() -> list[Block]:
    ran = {block(ref) for ref in RUN}
    return [b for page in pages() for b in blocks(page) if b not in ran and b.reason is None]


def test_every_block_is_run_or_says_why_not() -> None:
    left = unaccounted()
    assert left == [], "\n\n".join(f"{b.page}:\n{b.code[:200]}" for b in left)


def test_a_block_that_is_run_does_not_also_say_it_is_not() -> None:
    assert [ref for ref in RUN if block(ref).reason is not None] == []


def test_the_pages_hold_blocks_of_each_kind() -> None:
    found = [b for page in pages() for b in blocks(page)]
    assert {"python", "bash"} <= {b.lang for b in found}
    assert any(b.reason for b in found) and len(found) > len(RUN)
