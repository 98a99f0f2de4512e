"""`codeloop replay`: recompute stored rewards from final code or diff, task and version.

Function and repository (agent) rows alike: each is re-scored by its task kind's scorer
(codeloop.rewards.kinds) under its own stored reward version.

Exit status: 0 all agree; 1 any mismatch; 2 bad input (missing files, unknown version);
3 no mismatch but some rewards could not be checked (sandbox or judge failure).
"""

from __future__ import annotations

import sys

from codeloop.paths import Paths

HELP = "Recompute the reward of a sample of scored trajectories and diff (non-zero on mismatch)."


def add_arguments(p) -> None:
    paths = Paths()
    p.add_argument("--trajectories", required=True, help="shard directory or one .parquet file")
    p.add_argument("--sample", type=int, default=100, help="trajectories to replay (0 = all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample")
    p.add_argument(
        "--tasks", default=str(Paths().bucket_tasks), help="tasks Parquet the rows refer to"
    )
    p.add_argument("--params", default="params.yaml", help="params file (sandbox, reward.*)")
    p.add_argument("--repos", default=str(paths.repos_dir), help="repository snapshots dir")
    p.add_argument("--envs", default=str(paths.agent_envs_dir), help="envs root to build")
    p.add_argument(
        "--clean-envs", default=str(paths.clean_envs_dir), help="the clean stage's env dirs"
    )
    p.add_argument("--all-rows", action="store_true", help="print agreeing rows too")


def run(args) -> int:
    from codeloop.config import ConfigError, load_params
    from codeloop.io import read_tasks, read_trajectories
    from codeloop.rewards.registry import UnknownRewardVersion
    from codeloop.rewards.rescore import sample_trajectories

    try:
        params = load_params(args.params)
        trajs = read_trajectories(args.trajectories)
        tasks = {t.task_id: t for t in read_tasks(args.tasks)}
        sample = sample_trajectories(trajs, args.sample, args.seed)
        report = _replay(args, params, sample, tasks)
    except (ConfigError, FileNotFoundError, UnknownRewardVersion, ValueError) as exc:
        print(f"codeloop replay: {args.trajectories}: {exc}", file=sys.stderr)
        return 2
    print(report.table(only_problems=not args.all_rows))
    if report.mismatches:
        return 1
    return 3 if report.errors else 0


def _replay(args, params, sample, tasks):
    """The merged replay report of ``sample``, each kind with its scorer."""
    from codeloop.agent.executor import open_executor
    from codeloop.agent.judge import judge_config
    from codeloop.rewards.kinds import ScoreContext, replay_all

    used = [tasks[i] for i in sorted({t.task_id for t in sample}) if i in tasks]
    executor = open_executor(params.sandbox, params.agent, used, envs_dir=args.envs,
                             clean_envs=args.clean_envs)
    ctx = ScoreContext(params.reward, executor, repos_dir=args.repos,
                       judge=judge_config(params.agent), hidden=params.score.hidden_diagnostics)
    try:
        return replay_all(sample, tasks, ctx)
    finally:
        executor.close()
