"""``python -m examples.a2ui_callfunction``: run the A2UI callFunction example end to end."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from examples.a2ui_callfunction.demo import Report, run_example


def _problems(report: Report) -> list[str]:
    problems: list[str] = []
    greet, submit = report.ids["greet"], report.ids["submit"]
    if report.outputs.get(greet, {}).get("locale") != "fr-FR":
        problems.append("grain A did not return the client's locale")
    if report.in_doubt.get("status") != "in_doubt":
        problems.append("the killed call was not parked in doubt")
    if not report.outputs.get(submit, {}).get("confirmed"):
        problems.append("grain B did not complete after the verdict")
    if report.submissions != 1:
        problems.append(f"the client submitted {report.submissions} times, expected once")
    if set(report.refused.values()) - {401, 409}:
        problems.append(f"a bad reply was not refused: {report.refused}")
    if not all(r["same_output"] for r in report.replays.values()):
        problems.append("a replay diverged from its log")
    if report.client_calls_during_replay:
        problems.append("replay contacted the client")
    return problems


def main(argv: list[str] | None = None) -> None:
    """Run the example; exit 1 if anything did not end as the example expects.

    Its files go to ``--workdir`` (kept), or to a temporary folder that is removed when the
    example succeeds (kept, and named, when it fails or with ``--keep``).
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, help="where the log, ledger and server logs go")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--http-port", type=int, default=0, help="server HTTP port (0: free)")
    parser.add_argument("--ws-port", type=int, default=0, help="server WebSocket port (0: free)")
    args = parser.parse_args(argv)
    temporary = args.workdir is None
    workdir: Path = args.workdir or Path(tempfile.mkdtemp(prefix="loom-a2ui-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        report = asyncio.run(run_example(workdir, ports=(args.http_port, args.ws_port)))
        problems = _problems(report)
    except BaseException:
        print(f"the example stopped; its files are in {workdir}", file=sys.stderr)
        raise
    for problem in problems:
        print(f"FAILED: {problem}")
    if problems:
        print(f"its files are in {workdir}")
        sys.exit(1)
    if temporary and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
        print("a2ui callFunction example: both grains completed and replayed")
    else:
        print(f"a2ui callFunction example: both grains completed and replayed; files in {workdir}")


if __name__ == "__main__":
    main()
