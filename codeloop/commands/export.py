"""`codeloop export`: scored trajectories as an SFT, DPO, GRPO or transitions dataset.

Writes DIR/train.parquet (``datasets.load_dataset(DIR)`` reads it); see
codeloop.data.export for each format's columns, for function and agent episodes. Agent
episodes (repository tasks) are exported with their task from ``--tasks`` (default
data/clean/tasks.parquet, read only when agent episodes are exported); ``--kind`` keeps
one kind of episode (dpo needs one: its function and agent pairs have different layouts).
``--format swebench --tasks TASKS`` writes the repository tasks of a tasks.parquet as
SWE-bench instances instead (DIR/test.parquet and DIR/instances.jsonl:
codeloop.data.repos.swebench_export).
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
    from codeloop.schema import TASK_KINDS

    p.add_argument(
        "--trajectories", default="", help="shard directory, one .parquet or data/archive"
    )
    p.add_argument(
        "--tasks",
        default="",
        help="tasks of the agent episodes (default data/clean/tasks.parquet); "
        "--format swebench: the tasks.parquet to convert",
    )
    p.add_argument(
        "--format", required=True, choices=(*FORMATS, "swebench"), help="the dataset layout"
    )
    p.add_argument("--out", required=True, help="output directory (train.parquet inside)")
    p.add_argument(
        "--kind", choices=TASK_KINDS, help="only episodes of this task kind (repo: agent episodes)"
    )


def run(args) -> int:
    from codeloop.data.export import export, load_for_export, of_kind
    from codeloop.io import read_tasks
    from codeloop.paths import Paths
    from codeloop.schema import is_agent_episode

    if args.format == "swebench":  # repository tasks, not trajectories
        return _swebench(args)
    if not args.trajectories:
        print("codeloop export: --trajectories is required", file=sys.stderr)
        return 2
    tasks_path, tasks = str(args.tasks or Paths().clean_tasks), None
    try:
        trajs = load_for_export(args.trajectories)
        trajs = of_kind(trajs, args.kind) if args.kind else trajs
        if args.format != "transitions" and any(is_agent_episode(t) for t in trajs):
            tasks = {t.task_id: t for t in read_tasks(tasks_path)}
        summary = export(trajs, args.format, args.out, tasks)
    except (FileNotFoundError, ValueError) as exc:
        where = f" (tasks: {tasks_path})" if tasks is not None else ""
        print(f"codeloop export: {args.trajectories}: {exc}{where}", file=sys.stderr)
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
