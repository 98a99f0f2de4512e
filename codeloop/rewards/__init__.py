"""Rewards: re-execute each episode's final code and apply a versioned composition.

``score_trajectories`` is the score stage's library call. For every trajectory it runs
the final code against the task's VISIBLE tests in the sandbox (the only evidence the
reward sees) and against the HIDDEN tests for diagnostics only (``diag_hidden_pass_rate``
in reward_components, weight 0 in every composition: the visible-hidden gap and the
hacking alarm need it). Our own failures (SandboxError, judge unreachable, task missing)
set ``infra_error`` and leave the reward unset; they are never a reward of 0.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from codeloop.data.holdout import visible_subset
from codeloop.rewards.llm_judge import Judge, JudgeError
from codeloop.rewards.registry import (
    REGISTRY,
    Composition,
    RewardInput,
    RewardOutput,
    get_composition,
)
from codeloop.sandbox.base import ExecJob, ExecResult, SandboxError
from codeloop.sandbox.faults import isolate_faults
from codeloop.schema import Task, Trajectory

__all__ = [
    "REGISTRY",
    "Composition",
    "RewardInput",
    "RewardOutput",
    "get_composition",
    "score_trajectories",
    "HIDDEN_KEY",
    "HIDDEN_OWN_KEY",
]

log = logging.getLogger(__name__)

HIDDEN_KEY = "diag_hidden_pass_rate"  # diagnostic: never part of any reward
# the same on the task's own hidden tests only (tasks whose hidden tests were augmented):
# with HIDDEN_KEY it tells how many wrong programs the augmented tests alone caught
HIDDEN_OWN_KEY = "diag_hidden_own_pass_rate"


def _job(task: Task, code: str, tests: list[str]) -> ExecJob:
    return ExecJob(
        code=code,
        tests=list(tests),
        setup_code=task.setup_code,
        io_style=task.io_style,
        entry_point=task.entry_point,
    )


def _no_code(n_tests: int) -> ExecResult:
    # Decided here, not in the sandbox: empty output needs no process and must replay
    # identically whatever the backend.
    return ExecResult(status="no_code", tests_total=n_tests)


def run_jobs(executor, jobs: list[ExecJob | None]) -> list[ExecResult | SandboxError | None]:
    """Run jobs (None entries stay None) with one run_many; on a SandboxError fall back to
    one run per job so a single infrastructure fault marks only its own trajectory."""
    idx = [i for i, j in enumerate(jobs) if j is not None]
    out: list[ExecResult | SandboxError | None] = [None] * len(jobs)
    if not idx:
        return out
    results = isolate_faults(executor.run_many, executor.run, [jobs[i] for i in idx])
    for i, r in zip(idx, results, strict=True):
        out[i] = r
    return out


def _visible_job(task: Task, code: str) -> ExecJob | None:
    return _job(task, code, task.visible_tests) if code.strip() else None


def _hidden_job(task: Task, code: str) -> ExecJob | None:
    if not code.strip() or not task.hidden_tests:
        return None
    return _job(task, code, task.hidden_tests)


def _copy(t: Trajectory) -> Trajectory:
    # Only the fields score writes are copied; token lists are shared, never mutated here
    # (a deepcopy of long token_ids dominated scoring time on big batches).
    return replace(
        t,
        actions=[replace(a, observation=replace(a.observation)) for a in t.actions],
        metadata=replace(t.metadata),
        reward_components=dict(t.reward_components),
    )


def _mark_infra(t: Trajectory, version: str, reason: str) -> None:
    t.infra_error = reason
    t.reward = 0.0  # unset, not a score: infra_error excludes the row from training
    t.reward_components = {}
    t.metadata.reward_fn_version = version


def apply_composition(
    comp: Composition,
    t: Trajectory,
    task: Task,
    visible: ExecResult,
    *,
    judge: Judge | None = None,
    critic=None,
) -> RewardOutput:
    """Compute one trajectory's reward from its visible-test result (raises JudgeError)."""
    inp = RewardInput(
        task=task,
        code=t.final_code,
        visible=visible,
        actions=t.actions,
        judge_score=judge.score(task, t.final_code) if comp.needs_judge and judge else None,
        critic_score=critic.predict(task, t.final_code) if comp.needs_critic and critic else None,
    )
    if comp.needs_judge and judge is None:
        raise JudgeError(f"reward version {comp.name} needs a judge; none configured")
    if comp.needs_critic and critic is None:
        raise ValueError(f"reward version {comp.name} needs a critic (reward.critic_path)")
    return comp.compute(inp)


