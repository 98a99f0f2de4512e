"""`codeloop clean`: the clean stage on any sources, outside DVC.

    codeloop clean --source KIND:PATH [--source ...] --out DIR [--params params.yaml]
                   [--frozen KIND[:PATH] ...] [--verify-runs N] [--backend local|subprocess]

KIND is one of codeloop.data.loaders.KINDS (``auto`` detects the format from the fields).
Writes DIR/tasks.parquet, DIR/frozen/<set>.parquet, DIR/quarantine.jsonl,
DIR/report.json and DIR/manifest.json with the same code the dvc stage runs; thresholds
and the rest come from the params file's ``clean`` section when it exists. Exit 0 when
the stage ran (bad rows are quarantined, not fatal), 2 for an unusable source or
params, 3 when the sandbox itself failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from codeloop.config import ConfigError, Params, SourceSpec, load_params
from codeloop.data.validate import SourceError
from codeloop.sandbox.base import SandboxError

HELP = "Clean task sources into a versioned, deduplicated, leak-free task set."


def add_arguments(p) -> None:
    p.add_argument("--source", action="append", required=True, metavar="KIND:PATH",
                   help="training source, e.g. mbpp:/data/mbpp.jsonl (repeatable)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--frozen", action="append", metavar="KIND[:PATH]",
                   help="frozen eval set (default: params clean.frozen, i.e. humaneval)")
    p.add_argument("--params", default="params.yaml", help="params file (optional)")
    p.add_argument(
        "--verify-runs", type=int, help="override clean.verify_runs and clean.repo_verify_runs"
    )
    p.add_argument("--backend", choices=["local", "subprocess", "docker"],
                   help="override sandbox.backend")


def parse_source(text: str) -> SourceSpec:
    """``KIND:PATH`` (or ``synthetic:N`` / ``synthetic_repo:N``, or a bare packaged kind
    like ``humaneval``)."""
    kind, _, rest = text.partition(":")
    if kind in ("synthetic", "synthetic_repo"):
        return SourceSpec(kind=kind, n=int(rest or 100))
    return SourceSpec(kind=kind, path=rest)


def _params(args) -> Params:
    base = load_params(args.params) if Path(args.params).exists() else Params()
    clean = base.clean.model_copy(
        update={
            "sources": [parse_source(s) for s in args.source],
            # --source names the whole input: the embedded default's synthetic repos
            # (clean.repo_tasks) are not added behind the caller's back
            "repo_tasks": base.clean.repo_tasks.model_copy(update={"enabled": False}),
            **({"frozen": [parse_source(s) for s in args.frozen]} if args.frozen else {}),
            **(
                {"verify_runs": args.verify_runs, "repo_verify_runs": args.verify_runs}
                if args.verify_runs is not None
                else {}
            ),
        }
    )
    sandbox = base.sandbox
    if args.backend:
        sandbox = sandbox.model_copy(update={"backend": args.backend})
    # Re-validate the whole mapping so an override gets the same checks as params.yaml.
    data = base.model_dump()
    data["clean"], data["sandbox"] = clean.model_dump(), sandbox.model_dump()
    return Params.model_validate(data)


def run(args) -> int:
    from codeloop.data.curate import curate as run_clean

    try:
        params = _params(args)
        report = run_clean(params, args.out, metrics_path=None)
    except (ConfigError, SourceError, ValueError) as exc:
        print(f"codeloop clean: {exc}", file=sys.stderr)
        return 2
    except SandboxError as exc:
        print(f"codeloop clean: sandbox failed: {exc}", file=sys.stderr)
        return 3
    reasons = ", ".join(f"{k} {v}" for k, v in report["dropped_by_reason"].items()) or "none"
    print(
        f"rows in {report['rows_in']}: kept {report['kept']} "
        f"(train {report['kept_train']}, held-out {report['kept_heldout']}), "
        f"dropped {report['dropped']} ({reasons}), quarantined {report['quarantined']}; "
        f"balanced={report['balanced']}"
    )
    print(f"dataset_version {report['dataset_version']}")
    print(f"wrote {args.out}/{{tasks.parquet,quarantine.jsonl,report.json,manifest.json}}")
    return 0
