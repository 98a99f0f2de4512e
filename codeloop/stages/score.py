"""Stage `score`: rewards for the rollout's trajectories, a replay check, metrics.

Reads data/rollouts/ (trajectories without reward) and data/buckets/tasks.parquet;
re-executes each final code against the task's visible tests with the reward version
``reward.version`` (hidden tests run for diagnostics only). Writes data/trajectories/
(Parquet shards + trajectories.jsonl) and metrics/score.json (reward and per-component
distributions, visible/hidden pass rates and gap, infra errors, zero-std group fraction,
the replay summary). Then replays ``score.replay_sample`` stored trajectories and fails
the stage on any mismatch. Scoring fans out over ``runner.*`` in chunks of whole GRPO
groups (codeloop.rewards.fanout.fan_out_score); every runner gives the same rows. With
``score.resume`` a killed run resumes from the shards it finished (codeloop.rollout.resume).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from codeloop.config import Params
from codeloop.io import read_trajectories, read_with_tasks, write_json, write_trajectories
from codeloop.paths import Paths
from codeloop.rewards.fanout import fan_out_score
from codeloop.rewards.summary import summarize
from codeloop.rollout.resume import ShardStore
from codeloop.schema import Task
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


class ReplayMismatch(RuntimeError):
    """Stored rewards disagree with a recomputation: the score stage is not reproducible."""


def replay_sample(params: Params, traj_dir: Path, tasks_by_id: dict[str, Task]) -> dict[str, Any]:
    """Replay score.replay_sample stored trajectories; returns the summary and the table."""
    from codeloop.rewards.extras import build_extras_for
    from codeloop.rewards.replay import replay, sample_trajectories
    from codeloop.sandbox import make_executor

    stored = read_trajectories(traj_dir)
    sample = sample_trajectories(stored, params.score.replay_sample, params.score.replay_seed)
    extras = build_extras_for(params.reward, {t.metadata.reward_fn_version for t in sample})
    executor = make_executor(params.sandbox)
    try:
        report = replay(sample, tasks_by_id, executor, **extras)
    finally:
        executor.close()
    log.info("replay:\n%s", report.table(only_problems=True))
    return {**report.summary(), "table": report.table(only_problems=True)}


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Score data/rollouts into data/trajectories and write metrics/score.json."""
    trajs, tasks_by_id = step(read_with_tasks, paths.rollouts_dir, paths.bucket_tasks)
    log.info("%d trajectories over %d tasks", len(trajs), len(tasks_by_id))
    log.info("scoring on runner %s x%d", params.runner.kind, params.runner.workers)
    # Finished shards of a killed run are kept here (codeloop.rollout.resume).
    resume = paths.resume_dir("score") if params.score.resume else None
    scored = step(
        fan_out_score,
        trajs,
        tasks_by_id,
        reward=params.reward,
        sandbox=params.sandbox,
        runner=params.runner,
        hidden=params.score.hidden_diagnostics,
        resume_dir=str(resume) if resume else "",
        resume_shard_groups=params.score.resume_shard_groups,
    )
    step(write_trajectories, paths.trajectories_dir, scored)
    if resume:
        ShardStore(resume).clear()  # the outs hold every row now
    metrics = step(summarize, scored, params.reward.version)
    rep: dict[str, Any] = {"replayed": 0, "mismatches": 0, "errors": 0}
    if params.score.replay_sample > 0 and scored:
        rep = step(replay_sample, params, paths.trajectories_dir, tasks_by_id)
    metrics["replay"] = {k: v for k, v in rep.items() if k != "table"}
    write_json(paths.metrics("score"), metrics)
    if rep["mismatches"]:
        raise ReplayMismatch(
            f"replay disagrees on {rep['mismatches']} trajectories:\n{rep['table']}"
        )
    return metrics
