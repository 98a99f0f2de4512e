"""Prefect artifacts shown on the Artifacts page, with stable keys (one task each).

Keys (lowercase-dash, so every run's version lines up under one key in the UI):
eval-metrics, pass-at-k-trend, gate-decision, alarms, data-report, reward-components,
and for agent episodes (repository tasks) agent-tool-mix and agent-episode (rollout:
the tool-call mix and one sampled episode step by step), agent-eval (evaluate: resolved
agent-eval-tool-mix and agent-eval-episode (evaluate: the same on the frozen repository
sets, with the resolved rate), and where an inference engine sampled (``policy.engine:
vllm``) engine-rollout (rollout: the engine's start and weight-sync seconds, requests,
tokens per second) and engine-train (train: the correction of the engine's rows); the
nightly flow publishes nights (the last week of nights: outcome, paired Δ ± SE per set,
KL, minutes, reasons).
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

ARTIFACT_KEYS = (
    "eval-metrics",
    "pass-at-k-trend",
    "gate-decision",
    "alarms",
    "data-report",
    "test-quality",
    "reward-components",
)
# Published only when a stage ran agent episodes (repository tasks on).
AGENT_ARTIFACT_KEYS = (
    "agent-tool-mix",
    "agent-episode",
    "agent-eval-tool-mix",
    "agent-eval-episode",
)
# Published only when an inference engine sampled the rows (policy.engine other than hf).
ENGINE_ARTIFACT_KEYS = ("engine-rollout", "engine-train")
# Published by the nightly flow itself, after every night (promoted, refused or failed).
NIGHTLY_ARTIFACT_KEYS = ("nights",)
# train's summary keys for an engine's rows (codeloop.train.sampler_gap)
ENGINE_TRAIN_KEYS = ("engine_rows", "engine_logp_gap", "engine_is_truncated",
                     "engine_is_weight_mean")

_METRIC_COLS = (
    "pass@1",
    "pass@10",
    "pass@100",
    "success_rate",
    "avg_steps",
    "avg_failed_attempts",
    "timeout_rate",
    "error_rate",
    "visible_pass_rate",
    "hidden_pass_rate",
    "hidden_visible_gap",
    "infra_errors",
    "resolved_rate",
    "tool_call_success_rate",
    "invalid_call_rate",
    "tests_before_submit_rate",
    "avg_tokens",
)


def _fmt(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


def metrics_table(eval_metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """One table row per frozen set and per (set, difficulty bucket)."""
    rows = []
    for name, m in sorted((eval_metrics.get("sets") or {}).items()):
        rows.append({"set": name, "difficulty": "all", **{c: _fmt(m.get(c)) for c in _METRIC_COLS}})
        for d, dm in (m.get("by_difficulty") or {}).items():
            rows.append(
                {"set": name, "difficulty": d, **{c: _fmt(dm.get(c)) for c in _METRIC_COLS}}
            )
    return rows


@task(name="publish_eval_artifacts")
def publish_eval_artifacts(
    eval_metrics: dict[str, Any],
    trend: list[dict[str, Any]],
    data_report: dict[str, Any] | None,
    score_metrics: dict[str, Any] | None,
) -> None:
    """Metrics table, pass@k trend, data report and reward-component distributions."""
    create_table_artifact(
        key="eval-metrics",
        table=metrics_table(eval_metrics),
        description=f"Frozen-set metrics of {eval_metrics.get('model_version', '?')[:12]}",
    )
    create_table_artifact(
        key="pass-at-k-trend",
        table=[{k: _fmt(v) for k, v in r.items()} for r in trend] or [{"iteration": "none"}],
        description="pass@1 per frozen set and train/hidden signals over iterations",
    )
    report = data_report or {}
    create_table_artifact(
        key="data-report",
        table=[{"field": k, "value": str(v)} for k, v in sorted(report.items())]
        or [{"field": "report", "value": "data/clean/report.json missing"}],
        description="Clean stage: kept / dropped / quarantined",
    )
    create_table_artifact(
        key="test-quality",
        table=quality_table(report)
        or [{"source": "none", "note": "data/clean/report.json has no test_quality"}],
        description=f"clean stage, tests_version {report.get('tests_version', '')}",
    )
    comps = (score_metrics or {}).get("components") or (score_metrics or {}).get(
        "reward_components"
    )
    rows = []
    for name, dist in sorted((comps or {}).items()):
        stats = dist if isinstance(dist, dict) else {"mean": dist}
        rows.append({"component": name, **{k: _fmt(v) for k, v in stats.items()}})
    create_table_artifact(
        key="reward-components",
        table=rows or [{"component": "none", "note": "metrics/score.json has no components"}],
        description="Reward component distributions of this iteration's trajectories",
    )


def paired_lines(paired: dict[str, dict[str, Any]]) -> list[str]:
    """The gate's per-set comparison as a markdown table (empty without one)."""
    if not paired:
        return []
    lines = ["", "| set | Δ pass@1 | SE | one-sided p | min. detectable drop | verdict |",
             "|---|---|---|---|---|---|"]
    for name, p in sorted(paired.items()):
        cells = [f"{p[k]:.4g}" if isinstance(p.get(k), float) else "-"
                 for k in ("delta", "se", "p_value", "mdd")]
        lines.append(f"| {name} | {' | '.join(cells)} | {p.get('verdict', '')} |")
    return lines


