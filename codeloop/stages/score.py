"""Stage `score`: rewards for the rollout's trajectories, a replay check, metrics.

Reads data/rollouts/ (trajectories without reward) and data/buckets/tasks.parquet and
scores every row with the scorer of its task's kind (codeloop.rewards.kinds): function
rows re-execute their final code against the visible tests with ``reward.version``
(hidden tests run for diagnostics only); repository (agent) rows are judged on their
``final_diff`` with ``reward.repo_version`` (codeloop.rewards.repo: a fresh base, test
files restored, FAIL_TO_PASS / PASS_TO_PASS / hidden tests in the sandbox); episode-mode
terms (tdd, rubber_duck) are added by mode (codeloop.rewards.modes). Writes
data/trajectories/ (Parquet shards + trajectories.jsonl) and metrics/score.json (reward
and per-component distributions, visible/hidden pass rates and gap, infra errors,
zero-std group fraction, the replay summary, and under ``kinds`` the same summary per
task kind with its own replay). Then replays up to ``score.replay_sample`` stored
trajectories of each kind and fails the stage on any mismatch. Scoring fans out over
``runner.*`` in chunks of whole GRPO groups (codeloop.rewards.fanout.fan_out_score);
every runner gives the same rows. With ``score.resume`` a killed run resumes from the
shards it finished (codeloop.rollout.resume).
"""

from __future__ import annotations

import logging
from typing import Any

from codeloop.config import Params
from codeloop.io import read_trajectories, read_with_tasks, write_json, write_trajectories
from codeloop.paths import Paths
from codeloop.rewards.fanout import RepoSetup, fan_out_score
from codeloop.rewards.rescore import ReplayReport, merge_reports
from codeloop.rewards.summary import summarize
from codeloop.rollout.resume import ShardStore
from codeloop.schema import Task, Trajectory
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


class ReplayMismatch(RuntimeError):
    """Stored rewards disagree with a recomputation: the score stage is not reproducible."""


def _repo_setup(params: Params, paths: Paths) -> RepoSetup:
    return RepoSetup(params.agent, str(paths.repos_dir), envs_dir=str(paths.agent_envs_dir),
                     clean_envs=str(paths.clean_envs_dir))


def replay_sample(
    params: Params, paths: Paths, tasks_by_id: dict[str, Task]
) -> dict[str, ReplayReport]:
    """Replay up to score.replay_sample stored trajectories of each kind: a report per kind."""
    from codeloop.agent.executor import open_executor
    from codeloop.agent.judge import judge_config
    from codeloop.rewards.kinds import ScoreContext, replay_by_kind, sample_by_kind

    stored = read_trajectories(paths.trajectories_dir)
    sample = sample_by_kind(stored, tasks_by_id, params.score.replay_sample,
                            params.score.replay_seed)
    tasks = [tasks_by_id[i] for i in sorted({t.task_id for t in sample}) if i in tasks_by_id]
    executor = open_executor(params.sandbox, params.agent, tasks,
                             envs_dir=str(paths.agent_envs_dir),
                             clean_envs=str(paths.clean_envs_dir))
    ctx = ScoreContext(params.reward, executor, repos_dir=str(paths.repos_dir),
                       judge=judge_config(params.agent), hidden=params.score.hidden_diagnostics)
    try:
        reports = replay_by_kind(sample, tasks_by_id, ctx)
    finally:
        executor.close()
    for kind, report in reports.items():
        log.info("replay (%s):\n%s", kind, report.table(only_problems=True))
    return reports


def _kind_metrics(
    params: Params, scored: list[Trajectory], tasks_by_id: dict[str, Task],
    reports: dict[str, ReplayReport],
) -> dict[str, Any]:
    from codeloop.rewards.kinds import split_by_kind, version_of

    out = {}
    for kind, rows in split_by_kind(scored, tasks_by_id).items():
        out[kind] = summarize(rows, version_of(kind, params.reward))
        if kind in reports:
            out[kind]["replay"] = reports[kind].summary()
    return out


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
        repos=_repo_setup(params, paths),
    ) if trajs else []
    step(write_trajectories, paths.trajectories_dir, scored)
    if resume:
        ShardStore(resume).clear()  # the outs hold every row now
    metrics = step(summarize, scored, params.reward.version)
    reports = {}
    if params.score.replay_sample > 0 and scored:
        reports = step(replay_sample, params, paths, tasks_by_id)
    report = merge_reports(list(reports.values()))
    metrics["replay"] = report.summary()
    metrics["kinds"] = _kind_metrics(params, scored, tasks_by_id, reports)
    write_json(paths.metrics("score"), metrics)
    if report.mismatches:
        table = report.table(only_problems=True)
        raise ReplayMismatch(f"replay disagrees on {len(report.mismatches)} trajectories:\n{table}")
    return metrics
