"""`codeloop preflight`: the pre-training checklist; exit 1 when any check fails."""

from __future__ import annotations

import sys

from codeloop.config import ConfigError, load_params

HELP = "Run the pre-training checklist (what must hold before training); non-zero exit on a failure."


def add_arguments(p) -> None:
    p.add_argument("--params", default="params.yaml", help="params file")
    p.add_argument("--root", default=".", help="repository root")
    p.add_argument("--skip-golden", action="store_true", help="do not run the reward golden test")


def run(args) -> int:
    from codeloop.ops.preflight import run_preflight

    try:
        params = load_params(args.params)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    report = run_preflight(params, args.root, run_golden=not args.skip_golden)
    print(report.render())
    return 0 if report.ok else 1
