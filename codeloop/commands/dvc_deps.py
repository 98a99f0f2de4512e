"""`codeloop dvc-deps`: check (or --write) dvc.yaml's code deps against each stage's imports."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "Check dvc.yaml's code deps against each stage's import closure (--write: rewrite them)."


def add_arguments(p) -> None:
    p.add_argument("--root", default=".", help="repository root holding dvc.yaml")
    p.add_argument("--write", action="store_true", help="rewrite the deps instead of checking")


def run(args) -> int:
    from codeloop.ops.dvc_deps import check, write

    root = Path(args.root)
    try:
        if args.write:
            changed = write(root)
            print(f"{root / 'dvc.yaml'}: {'code deps rewritten' if changed else 'already current'}")
            return 0
        problems = check(root)
    except (OSError, ValueError, SyntaxError) as exc:
        print(f"codeloop dvc-deps: {exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problems; fix with `codeloop dvc-deps --write`", file=sys.stderr)
        return 1
    print(f"{root / 'dvc.yaml'}: code deps match every stage's imports")
    return 0
