"""Frozen-set evaluation: pass@k with the unbiased estimator and the agent metrics.

The policy runs on each frozen set as it runs in training (multi-turn self-debugging on
the *visible* tests, through `codeloop.rollout.envs.run_episodes`), then the trusted parent
re-judges every episode's final code on the visible and the hidden tests separately. A
sample is correct when it passes both; pass@k counts those.

Metrics per set (and per difficulty bucket): pass@1/@10/@100 for k <= n, success rate,
average steps, average failed attempts, timeout rate, error rate, visible and hidden
pass rates and their gap (a widening gap is the classic sign of reward hacking on the
visible tests). Episodes whose infrastructure failed are excluded and counted, never
scored as failures.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from codeloop.config import AgentConfig, EvaluateConfig, RolloutConfig
from codeloop.evaluate.passk import PASS_KS, pass_at_k
from codeloop.sandbox.base import ExecJob, ExecResult, Executor
from codeloop.schema import Task, Trajectory, by_kind

if TYPE_CHECKING:  # types only: the policy pulls in torch, the agent env its sandbox
    from codeloop.agent.env import AgentEnv
    from codeloop.agent.judge import RepoVerdict
    from codeloop.policy.model import Policy

# Statuses that mean the model's code errored (as opposed to running and being wrong).
ERROR_STATUSES = frozenset(
    {"syntax_error", "runtime_error", "memory_limit", "output_limit", "crashed", "no_code"}
)


class LeakError(ValueError):
    """A frozen evaluation set shares tasks with the training data; scores would lie."""


def _norm_prompt(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def check_no_leak(sets: dict[str, list[Task]], training: list[Task]) -> None:
    """Refuse frozen sets whose tasks (by id or normalised prompt) are in training data."""
    by_id = {t.task_id: t for t in training}
    by_prompt = {_norm_prompt(t.prompt): t for t in training if t.prompt.strip()}
    for name, tasks in sets.items():
        for t in tasks:
            hit = by_id.get(t.task_id) or by_prompt.get(_norm_prompt(t.prompt))
            if hit is not None:
                raise LeakError(
                    f"frozen set {name!r}: task {t.task_id!r} also appears in the training "
                    f"data as {hit.task_id!r} (source {hit.source!r}); refusing to evaluate "
                    "on a set the policy was trained on"
                )


@dataclass
class Episode:
    """One evaluated sample: the rollout's trajectory plus the parent's final verdicts."""

    task_id: str
    difficulty: int
    steps: int
    failed_attempts: int
    terminal_reason: str
    visible: ExecResult | None
    hidden: ExecResult | None
    infra_error: str = ""
    code: str = ""

    @property
    def correct(self) -> bool:
        return bool(
            self.visible and self.visible.passed and (self.hidden is None or self.hidden.passed)
        )

    @property
    def final_status(self) -> str:
        for res in (self.visible, self.hidden):
            if res is not None and not res.passed:
                return res.status
        return "passed" if self.correct else "failed"


class Reranker(Protocol):
    """What critic-guided selection needs of a critic (codeloop.rewards.critic.Critic)."""

    def rerank(self, task: Task, candidates: list[str]) -> list[int]: ...


@dataclass(frozen=True)
class AgentEval:
    """What a frozen set of repository tasks runs and is judged with: the agent's
    environment, its params, and the judge of each episode's final diff (one verdict per
    (task, patch), each with ``resolved``)."""

    env: AgentEnv
    cfg: AgentConfig
    judge: Callable[[list[Task], list[str]], list[RepoVerdict]]


def _code_steps(traj: Trajectory) -> list:
    return [a for a in traj.actions if a.action_type in ("generate", "revise")]


def judge_episodes(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task], executor: Executor
) -> list[Episode]:
    """Re-judge each trajectory's final code on visible and hidden tests (in parallel)."""
    jobs: list[ExecJob] = []
    slots: list[tuple[int, str]] = []
    for i, tr in enumerate(trajs):
        if tr.infra_error:
            continue
        task = tasks_by_id[tr.task_id]
        for kind, tests in (("visible", task.visible_tests), ("hidden", task.hidden_tests)):
            if tests:
                jobs.append(
                    ExecJob(
                        code=tr.final_code,
                        tests=list(tests),
                        setup_code=task.setup_code,
                        io_style=task.io_style,
                        entry_point=task.entry_point,
                    )
                )
                slots.append((i, kind))
    # SandboxError propagates: an infrastructure fault must stop evaluation, not score 0.
    results = executor.run_many(jobs) if jobs else []
    verdicts: dict[tuple[int, str], ExecResult] = dict(zip(slots, results, strict=True))
    episodes = []
    for i, tr in enumerate(trajs):
        steps = _code_steps(tr)
        episodes.append(
            Episode(
                task_id=tr.task_id,
                difficulty=tasks_by_id[tr.task_id].difficulty,
                steps=len(steps),
                failed_attempts=sum(1 for a in steps if a.observation.status != "passed"),
                terminal_reason=tr.terminal_reason,
                visible=verdicts.get((i, "visible")),
                hidden=verdicts.get((i, "hidden")),
                infra_error=tr.infra_error,
                code=tr.final_code,
            )
        )
    return episodes


