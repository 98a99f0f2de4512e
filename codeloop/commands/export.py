"""`codeloop export`: scored trajectories as an SFT, DPO, GRPO or transitions dataset.

Writes DIR/train.parquet (``datasets.load_dataset(DIR)`` reads it); see
codeloop.data.export for each format's columns. Exit status: 0 written; 2 bad input
(missing trajectories, unknown format, nothing to export, a corrupt row).
"""

from __future__ import annotations

import json
import sys

HELP = "Export scored trajectories for other trainers (sft, dpo, grpo, transitions)."


def add_arguments(p) -> None:
    from codeloop.data.export import FORMATS

    p.add_argument(
        "--trajectories", required=True, help="shard directory, one .parquet or data/archive"
    )
    p.add_argument("--format", required=True, choices=FORMATS, help="the dataset layout")
    p.add_argument("--out", required=True, help="output directory (train.parquet inside)")


def run(args) -> int:
    from codeloop.data.export import export, load_for_export

    try:
        summary = export(load_for_export(args.trajectories), args.format, args.out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"codeloop export: {args.trajectories}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, sort_keys=True))
    return 0
