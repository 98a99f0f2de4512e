"""`codeloop archive query|snapshot`: the trajectory archive (data/archive/).

``snapshot`` writes history/archive_manifest.json (the archive's part files and md5s: what
the train stage reads for replay / RFT, its dvc dep); the nightly flow writes it itself.

Prints one JSON line per episode (trajectory_id, task_id, iteration, reward_fn_version,
reward, terminal_reason, kind, final_code, and final_diff: an agent episode's answer), or
with ``--count`` only how many matched. ``--passing`` matches function episodes that passed
every visible test and agent episodes the judge resolved.
Exit status: 0 answered (also when nothing matched); 2 no archive at the path.
"""

from __future__ import annotations

import json
import sys

HELP = "Query the trajectory archive (e.g. passing episodes of a task since iteration N)."


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="archive_command", metavar="ACTION", required=True)
    q = sub.add_parser("query", help="episodes matching every given filter")
    q.add_argument("--archive", default="data/archive", help="the archive directory")
    q.add_argument("--task-id", help="only this task")
    q.add_argument("--since", type=int, help="only iterations >= this")
    q.add_argument("--reward-version", help="only rows scored under this reward version")
    q.add_argument(
        "--passing",
        action="store_true",
        help="only passing episodes (all visible tests; agent: resolved)",
    )
    q.add_argument("--count", action="store_true", help="print the number of matches only")
    s = sub.add_parser("snapshot", help="write history/archive_manifest.json for the train stage")
    s.add_argument("--root", default=".", help="workspace root")


def _snapshot(args) -> int:
    from pathlib import Path

    from codeloop.data.archive import MANIFEST, snapshot
    from codeloop.io import write_json
    from codeloop.paths import Paths

    root = Path(args.root)
    manifest = snapshot(Paths(root).archive_dir)
    write_json(root / MANIFEST, manifest)
    print(f"{root / MANIFEST}: {len(manifest['files'])} part files")
    return 0


def run(args) -> int:
    if args.archive_command == "snapshot":
        return _snapshot(args)
    from codeloop.data.archive import query
    from codeloop.schema import episode_kind

    try:
        rows = query(args.archive, args.task_id, args.since, args.reward_version, args.passing)
    except (FileNotFoundError, ValueError) as exc:
        print(f"codeloop archive: {exc}", file=sys.stderr)
        return 2
    if args.count:
        print(len(rows))
        return 0
    for t in rows:
        out = {
            "trajectory_id": t.trajectory_id,
            "task_id": t.task_id,
            "iteration": t.iteration,
            "reward_fn_version": t.metadata.reward_fn_version,
            "reward": t.reward,
            "terminal_reason": t.terminal_reason,
            "kind": episode_kind(t),
            "final_code": t.final_code,
            "final_diff": t.final_diff,
        }
        print(json.dumps(out, sort_keys=True))
    return 0
