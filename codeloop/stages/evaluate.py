"""Stage `evaluate`: the candidate policy on the frozen sets and the gate's verdict.

Reads models/candidate, models/critic (critic-guided selection, when the critic stage
has written it), data/clean/frozen/*.parquet (leak-checked against
data/clean/tasks.parquet), metrics/score.json, history/iterations.csv and
history/eval_baseline.json. Writes
metrics/eval.json (DVC metrics: per-set metrics, the candidate's iteration, the gate
decision), metrics/eval_tasks.json (per-task results: promotion keeps them as
history/eval_baseline.json, which the next night's gate pairs against) and
metrics/eval_plot.json (DVC plots: one record per iteration, promoted history plus this
candidate). The gate is computed here so that `dvc repro` alone shows
it; the nightly flow recomputes it with the same ``gate`` from the same files before
promoting.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codeloop.config import Params
from codeloop.evaluate.gate import GateRule, TaskResults, decide, hacking_alarms
from codeloop.evaluate.history import (
    HistoryError,
    make_row,
    next_iteration,
    plot_rows,
    read_iterations,
    read_task_results,
)
from codeloop.io import read_json, read_tasks, write_json
from codeloop.paths import Paths
from codeloop.schema import Task
from codeloop.stages import Step, call

if TYPE_CHECKING:  # types only: both pull in more than this module needs at import
    from codeloop.evaluate.metrics import AgentEval
    from codeloop.sandbox.base import Executor

log = logging.getLogger(__name__)


def _maybe_json(path: Path) -> dict[str, Any]:
    return read_json(path) if path.exists() else {}


def load_frozen_sets(frozen_dir: Path) -> dict[str, list[Task]]:
    """Every data/clean/frozen/<set>.parquet, by set name."""
    files = sorted(Path(frozen_dir).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{frozen_dir}: no frozen evaluation sets (*.parquet)")
    return {f.stem: read_tasks(f) for f in files}


def evaluate_candidate(
    params: Params, paths: Paths, sets: dict[str, list[Task]], iteration: int
) -> dict[str, Any]:
    """Sample the candidate on the frozen sets and judge it (deterministic: no retries).

    With models/critic present (the critic stage's output), each set also gets
    ``pass@1_critic``. Sets of repository tasks run agent episodes (``agent.*``) on the
    snapshots under data/clean/repos/, judged by codeloop.agent.judge on their final
    diffs: their pass@1 is the resolved rate (the gate's figure for them).
    """
    from codeloop.agent.executor import needs_workspaces, open_executor
    from codeloop.evaluate.metrics import evaluate_sets
    from codeloop.policy.engine_policy import close_shared, open_policy
    from codeloop.rewards.critic import Critic

    policy = open_policy(paths.candidate_model, params.policy, params.evaluate.temperature)
    has_critic = (paths.critic_model / "critic.json").exists()
    critic = Critic.load(str(paths.critic_model)) if has_critic else None
    training = read_tasks(paths.clean_tasks) if paths.clean_tasks.exists() else None
    manifest = _maybe_json(paths.manifest)
    tasks = [t for ts in sets.values() for t in ts]
    executor = open_executor(params.sandbox, params.agent, tasks,
                             envs_dir=str(paths.agent_envs_dir), clean_envs=str(paths.clean_envs_dir))
    try:
        result = evaluate_sets(
            policy, sets, executor, params.evaluate, training_tasks=training,
            timeout_s=params.sandbox.timeout_s,
            dataset_version=str(manifest.get("dataset_version", "")),
            iteration=iteration, critic=critic, modes=params.rollout,
            agent=_agent_eval(params, paths, executor) if needs_workspaces(tasks) else None,
        )
    finally:
        executor.close()
        close_shared()
    for name, m in result["sets"].items():
        log.info(
            "%s: pass@1=%.4f success=%.4f over %d tasks",
            name, m.get("pass@1", 0.0), m["success_rate"], m["n_tasks"],
        )
    return result


def _agent_eval(params: Params, paths: Paths, executor: Executor) -> AgentEval:
    """What evaluate_sets needs for repository sets: the env, its params and the judge."""
    from codeloop.agent.env import AgentEnv
    from codeloop.agent.judge import judge_config, judge_many
    from codeloop.evaluate.metrics import AgentEval

    repos = str(paths.repos_dir)
    cfg = judge_config(params.agent)

    def judge(tasks: list[Task], patches: list[str]):
        return judge_many(list(zip(tasks, patches, strict=True)), repos, executor, cfg)

    return AgentEval(env=AgentEnv(executor, params.agent, repos), cfg=params.agent, judge=judge)


def gate(
    params: Params, paths: Paths, eval_metrics: dict[str, Any], iteration: int
) -> dict[str, Any]:
    """The promotion gate on ``eval_metrics`` (evaluate's result or metrics/eval.json) and
    the workspace's history: {"decision", "row" (tonight's history row), "alarms"}."""
    history = read_iterations(paths.iterations_csv)
    manifest = _maybe_json(paths.manifest)
    row = make_row(
        iteration,
        model_version=str(eval_metrics.get("model_version", "")),
        dataset_version=str(manifest.get("dataset_version", "")),
        reward_fn_version=params.reward.version,
        eval_metrics=eval_metrics,
        score_metrics=_maybe_json(paths.metrics("score")),
    )
    alarms = hacking_alarms(history, row)
    rule = GateRule(params.evaluate.gate_tolerance, params.evaluate.gate_alpha)
    last = history[-1] if history else None
    tasks = task_results(params, paths, eval_metrics, last)
    decision = decide(eval_metrics, last, rule, alarms, tasks)
    log.info("%s", decision.summary())
    return {"decision": decision.to_dict(), "row": row, "alarms": alarms}


def eval_settings(params: Params) -> dict[str, Any]:
    """What decides how a policy is sampled at evaluation: two policies' per-task results
    pair only when these are equal (the gate's fields are left out: they judge, not sample)."""
    cfg = params.evaluate.model_dump()
    for key in ("gate_tolerance", "gate_alpha"):
        cfg.pop(key, None)
    return {
        "evaluate": cfg,
        "mode": params.rollout.mode,
        "agent_mode": params.rollout.agent_mode,
        "engine": params.policy.engine,
    }


def task_results(
    params: Params, paths: Paths, eval_metrics: dict[str, Any], last: dict[str, Any] | None
) -> TaskResults:
    """The candidate's per-task results (in ``eval_metrics`` or metrics/eval_tasks.json) and
    the promoted policy's from history/eval_baseline.json, when they were measured on that
    same promoted iteration under the same settings. An unreadable or misshapen results
    file is not fatal: the gate falls back to unpaired, its reason naming the file and field."""
    candidate, cached, bad = eval_metrics.get("task_counts"), {}, ""
    try:
        if candidate is None:
            candidate = (read_task_results(paths.eval_tasks) or {}).get("sets") or {}
        cached = read_task_results(paths.eval_baseline) or {}
    except HistoryError as exc:  # unusable per-task results: the gate goes unpaired, saying why
        log.warning("%s", exc)
        bad = f"unusable per-task results: {exc}"
    why = ""
    if last is None:
        why = "nothing promoted yet"
    elif bad:
        why = bad
    elif not cached:
        why = f"no per-task results were kept for {last.get('tag', '')}"
    elif cached.get("tag") != last.get("tag"):
        why = f"the kept per-task results are {cached.get('tag')!r}'s, not {last.get('tag')!r}'s"
    elif cached.get("settings") != eval_settings(params):
        why = f"{last.get('tag')} was evaluated under other evaluate settings"
    return TaskResults(candidate or {}, None if why else cached.get("sets") or {}, why)


def write_eval(
    paths: Paths, metrics: dict[str, Any], result: dict[str, Any], trend: list[dict[str, Any]],
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """metrics/eval.json, metrics/eval_plot.json and metrics/eval_tasks.json (per-task
    results, kept at promotion for the gate); returns what the artifacts show."""
    write_json(paths.metrics("evaluate"), metrics)
    write_json(paths.eval_tasks, {
        "iteration": metrics.get("iteration"),
        "model_version": metrics.get("model_version", ""),
        "settings": settings or {},
        "sets": result.get("task_counts") or {},
    })
    write_json(paths.eval_plot, trend)
    return {
        "result": result,
        "agent": result.get("agent") or {},
        "trend": trend,
        "data_report": _maybe_json(paths.clean_report),
        "score": _maybe_json(paths.metrics("score")),
    }


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Evaluate models/candidate and write metrics/eval.json + metrics/eval_plot.json."""
    history = read_iterations(paths.iterations_csv)
    iteration = next_iteration(paths.iterations_csv)
    sets = step(load_frozen_sets, paths.frozen_dir)
    result = step(evaluate_candidate, params, paths, sets, iteration)
    verdict = step(gate, params, paths, result, iteration)
    metrics = {
        "iteration": iteration,
        "model_version": verdict["row"]["model_version"],
        "sets": result["sets"],
        "gate": {
            **verdict["decision"],
            "tolerance": params.evaluate.gate_tolerance,
            "alpha": params.evaluate.gate_alpha,
        },
    }
    trend = plot_rows(history + [verdict["row"]])
    step(write_eval, paths, metrics, result, trend, eval_settings(params))
    return metrics
