"""`codeloop critic`: train the CodeRL-style critic on scored trajectories, outside DVC.

The `critic` stage runs the same code with params' ``critic`` section. Exit status: 0 on
success; 2 on unreadable input or no labelled trajectory.
"""

from __future__ import annotations

import json
import sys

from codeloop.paths import Paths

HELP = "Train the learned critic on scored trajectories; print its metrics (held-out AUC or why none)."


def add_arguments(p) -> None:
    p.add_argument("--trajectories", required=True, help="scored shard directory or .parquet")
    p.add_argument(
        "--tasks", default=str(Paths().bucket_tasks), help="tasks Parquet the rows refer to"
    )
    p.add_argument("--out", required=True, help="directory for critic.json + critic.npz")
    p.add_argument("--params", default="params.yaml", help="params file (its critic section)")
    p.add_argument("--holdout", type=float, default=None, help="override critic.holdout_fraction")


def run(args) -> int:
    from codeloop.config import ConfigError, load_params
    from codeloop.io import read_tasks, read_trajectories
    from codeloop.rewards.critic import fit_critic as train_from_config

    try:
        cfg = load_params(args.params).critic
        trajs = read_trajectories(args.trajectories)
        tasks = {t.task_id: t for t in read_tasks(args.tasks)}
        critic, metrics = train_from_config(trajs, tasks, cfg, args.holdout)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"codeloop critic: {args.trajectories}: {exc}", file=sys.stderr)
        return 2
    critic.save(args.out)
    print(json.dumps(metrics, indent=2))
    return 0
