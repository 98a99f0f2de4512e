"""`codeloop doctor`: diagnostics of the latest iteration with findings and fixes."""

from __future__ import annotations

import sys

from codeloop.config import ConfigError, load_params

HELP = "Diagnose the latest iteration (reward, code, stalls, judge stability, versions): findings and suggested fixes."


def add_arguments(p) -> None:
    p.add_argument("--params", default="params.yaml", help="params file")
    p.add_argument("--root", default=".", help="repository root")
    p.add_argument("--no-exec", action="store_true", help="skip the sandbox stability check")


def run(args) -> int:
    from codeloop.ops.doctor import render, run_doctor

    try:
        params = load_params(args.params)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    executor = None
    if not args.no_exec:
        from codeloop.sandbox import make_executor

        executor = make_executor(params.sandbox)
    try:
        findings = run_doctor(params, args.root, executor)
    except FileNotFoundError as exc:
        print(f"doctor: {exc}; run the pipeline first (dvc repro)", file=sys.stderr)
        return 2
    finally:
        if executor is not None:
            executor.close()
    print(render(findings))
    return 0 if all(f.ok for f in findings) else 1