def score_trajectories(
    trajs: list[Trajectory],
    tasks_by_id: dict[str, Task],
    version: str,
    executor,
    *,
    judge: Judge | None = None,
    critic=None,
    hidden: bool = True,
) -> list[Trajectory]:
    """Scored copies of ``trajs`` (inputs untouched), in input order.

    Fills reward, reward_components (plus the hidden-test diagnostic), per-action rewards
    and metadata.reward_fn_version. Trajectories already carrying an infra_error from
    rollout are passed through unscored.
    """
    comp = get_composition(version)
    if comp.needs_critic and critic is None:
        raise ValueError(f"reward version {version} needs a critic (reward.critic_path)")
    if comp.needs_judge and judge is None:
        raise ValueError(f"reward version {version} needs a judge (reward.judge_*)")
    out = [_copy(t) for t in trajs]
    tasks = [shown_task(tasks_by_id.get(t.task_id), t) for t in out]
    todo = [t is not None and not o.infra_error for t, o in zip(tasks, out, strict=True)]
    vis = run_jobs(
        executor,
        [
            _visible_job(k, o.final_code) if ok else None
            for k, o, ok in zip(tasks, out, todo, strict=True)
        ],
    )
    hid = run_jobs(
        executor,
        [
            _hidden_job(k, o.final_code) if ok and hidden else None
            for k, o, ok in zip(tasks, out, todo, strict=True)
        ],
    )
    for t, task, ok, v, h in zip(out, tasks, todo, vis, hid, strict=True):
        if task is None:
            _mark_infra(t, version, f"score: task {t.task_id!r} not found in tasks file")
            continue
        if not ok:
            t.metadata.reward_fn_version = version
            continue
        if v is None:
            v = _no_code(len(task.visible_tests))
        for res, which in ((v, "visible"), (h, "hidden")):
            if isinstance(res, SandboxError):
                _mark_infra(t, version, f"sandbox ({which} tests): {res}")
                break
        else:
            try:
                r = apply_composition(comp, t, task, v, judge=judge, critic=critic)
            except JudgeError as exc:
                _mark_infra(t, version, f"judge: {exc}")
                continue
            _fill(t, r, version)
            if hidden and task.hidden_tests:
                # h is None for empty code: nothing ran, nothing passed.
                t.reward_components[HIDDEN_KEY] = round(h.pass_rate, 6) if h else 0.0
                own = own_hidden_rate(task, h)
                if own is not None:
                    t.reward_components[HIDDEN_OWN_KEY] = own
    return out


def own_hidden_rate(task: Task, h: ExecResult | None) -> float | None:
    """Pass rate on the hidden tests the task came with (its augmented ones, appended
    last, left out); None when none were added or none of its own are hidden."""
    n_own = len(task.hidden_tests) - int(task.metadata.get("augmented_hidden", 0))
    if n_own == len(task.hidden_tests) or n_own <= 0:
        return None
    if h is None:
        return 0.0
    return round(sum(r.passed for r in h.test_results[:n_own]) / n_own, 6)


def shown_task(task: Task | None, t: Trajectory) -> Task | None:
    """The task as the episode saw it: the visible subset its metadata records."""
    if task is None:
        return None
    return visible_subset(task, t.metadata.visible_subset, t.iteration, t.metadata.seed)


def _fill(t: Trajectory, r: RewardOutput, version: str) -> None:
    t.reward = r.reward
    t.reward_components = dict(r.components)
    for a, s in zip(t.actions, r.step_rewards, strict=False):
        a.reward = s
    t.metadata.reward_fn_version = version
