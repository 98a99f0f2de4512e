"""`codeloop export`: scored trajectories as an SFT, DPO, GRPO or transitions dataset.

Writes DIR/train.parquet (``datasets.load_dataset(DIR)`` reads it); see
codeloop.data.export for each format's columns. ``--format swebench --tasks TASKS``
writes the repository tasks of a tasks.parquet as SWE-bench instances instead
(DIR/test.parquet and DIR/instances.jsonl: codeloop.data.repos.swebench_export).
Exit status: 0 written; 2 bad input (missing trajectories or tasks, unknown format,
nothing to export, a corrupt row).
"""

from __future__ import annotations

import json
import sys

HELP = (
    "Export scored trajectories for other trainers (sft, dpo, grpo, transitions), "
    "or repository tasks as a SWE-bench dataset (swebench)."
)


def add_arguments(p) -> None:
    from codeloop.data.export import FORMATS

    p.add_argument(
        "--trajectories", default="", help="shard directory, one .parquet or data/archive"
    )
    p.add_argument("--tasks", default="", help="--format swebench: a tasks.parquet")
    p.add_argument(
        "--format", required=True, choices=(*FORMATS, "swebench"), help="the dataset layout"
    )
    p.add_argument("--out", required=True, help="output directory (train.parquet inside)")


def run(args) -> int:
    from codeloop.data.export import export, load_for_export

    if args.format == "swebench":  # repository tasks, not trajectories
        return _swebench(args)
    if not args.trajectories:
        print("codeloop export: --trajectories is required", file=sys.stderr)
        return 2
    try:
        summary = export(load_for_export(args.trajectories), args.format, args.out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"codeloop export: {args.trajectories}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, sort_keys=True))
    return 0


def _swebench(args) -> int:
    from codeloop.data.repos.swebench_export import export_swebench

    if not args.tasks:
        print("codeloop export: --format swebench needs --tasks", file=sys.stderr)
        return 2
    try:
        summary = export_swebench(args.tasks, args.out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"codeloop export: {args.tasks}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, sort_keys=True))
    return 0
