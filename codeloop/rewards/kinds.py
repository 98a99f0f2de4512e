"""Scoring and replay by task kind: the one table that tells function rows from repo rows.

``SCORERS`` maps each task kind (codeloop.schema.TASK_KINDS) to how its trajectories are
scored: which params key names its reward version (function: ``reward.version``, whose
final code re-runs on the visible tests; repo: ``reward.repo_version``, whose final diff
the trusted judge applies and tests, codeloop.rewards.repo) and which episode-mode terms
(codeloop.rewards.modes) are added on top. Replay re-scores a stored row the same way,
under the version stored in its own ``metadata.reward_fn_version``.

``score_by_kind`` and ``replay_by_kind`` are what the score stage, its fan-out chunks and
``codeloop replay`` call; nothing else compares task kinds on the reward side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from codeloop.agent.judge import JudgeConfig
from codeloop.config import RewardConfig
from codeloop.rewards import score_trajectories
from codeloop.rewards.extras import build_extras
from codeloop.rewards.modes import apply_explain, apply_repo_tdd, apply_tdd
from codeloop.rewards.repo import score_repo_trajectories
from codeloop.rewards.rescore import (
    ReplayReport,
    merge_reports,
    replay_with,
    sample_trajectories,
    split_by_tests_version,
)
from codeloop.schema import Task, Trajectory

DEFAULT_KIND = "function"  # a row whose task is missing: its scorer marks the infra error


@dataclass(frozen=True)
class ScoreContext:
    """What scoring needs besides the rows: params, the sandbox, the repositories."""

    reward: RewardConfig
    executor: object
    repos_dir: str = ""  # repository snapshots (repo tasks only)
    judge: JudgeConfig | None = None  # the repo judge's bounds (agent.* params)
    hidden: bool = True  # hidden-test diagnostics of function rows


Rescore = Callable[[list[Trajectory], dict[str, Task], str, ScoreContext], list[Trajectory]]


@dataclass(frozen=True)
class KindScorer:
    """How one kind's rows are scored: its version key and ``rescore(rows, tasks,
    version, ctx)``, which gives scored copies under that version, mode terms included."""

    version: Callable[[RewardConfig], str]
    rescore: Rescore


def _function(rows, tasks_by_id, version, ctx: ScoreContext) -> list[Trajectory]:
    extras = build_extras(ctx.reward, version)  # a critic or judge client, only if needed
    out = score_trajectories(
        rows, tasks_by_id, version, ctx.executor, hidden=ctx.hidden, **extras
    )
    apply_tdd(out, tasks_by_id, ctx.executor, ctx.reward)
    apply_explain(out, ctx.reward)
    return out


def _repo(rows, tasks_by_id, version, ctx: ScoreContext) -> list[Trajectory]:
    out = score_repo_trajectories(
        rows, tasks_by_id, version, ctx.executor, ctx.repos_dir, ctx.judge
    )
    apply_repo_tdd(out, tasks_by_id, ctx.executor, ctx.repos_dir, ctx.judge, ctx.reward)
    apply_explain(out, ctx.reward)
    return out


SCORERS: dict[str, KindScorer] = {
    "function": KindScorer(lambda cfg: cfg.version, _function),
    "repo": KindScorer(lambda cfg: cfg.repo_version, _repo),
}


def kind_of(t: Trajectory, tasks_by_id: dict[str, Task]) -> str:
    """The kind of the task a row refers to."""
    task = tasks_by_id.get(t.task_id)
    return task.kind if task is not None else DEFAULT_KIND


def split_by_kind(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task]
) -> dict[str, list[Trajectory]]:
    """The rows of each kind present, input order kept within a kind."""
    out: dict[str, list[Trajectory]] = {}
    for t in trajs:
        kind = kind_of(t, tasks_by_id)
        if kind not in SCORERS:
            raise ValueError(f"trajectory {t.trajectory_id}: no scorer for task kind {kind!r}")
        out.setdefault(kind, []).append(t)
    return out


def version_of(kind: str, cfg: RewardConfig) -> str:
    """The reward version params give rows of ``kind``."""
    return SCORERS[kind].version(cfg)


def score_by_kind(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task], ctx: ScoreContext
) -> list[Trajectory]:
    """Scored copies of ``trajs`` (any mix of kinds) in input order, each kind's rows
    with its scorer under the version params give that kind."""
    by_id: dict[str, Trajectory] = {}
    for kind, rows in split_by_kind(trajs, tasks_by_id).items():
        scorer = SCORERS[kind]
        fresh = scorer.rescore(rows, tasks_by_id, scorer.version(ctx.reward), ctx)
        by_id |= {t.trajectory_id: t for t in fresh}
    return [by_id[t.trajectory_id] for t in trajs]


def replay_kind(
    kind: str, trajs: list[Trajectory], tasks_by_id: dict[str, Task], ctx: ScoreContext
) -> ReplayReport:
    """Replay rows of one kind under their own stored versions."""
    rescore = SCORERS[kind].rescore
    return replay_with(trajs, lambda group, version: rescore(group, tasks_by_id, version, ctx))


def replay_by_kind(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task], ctx: ScoreContext
) -> dict[str, ReplayReport]:
    """One replay report per kind present in ``trajs`` (plus "tests_version": rows whose
    task now carries other tests than they were scored on, reported, not replayed)."""
    trajs, other_tests = split_by_tests_version(trajs, tasks_by_id)
    out = {
        kind: replay_kind(kind, rows, tasks_by_id, ctx)
        for kind, rows in split_by_kind(trajs, tasks_by_id).items()
    }
    if other_tests.rows:
        out["tests_version"] = other_tests
    return out


def replay_all(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task], ctx: ScoreContext
) -> ReplayReport:
    """Every kind's replay rows in one report."""
    return merge_reports(list(replay_by_kind(trajs, tasks_by_id, ctx).values()))


def sample_by_kind(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task], n: int, seed: int
) -> list[Trajectory]:
    """A seeded sample of up to n rows of each kind (all of them when n == 0)."""
    parts = split_by_kind(trajs, tasks_by_id).values()
    return [t for rows in parts for t in sample_trajectories(rows, n, seed)]