@task(name="publish_gate_artifacts")
def publish_gate_artifacts(decision: dict[str, Any], alarms: list[str]) -> None:
    """Gate decision (with every reason and the paired table) and the hacking alarms."""
    verdict = "PROMOTE" if decision.get("promote") else "REFUSE"
    lines = [f"# Gate: **{verdict}**", ""]
    lines += [f"- refused: {r}" for r in decision.get("reasons", [])]
    lines += [f"- ok: {n}" for n in decision.get("notes", [])]
    lines += paired_lines(decision.get("paired") or {})
    create_markdown_artifact(key="gate-decision", markdown="\n".join(lines))
    body = "\n".join(f"- {a}" for a in alarms) if alarms else "No hacking alarm raised."
    create_markdown_artifact(key="alarms", markdown=f"# Reward-hacking alarms\n\n{body}\n")


@task(name="publish_data_report")
def publish_data_report(report: dict[str, Any]) -> None:
    """A table artifact (key data-report) with the accounting of the clean stage."""
    rows = [{"outcome": "rows_in", "count": report["rows_in"]}]
    rows.append({"outcome": "kept_train", "count": report["kept_train"]})
    rows.append({"outcome": "kept_heldout", "count": report["kept_heldout"]})
    rows += [
        {"outcome": f"dropped:{k}", "count": v} for k, v in report["dropped_by_reason"].items()
    ]
    rows.append({"outcome": "quarantined", "count": report["quarantined"]})
    rows += [{"outcome": f"frozen:{k}", "count": v} for k, v in report["frozen"].items()]
    create_table_artifact(
        key="data-report",
        table=rows,
        description=f"clean stage, dataset_version {report['dataset_version'][:12]}",
    )


def quality_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per task source (and "all"): tests per task and mutation score before and
    after augmentation, coverage of the reference, weak and skipped tasks."""
    rows = []
    for source, q in report.get("test_quality", {}).items():
        row = {"source": source, "tasks": q["tasks"], "augmented": q["augmented"],
               "weak": q["weak"], "dropped": q["dropped"]}
        row.update({k.removeprefix("mean_"): _fmt(v) for k, v in q.items()
                    if k.startswith("mean_")})
        row["skipped"] = ", ".join(f"{k}: {v}" for k, v in sorted(q["skipped"].items()))
        rows.append(row)
    return rows


@task(name="publish_test_quality")
def publish_test_quality(report: dict[str, Any]) -> None:
    """A table artifact (key test-quality): the clean stage's tests, by source."""
    create_table_artifact(
        key="test-quality",
        table=quality_table(report),
        description=f"clean stage, tests_version {report.get('tests_version', '')}",
    )


