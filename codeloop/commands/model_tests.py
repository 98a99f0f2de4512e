"""`codeloop model-tests`: the tests tdd episodes wrote, as a file clean can vet.

Reads trajectories (a directory of Parquet shards, e.g. data/trajectories) and writes one
JSONL row ``{"task_id": ..., "tests": [assert, ...]}`` per function task whose tdd
episodes wrote asserts (distinct, in the order first written). Point
``clean.augment.model_tests`` at the file: clean keeps a test only if the reference
passes it and a mutant of the reference fails it; nothing here is trusted.
Exit status: 0 written (also when no episode wrote tests); 2 no trajectories at the path.
"""

from __future__ import annotations

import sys

HELP = "Collect the asserts tdd episodes wrote into a JSONL file for clean.augment.model_tests."


def add_arguments(p) -> None:
    p.add_argument(
        "--trajectories", default="data/trajectories", help="directory of trajectory Parquet shards"
    )
    p.add_argument("--out", default="data/model_tests.jsonl", help="the JSONL file to write")


def collect(trajs) -> list[dict]:
    """One row per task id (sorted) with the distinct asserts its tdd episodes wrote."""
    from codeloop.rewards.modes import model_asserts

    by_task: dict[str, list[str]] = {}
    for t in trajs:
        if t.metadata.episode_mode != "tdd" or not t.model_tests:
            continue
        seen = by_task.setdefault(t.task_id, [])
        seen += [a for a in model_asserts(t.model_tests) if a not in seen]
    return [{"task_id": k, "tests": v} for k, v in sorted(by_task.items()) if v]


def run(args) -> int:
    from pathlib import Path

    from codeloop.io import read_trajectories, write_jsonl

    if not Path(args.trajectories).is_dir():
        print(f"codeloop model-tests: no trajectories at {args.trajectories}", file=sys.stderr)
        return 2
    rows = collect(read_trajectories(args.trajectories))
    write_jsonl(args.out, rows)
    print(f"{args.out}: {len(rows)} tasks, {sum(len(r['tests']) for r in rows)} tests")
    return 0
