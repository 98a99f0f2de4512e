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

Repository (agent) trajectories are scored apart, with ``reward.repo_version`` (v3): the
trusted judge (codeloop.agent.judge) applies each ``final_diff`` to a fresh base with every
test file restored and runs FAIL_TO_PASS / PASS_TO_PASS / hidden tests in the sandbox
(codeloop.rewards.repo.score_repo_trajectories); score.json gets their summary under
``repo`` and the replay re-judges a sample of them too. Function trajectories are unchanged.
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
from codeloop.schema import Task, Trajectory
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
    # function rows only: repository rows are re-judged by replay_repo_sample
    stored = [t for t in stored if getattr(tasks_by_id.get(t.task_id), "kind", "") != "repo"]
    sample = sample_trajectories(stored, params.score.replay_sample, params.score.replay_seed)
    extras = build_extras_for(params.reward, {t.metadata.reward_fn_version for t in sample})
    executor = make_executor(params.sandbox)
    try:
        report = replay(sample, tasks_by_id, executor, **extras)
    finally:
        executor.close()
    log.info("replay:\n%s", report.table(only_problems=True))
    return {**report.summary(), "table": report.table(only_problems=True)}


def _repo_executor(params: Params, paths: Paths, tasks: list[Task]):
    from codeloop.rollout.agent_episodes import agent_envs_root
    from codeloop.sandbox import make_executor

    envs = agent_envs_root(tasks, str(paths.clean_envs_dir), str(paths.agent_envs_dir))
    return make_executor(params.sandbox, workspaces=True, envs_root=envs)


def score_repo(
    params: Params, paths: Paths, trajs: list[Trajectory], tasks_by_id: dict[str, Task]
) -> list[Trajectory]:
    """Repository trajectories judged on their final diffs with reward.repo_version."""
    from codeloop.agent.judge import judge_config
    from codeloop.rewards.repo import score_repo_trajectories

    if not trajs:
        return []
    tasks = [tasks_by_id[i] for i in sorted({t.task_id for t in trajs}) if i in tasks_by_id]
    executor = _repo_executor(params, paths, tasks)
    try:
        return score_repo_trajectories(
            trajs, tasks_by_id, params.reward.repo_version, executor, str(paths.repos_dir),
            judge_config(params.agent),
        )
    finally:
        executor.close()


def replay_repo_sample(
    params: Params, paths: Paths, scored: list[Trajectory], tasks_by_id: dict[str, Task]
) -> dict[str, Any]:
    """Re-judge a sample of the scored repository trajectories; summary and table."""
    from codeloop.rewards.replay import sample_trajectories
    from codeloop.rewards.repo import replay_repo

    sample = sample_trajectories(scored, params.score.replay_sample, params.score.replay_seed)
    tasks = [tasks_by_id[t.task_id] for t in sample if t.task_id in tasks_by_id]
    executor = _repo_executor(params, paths, tasks)
    try:
        report = replay_repo(sample, tasks_by_id, executor, str(paths.repos_dir))
    finally:
        executor.close()
    log.info("repo replay:\n%s", report.table(only_problems=True))
    return {**report.summary(), "table": report.table(only_problems=True)}


def _in_order(trajs: list[Trajectory], *parts: list[Trajectory]) -> list[Trajectory]:
    by_id = {t.trajectory_id: t for part in parts for t in part}
    return [by_id[t.trajectory_id] for t in trajs]


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Score data/rollouts into data/trajectories and write metrics/score.json."""
    all_trajs, tasks_by_id = step(read_with_tasks, paths.rollouts_dir, paths.bucket_tasks)
    log.info("%d trajectories over %d tasks", len(all_trajs), len(tasks_by_id))
    log.info("scoring on runner %s x%d", params.runner.kind, params.runner.workers)
    is_repo = {k for k, t in tasks_by_id.items() if t.kind == "repo"}
    trajs = [t for t in all_trajs if t.task_id not in is_repo]
    repo_trajs = [t for t in all_trajs if t.task_id in is_repo]
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
    ) if trajs else []
    scored_repo = step(score_repo, params, paths, repo_trajs, tasks_by_id) if repo_trajs else []
    step(write_trajectories, paths.trajectories_dir, _in_order(all_trajs, scored, scored_repo))
    if resume:
        ShardStore(resume).clear()  # the outs hold every row now
    metrics = step(summarize, scored + scored_repo, params.reward.version)
    rep: dict[str, Any] = {"replayed": 0, "mismatches": 0, "errors": 0}
    if params.score.replay_sample > 0 and scored:
        rep = step(replay_sample, params, paths.trajectories_dir, tasks_by_id)
    metrics["replay"] = {k: v for k, v in rep.items() if k != "table"}
    problems = [rep]
    if scored_repo:
        metrics["repo"] = summarize(scored_repo, params.reward.repo_version)
        if params.score.replay_sample > 0:
            rrep = step(replay_repo_sample, params, paths, scored_repo, tasks_by_id)
            metrics["repo"]["replay"] = {k: v for k, v in rrep.items() if k != "table"}
            problems.append(rrep)
    write_json(paths.metrics("score"), metrics)
    bad = [r for r in problems if r["mismatches"]]
    if bad:
        n = sum(r["mismatches"] for r in bad)
        tables = "\n".join(r["table"] for r in bad)
        raise ReplayMismatch(f"replay disagrees on {n} trajectories:\n{tables}")
    return metrics
