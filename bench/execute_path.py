"""The modules one ``execute`` call runs code in, and the imports among them that climb back.

Runs one execution of a three-step flow on the in-memory store under ``sys.setprofile``,
collecting every module of the engine whose code ran, in first-visit order from the module
of ``Runtime.execute``. Then, over the engine's import graph (grimp; imports made for type
checking only left out) restricted to those modules, it walks the imports depth first from
that module and counts the *back edges*: imports of a module already on the walk's path,
each one a place where following the code climbs back up to where it came from (an import
cycle). A layered engine has none.

    python bench/execute_path.py            # this checkout
    python bench/execute_path.py --json     # machine-readable
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable
from types import FrameType
from typing import Any


def _ran(modules: list[str]) -> Any:
    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name.startswith("loom") and name not in seen:
                seen.add(name)
                modules.append(name)

    seen: set[str] = set()
    return profile


async def _one_execute(modules: list[str]) -> str:
    from loom import Loom
    from loom.runtime import Runtime
    from loom.store import InMemoryEventStore
    from loom.wire import ExecutionPackage

    app = Loom("path")

    @app.effect("double")
    async def double(ctx: Any, n: int) -> int:
        return n * 2

    @app.flow("three")
    async def three(ctx: Any, n: int) -> int:
        for _ in range(3):
            n = await ctx.execute(double, n)
        return n

    runtime = Runtime(app, InMemoryEventStore())
    await runtime.start("three", 1, execution_id="p", run=False)
    sys.setprofile(_ran(modules))
    try:
        result = await runtime.execute(ExecutionPackage(execution_id="p"))
    finally:
        sys.setprofile(None)
    assert result.status == "completed", result
    return type(runtime).execute.__module__


def _back_edges(start: str, modules: Iterable[str]) -> list[tuple[str, str]]:
    import grimp

    graph = grimp.build_graph("loom", exclude_type_checking_imports=True)
    keep = set(modules)
    back: list[tuple[str, str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def walk(module: str) -> None:
        state[module] = 1
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in keep:
                continue
            if state.get(imported) == 1:
                back.append((module, imported))
            elif imported not in state:
                walk(imported)
        state[module] = 2

    sys.setrecursionlimit(10_000)
    walk(start)
    for module in sorted(keep - set(state)):
        walk(module)
    return back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    modules: list[str] = []
    start = asyncio.run(_one_execute(modules))
    engine = [m for m in modules if not m.startswith("loom.store")]  # (the store is an SPI)
    back = _back_edges(start, engine)
    if args.json:
        print(json.dumps({"start": start, "modules": engine, "climbs": back}, indent=2))
        return
    print(f"one execute call runs code in {len(engine)} engine modules (from {start}):")
    print("  " + " -> ".join(m.removeprefix("loom.") for m in engine))
    print(f"imports among them that climb back up (back edges): {len(back)}")
    for importer, imported in back:
        print(f"  {importer} -> {imported}")


if __name__ == "__main__":
    main()
