"""Prefect tasks of operations: artifacts shown on the Artifacts page, with stable keys.

Keys (lowercase-dash, so every run's version lines up under one key in the UI):
eval-metrics, pass-at-k-trend, gate-decision, alarms, data-report, reward-components.
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
    "reward-components",
)

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


@task(name="publish-eval-artifacts")
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


@task(name="publish-gate-artifacts")
def publish_gate_artifacts(decision: dict[str, Any], alarms: list[str]) -> None:
    """Gate decision (with every reason) and the hacking alarms, as markdown."""
    verdict = "PROMOTE" if decision.get("promote") else "REFUSE"
    lines = [f"# Gate: **{verdict}**", ""]
    lines += [f"- refused: {r}" for r in decision.get("reasons", [])]
    lines += [f"- ok: {n}" for n in decision.get("notes", [])]
    create_markdown_artifact(key="gate-decision", markdown="\n".join(lines))
    body = "\n".join(f"- {a}" for a in alarms) if alarms else "No hacking alarm raised."
    create_markdown_artifact(key="alarms", markdown=f"# Reward-hacking alarms\n\n{body}\n")


class TransientError(RuntimeError):
    """A failure worth retrying (remote unreachable, lock briefly held); nothing else is."""


# Output fragments that mark a failure as transient rather than a bug in a stage.
_TRANSIENT_MARKERS = (
    "Connection refused",
    "Connection reset",
    "Temporary failure in name resolution",
    "timed out",
    "Unable to acquire lock",
    "Resource temporarily unavailable",
)


def _transient_only(task, task_run, state) -> bool:
    try:
        state.result()
    except TransientError:
        return True
    except Exception:
        return False
    return False


def run_logged(cmd: list[str], cwd: str, what: str) -> str:
    """Run a command, streaming each output line into the Prefect run log (the UI)."""
    import subprocess

    from prefect.logging import get_run_logger

    from codeloop.ops.rollback import _env

    log = get_run_logger()
    log.info("$ %s", " ".join(cmd))
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        log.info("%s", line.rstrip())
    rc = proc.wait()
    out = "".join(lines)
    if rc != 0:
        tail = "".join(lines[-30:])
        if any(m in out for m in _TRANSIENT_MARKERS):
            raise TransientError(f"{what} failed transiently (exit {rc}):\n{tail}")
        raise RuntimeError(f"{what} failed (exit {rc}):\n{tail}")
    return out


@task(name="dvc-pull", retries=2, retry_delay_seconds=5, retry_condition_fn=_transient_only)
def dvc_pull(repo: str) -> None:
    from codeloop.ops.rollback import dvc_cmd

    try:
        run_logged(dvc_cmd("pull", "--allow-missing"), repo, "dvc pull")
    except RuntimeError as exc:  # a pull failure is the remote's, not the code's
        raise TransientError(str(exc)) from exc


@task(name="dvc-push", retries=2, retry_delay_seconds=5, retry_condition_fn=_transient_only)
def dvc_push(repo: str) -> None:
    from codeloop.ops.rollback import dvc_cmd

    try:
        run_logged(dvc_cmd("push"), repo, "dvc push")
    except RuntimeError as exc:
        raise TransientError(str(exc)) from exc


@task(retries=1, retry_delay_seconds=2, retry_condition_fn=_transient_only)
def repro_stage(repo: str, stage: str) -> str:
    """`dvc repro --single-item <stage>`: one stage, its logs in this task's log."""
    from codeloop.ops.rollback import dvc_cmd

    return run_logged(dvc_cmd("repro", "--single-item", stage), repo, f"stage {stage}")