def _rate(num: int, den: int) -> float:
    return num / den if den else 0.0


def summarize(episodes: list[Episode], n: int) -> dict[str, Any]:
    """Metrics of one group of episodes (a set or one difficulty bucket of it)."""
    ok = [e for e in episodes if not e.infra_error]
    per_task: dict[str, list[Episode]] = defaultdict(list)
    for e in ok:
        per_task[e.task_id].append(e)
    out: dict[str, Any] = {
        "n_tasks": len(per_task),
        "n_episodes": len(ok),
        "infra_errors": len(episodes) - len(ok),
    }
    for k in PASS_KS:
        vals = [
            pass_at_k(len(es), sum(e.correct for e in es), k)
            for es in per_task.values()
            if len(es) >= k
        ]
        if k <= n:
            out[f"pass@{k}"] = sum(vals) / len(vals) if vals else 0.0
    m = len(ok)
    timeouts = sum(e.final_status == "timeout" or e.terminal_reason == "timeout" for e in ok)
    with_hidden = [e for e in ok if e.hidden is not None]
    out.update(
        success_rate=_rate(sum(e.correct for e in ok), m),
        avg_steps=_rate(sum(e.steps for e in ok), m),
        avg_failed_attempts=_rate(sum(e.failed_attempts for e in ok), m),
        timeout_rate=_rate(timeouts, m),
        error_rate=_rate(sum(e.final_status in ERROR_STATUSES for e in ok), m),
        visible_pass_rate=_rate(sum(bool(e.visible and e.visible.passed) for e in ok), m),
        hidden_pass_rate=_rate(sum(e.hidden.passed for e in with_hidden), len(with_hidden)),
    )
    out["hidden_visible_gap"] = out["visible_pass_rate"] - out["hidden_pass_rate"]
    return out


def set_metrics(episodes: list[Episode], n: int) -> dict[str, Any]:
    """Metrics of a whole set plus the same metrics per difficulty bucket."""
    out = summarize(episodes, n)
    buckets: dict[int, list[Episode]] = defaultdict(list)
    for e in episodes:
        buckets[e.difficulty].append(e)
    out["by_difficulty"] = {str(d): summarize(es, n) for d, es in sorted(buckets.items())}
    return out


def per_task_outcomes(episodes: list[Episode]) -> dict[str, list[bool]]:
    """task_id -> each sample's correctness (infra-failed samples excluded)."""
    seen: dict[str, list[bool]] = defaultdict(list)
    for e in episodes:
        if not e.infra_error:
            seen[e.task_id].append(e.correct)
    return dict(sorted(seen.items()))


def per_task_pass_rates(episodes: list[Episode]) -> dict[str, float]:
    """task_id -> share of correct samples (infra-failed samples excluded)."""
    return _shares(per_task_outcomes(episodes))


def _shares(outcomes: dict[str, list[bool]]) -> dict[str, float]:
    return {tid: sum(v) / len(v) for tid, v in outcomes.items()}


def _counts(outcomes: dict[str, list[bool]]) -> dict[str, list[int]]:
    """task_id -> [passed, samples]: what the gate pairs the next candidate against."""
    return {tid: [sum(v), len(v)] for tid, v in outcomes.items()}


def critic_selected_rate(
    episodes: list[Episode], tasks_by_id: dict[str, Task], critic: Reranker
) -> float:
    """Share of tasks whose critic-chosen sample (top of ``critic.rerank``) is correct.

    CodeRL's critic-guided selection at inference: of the n samples per task, submit the
    one the critic rates most likely to pass. Compare with pass@1 (a random pick).
    """
    per_task: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        if not e.infra_error:
            per_task[e.task_id].append(e)
    hits = 0
    for tid, es in per_task.items():
        best = critic.rerank(tasks_by_id[tid], [e.code for e in es])[0]
        hits += es[best].correct
    return _rate(hits, len(per_task))


# Evaluation samples every night from the seed stream of iteration 0: the promoted policy
# and tonight's candidate then draw the same random numbers for each (task, sample), so
# the gate's per-task differences are the policies', not the dice's.
EVAL_SEED_ITERATION = 0


def eval_rollout_config(cfg: EvaluateConfig, modes: RolloutConfig | None = None) -> RolloutConfig:
    """The rollout settings evaluation samples with: the `evaluate` params, in the episode
    modes of ``modes`` (the rollout params: a policy is taught and trained in its mode)."""
    return RolloutConfig(
        samples_per_task=cfg.samples_per_task,
        max_steps=cfg.max_steps,
        temperature=cfg.temperature,
        top_p=1.0,
        max_new_tokens=cfg.max_new_tokens,
        agent_max_new_tokens=cfg.agent_max_new_tokens,
        seed=0,
        mode=modes.mode if modes else "self_debug",
        agent_mode=modes.agent_mode if modes else "self_debug",
    )


