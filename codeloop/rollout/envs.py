"""Which environment runs a task's episodes: the kind -> Env table, and the entry point
every stage samples through (rollout, evaluate, benchmarks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codeloop.agent.env import AgentEnv
from codeloop.data.holdout import visible_subset
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.function_env import FunctionEnv
from codeloop.rollout.loop import run_loop
from codeloop.rollout.repo_env import RepoEnv
from codeloop.schema import Task, Trajectory

if TYPE_CHECKING:
    from codeloop.policy.model import Policy
    from codeloop.sandbox.base import Executor

ENVS = {"function": FunctionEnv, "repo": RepoEnv}


def run_episodes(
    tasks: list[Task], policy: Policy, executor: Executor, ctx: EpisodeContext, *,
    agent_env: AgentEnv | None = None,
) -> list[Trajectory]:
    """Episodes for ``tasks`` of any kinds, rows in task order (each kind's tasks run as
    one batched loop of its env). agent_env: a repository env the caller already holds."""
    by_kind: dict[str, list[Task]] = {}
    for t in (visible_subset(t, ctx.visible_subset, ctx.iteration, ctx.seed) for t in tasks):
        if t.kind not in ENVS:
            raise ValueError(f"task {t.task_id}: unknown kind {t.kind!r}; known: {sorted(ENVS)}")
        by_kind.setdefault(t.kind, []).append(t)
    rows: dict[str, list[Trajectory]] = {}
    for kind in ENVS:  # a fixed order: a kind's rows never depend on the others'
        if kind not in by_kind:
            continue
        env = ENVS[kind](policy, executor, ctx, agent_env)
        try:
            for tr in run_loop(env, by_kind[kind], policy, ctx):
                rows.setdefault(tr.task_id, []).append(tr)
        finally:
            env.close()
    return [tr for t in tasks for tr in rows.pop(t.task_id, [])]

