"""`codeloop replay`: recompute stored rewards from final code, task and reward version.

Exit status: 0 all agree; 1 any mismatch; 2 bad input (missing files, unknown version);
3 no mismatch but some rewards could not be checked (sandbox or judge failure).
"""

from __future__ import annotations

import sys

from codeloop.paths import Paths

HELP = "Recompute the reward of a sample of scored trajectories and diff (non-zero on mismatch)."


def add_arguments(p) -> None:
    p.add_argument("--trajectories", required=True, help="shard directory or one .parquet file")
    p.add_argument("--sample", type=int, default=100, help="trajectories to replay (0 = all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample")
    p.add_argument(
        "--tasks", default=str(Paths().bucket_tasks), help="tasks Parquet the rows refer to"
    )
    p.add_argument("--params", default="params.yaml", help="params file (sandbox, reward.*)")
    p.add_argument("--all-rows", action="store_true", help="print agreeing rows too")


def run(args) -> int:
    from codeloop.config import ConfigError, load_params
    from codeloop.io import read_tasks, read_trajectories
    from codeloop.rewards.extras import build_extras_for
    from codeloop.rewards.registry import UnknownRewardVersion
    from codeloop.rewards.replay import replay, sample_trajectories
    from codeloop.sandbox import make_executor

    try:
        params = load_params(args.params)
        trajs = read_trajectories(args.trajectories)
        tasks = {t.task_id: t for t in read_tasks(args.tasks)}
        sample = sample_trajectories(trajs, args.sample, args.seed)
        extras = build_extras_for(params.reward, {t.metadata.reward_fn_version for t in sample})
    except (ConfigError, FileNotFoundError, UnknownRewardVersion, ValueError) as exc:
        print(f"codeloop replay: {exc}", file=sys.stderr)
        return 2
    executor = make_executor(params.sandbox)
    try:
        report = replay(sample, tasks, executor, **extras)
    except UnknownRewardVersion as exc:
        print(f"codeloop replay: {args.trajectories}: {exc}", file=sys.stderr)
        return 2
    finally:
        executor.close()
    print(report.table(only_problems=not args.all_rows))
    if report.mismatches:
        return 1
    return 3 if report.errors else 0