def _evaluate_repo_set(
    policy: Policy,
    tasks: list[Task],
    executor: Executor,
    rcfg: RolloutConfig,
    agent: AgentEval,
    iteration: int,
    dataset_version: str,
):
    """A frozen repository set: agent episodes, each final diff judged by `agent.judge`."""
    from codeloop.evaluate.agent_metrics import agent_set_metrics, agent_summary
    from codeloop.rollout.context import EpisodeContext
    from codeloop.rollout.envs import run_episodes

    ctx = EpisodeContext(rcfg, dataset_version, EVAL_SEED_ITERATION, 0.0, agent=agent.cfg)
    trajs = run_episodes(tasks, policy, None, ctx, agent_env=agent.env)
    by_id = {t.task_id: t for t in tasks}
    live = [i for i, t in enumerate(trajs) if not t.infra_error]
    verdicts = agent.judge(
        [by_id[trajs[i].task_id] for i in live], [trajs[i].final_diff for i in live]
    )
    resolved = [False] * len(trajs)
    for i, v in zip(live, verdicts, strict=True):
        resolved[i] = bool(v.resolved)
    diff = {t.task_id: t.difficulty for t in tasks}
    m = agent_set_metrics(trajs, resolved, rcfg.samples_per_task, diff)
    rates: dict[str, list[bool]] = defaultdict(list)
    for t, r in zip(trajs, resolved, strict=True):
        if not t.infra_error:
            rates[t.task_id].append(r)
    return m, dict(sorted(rates.items())), agent_summary(trajs, iteration, resolved)


def evaluate_sets(
    policy: Policy,
    sets: dict[str, list[Task]],
    executor: Executor,
    cfg: EvaluateConfig,
    *,
    training_tasks: list[Task] | None = None,
    timeout_s: float | None = None,
    dataset_version: str = "",
    iteration: int = 0,
    critic: Reranker | None = None,
    agent: AgentEval | None = None,
    modes: RolloutConfig | None = None,
) -> dict[str, Any]:
    """Run the policy on every frozen set; return {"sets": {name: metrics}, ...}.

    A set of repository tasks (``agent``: an AgentEval) runs agent episodes in ``agent.env`` with
    ``agent.cfg`` (the agent params) and is judged by ``agent.judge(tasks, patches) ->
    verdicts`` (each with ``resolved``); its pass@1 is the resolved rate, so the gate
    compares it like any set's, and ``out["agent"][name]`` holds what the UI shows.

    Refuses (LeakError) when a frozen task appears in ``training_tasks``. Sets are
    capped at ``cfg.max_tasks_per_set`` tasks (first ones, a stable choice). With a
    ``critic`` and more than one sample per task, each set also reports
    ``pass@1_critic`` (critic-guided selection).
    """
    from codeloop.rollout.context import EpisodeContext  # the policy's side; heavy (torch)
    from codeloop.rollout.envs import run_episodes

    if training_tasks is not None:
        check_no_leak(sets, training_tasks)
    rcfg = eval_rollout_config(cfg, modes)
    out: dict[str, Any] = {"sets": {}, "pass_rates": {}, "task_counts": {}}
    for name, tasks in sorted(sets.items()):
        if cfg.max_tasks_per_set:
            tasks = tasks[: cfg.max_tasks_per_set]
        if not tasks:
            raise ValueError(f"frozen set {name!r} is empty; nothing to evaluate")
        if by_kind(tasks)["repo"]:
            if agent is None:
                raise ValueError(f"frozen set {name!r} holds repository tasks: need agent=")
            m, outcomes, summary = _evaluate_repo_set(
                policy, tasks, executor, rcfg, agent, iteration, dataset_version
            )
            out["sets"][name] = m
            out["pass_rates"][name] = _shares(outcomes)
            out["task_counts"][name] = _counts(outcomes)
            out.setdefault("agent", {})[name] = summary
            continue
        ctx = EpisodeContext(rcfg, dataset_version, EVAL_SEED_ITERATION, float(timeout_s or 0.0))
        trajs = run_episodes(tasks, policy, executor, ctx)
        by_id = {t.task_id: t for t in tasks}
        episodes = judge_episodes(trajs, by_id, executor)
        out["sets"][name] = set_metrics(episodes, cfg.samples_per_task)
        if critic is not None and cfg.samples_per_task > 1:  # one sample: nothing to choose
            out["sets"][name]["pass@1_critic"] = critic_selected_rate(episodes, by_id, critic)
        outcomes = per_task_outcomes(episodes)
        out["pass_rates"][name] = _shares(outcomes)
        out["task_counts"][name] = _counts(outcomes)
    out["model_version"] = getattr(policy, "model_version", "")
    out["samples_per_task"] = cfg.samples_per_task
    return out
