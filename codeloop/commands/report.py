"""`codeloop report`: a readable summary of the last night (or `dvc repro`)."""

from __future__ import annotations

import json
import sys

HELP = "Summarise the night: each stage's headline numbers and the change since promotion."


def add_arguments(p) -> None:
    p.add_argument("--root", default=".", help="repository root (reads metrics/, history/)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from codeloop.evaluate.history import HistoryError
    from codeloop.ops.report import build_report, render

    try:
        report = build_report(args.root)
    except (ValueError, HistoryError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0