@task(name="publish_components")
def publish_components(metrics: dict[str, Any]) -> None:
    """Table artifact 'reward-components': one row per component distribution."""
    rows = [{"component": "reward", **metrics["reward"]}]
    rows += [{"component": k, **v} for k, v in metrics["components"].items()]
    create_table_artifact(
        key="reward-components",
        table=rows,
        description=f"Reward {metrics['reward_version']}: component distributions",
    )


def tool_mix_table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per tool: calls, failed calls and their share of all calls."""
    mix = summary.get("tool_mix") or {}
    total = sum(r["calls"] for r in mix.values()) or 1
    return [
        {
            "tool": name,
            "calls": r["calls"],
            "errors": r["errors"],
            "share": _fmt(r["calls"] / total),
        }
        for name, r in mix.items()
    ] or [{"tool": "none", "calls": 0, "errors": 0, "share": 0.0}]


@task(name="publish_agent_artifacts")
def publish_agent_artifacts(summary: dict[str, Any] | None, prefix: str = "agent") -> None:
    """Tool-call mix (table) and one sampled episode step by step (markdown)."""
    if not summary:
        return
    it = summary.get("iteration", "?")
    resolved = summary.get("resolved_rate")
    head = f"iteration {it}: {summary.get('episodes', 0)} agent episodes"
    if resolved is not None:
        head += f", resolved rate {resolved:.4f}"
    create_table_artifact(key=f"{prefix}-tool-mix", table=tool_mix_table(summary), description=head)
    reasons = ", ".join(f"{k} {v}" for k, v in (summary.get("terminal_reasons") or {}).items())
    md = f"# {head}\n\nterminal reasons: {reasons}\n\n{summary.get('episode_markdown', '')}\n"
    create_markdown_artifact(key=f"{prefix}-episode", markdown=md)


def engine_rollout_table(block: dict[str, Any]) -> list[dict[str, Any]]:
    """One row: the rollout's engine block (codeloop.policy.engine_policy.engine_metrics)."""
    syncs = block.get("sync_s") or []
    return [{
        "engine": block.get("engine", ""),
        "engines": block.get("engines", 0),
        "start_s": _fmt(block.get("start_s", 0.0)),
        "syncs": len(syncs),
        "sync_s_total": _fmt(float(sum(syncs))),
        "requests": block.get("requests", 0),
        "generated_tokens": block.get("generated_tokens", 0),
        "tokens_per_s": _fmt(block.get("tokens_per_s", 0.0)),
    }]


@task(name="publish_engine_rollout")
def publish_engine_rollout(block: dict[str, Any]) -> None:
    """Table artifact engine-rollout: what the inference engine did for the rollout."""
    create_table_artifact(
        key="engine-rollout",
        table=engine_rollout_table(block),
        description=f"rollout sampled by {block.get('engine', '?')}",
    )


@task(name="publish_engine_train")
def publish_engine_train(summary: dict[str, Any]) -> None:
    """Table artifact engine-train: train's correction of the engine's rows (their count,
    the mean |log-prob gap| to the policy as the iteration starts, the share of truncated
    importance weights and their mean)."""
    create_table_artifact(
        key="engine-train",
        table=[{k: _fmt(summary[k]) for k in ENGINE_TRAIN_KEYS if k in summary}],
        description=f"candidate {str(summary.get('model_version', ''))[:12]}: engine rows "
        "corrected against the policy as the iteration starts",
    )


@task(name="publish_nights")
def publish_nights(table: list[dict[str, Any]]) -> None:
    """The last week of nights (codeloop.ops.nights.nights_table) as one table."""
    create_table_artifact(
        key="nights",
        table=table or [{"night": "none"}],
        description="The last nights: outcome, paired Δ ± SE per frozen set vs the promoted "
        "policy, KL of the update, minutes, the gate's reasons",
    )
