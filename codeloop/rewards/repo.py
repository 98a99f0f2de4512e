"""Reward v3 for repository tasks: judge each trajectory's final diff, apply the composition.

``score_repo_trajectories`` judges every ``final_diff`` (codeloop.agent.judge, one batch)
and fills reward, components, step rewards and the version; ``replay_repo`` re-judges
stored trajectories and compares, as ``codeloop.rewards.rescore`` does for function tasks.
The terms themselves are codeloop.rewards.repo_terms (pure; the registry's v3 wraps them).
"""

from __future__ import annotations

from dataclasses import replace

from codeloop.agent.judge import JudgeConfig, judge_many
from codeloop.rewards.components import rounded
from codeloop.rewards.registry import RewardInput, get_composition
from codeloop.rewards.repo_terms import HIDDEN_KEY, repo_reward
from codeloop.sandbox.base import ExecResult, SandboxError
from codeloop.sandbox.faults import isolate_faults
from codeloop.schema import Task, Trajectory

__all__ = ["replay_repo", "repo_reward", "score_repo_trajectories"]  # repo_reward: its old home


def _mark_infra(t: Trajectory, version: str, reason: str) -> None:
    t.infra_error, t.reward, t.reward_components = reason, 0.0, {}
    t.metadata.reward_fn_version = version


def score_repo_trajectories(
    trajs: list[Trajectory],
    tasks_by_id: dict[str, Task],
    version: str,
    executor,
    repos_dir: str,
    cfg: JudgeConfig | None = None,
) -> list[Trajectory]:
    """Scored copies of repository-task ``trajs`` (inputs untouched), in input order: each
    ``final_diff`` judged (one batch), the composition applied. Our failures (sandbox fault,
    missing task or snapshot) set ``infra_error``, never a reward of 0."""
    comp = get_composition(version)
    cfg = cfg or JudgeConfig()
    out = [replace(t, actions=[replace(a) for a in t.actions], metadata=replace(t.metadata),
                   reward_components=dict(t.reward_components)) for t in trajs]
    todo = []
    for t in out:
        task = tasks_by_id.get(t.task_id)
        if t.infra_error:  # rollout's own fault: passed through unscored, as for functions
            t.metadata.reward_fn_version = version
            continue
        if task is None:
            _mark_infra(t, version, f"score: task {t.task_id!r} not found in tasks file")
            continue
        todo.append((t, task))
    verdicts = _judge_each(todo, repos_dir, executor, cfg)
    for (t, task), v in zip(todo, verdicts, strict=True):
        if isinstance(v, Exception):
            _mark_infra(t, version, f"judge: {type(v).__name__}: {v}")
            continue
        inp = RewardInput(task=task, code=t.final_diff, visible=ExecResult("no_code"),
                          actions=t.actions, repo=v)
        r = comp.compute(inp)
        t.reward, t.reward_components = r.reward, dict(r.components)
        if task.hidden_tests:
            t.reward_components[HIDDEN_KEY] = rounded(v.hidden_passed / v.hidden_total)
        for a, s in zip(t.actions, r.step_rewards, strict=False):
            a.reward = s
        t.metadata.reward_fn_version = version
    return out


def _judge_each(todo, repos_dir, executor, cfg) -> list:
    """Verdicts in one batch; on our failure, one by one so a fault marks only its row."""
    items = [(task, t.final_diff) for t, task in todo]
    if not items:
        return []
    return isolate_faults(lambda batch: judge_many(batch, repos_dir, executor, cfg),
                          lambda item: judge_many([item], repos_dir, executor, cfg)[0],
                          items, errors=(SandboxError, OSError, ValueError))


def replay_repo(trajs: list[Trajectory], tasks_by_id: dict[str, Task], executor, repos_dir: str):
    """Re-judge stored repository trajectories under their own reward versions and compare
    rewards, components and step rewards with what is stored (codeloop.rewards.rescore)."""
    # imported here: replay stands on codeloop.rewards, which registers this module's v3
    from codeloop.rewards.rescore import replay_with

    return replay_with(trajs, lambda group, version: score_repo_trajectories(
        group, tasks_by_id, version, executor, repos_dir))
