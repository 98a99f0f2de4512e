"""Stage `evaluate`: the candidate policy on the frozen sets, the gate's verdict, artifacts.

Run: ``python -m flows.evaluate`` (reads ./params.yaml; no Prefect server needed).

Reads models/candidate, models/critic (critic-guided selection, when the critic stage
has written it), data/clean/frozen/*.parquet (leak-checked against
data/clean/tasks.parquet), metrics/score.json, history/iterations.csv. Writes
metrics/eval.json (DVC metrics: per-set metrics, the candidate's iteration, the gate
decision) and metrics/eval_plot.json (DVC plots: one record per iteration, promoted
history plus this candidate). The gate is computed here so that `dvc repro` alone shows
it; nightly recomputes it from the same files before promoting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.evaluate.gate import decide, hacking_alarms
from codeloop.evaluate.history import (
    ITERATIONS_CSV,
    make_row,
    next_iteration,
    plot_rows,
    read_iterations,
)
from codeloop.io import read_json, write_json
from tasks.evaluate import evaluate_candidate, load_frozen_sets
from tasks.ops import publish_eval_artifacts, publish_gate_artifacts


def _maybe_json(path: Path) -> dict[str, Any]:
    return read_json(path) if path.exists() else {}


@flow(name="evaluate")
def evaluate(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Evaluate models/candidate and write metrics/eval.json + metrics/eval_plot.json."""
    base = Path(root)
    params = load_params(base / params_path)
    history = read_iterations(base / ITERATIONS_CSV)
    iteration = next_iteration(base / ITERATIONS_CSV)
    sets = load_frozen_sets(str(base / "data/clean/frozen"))
    result = evaluate_candidate(
        params,
        str(base / "models/candidate"),
        sets,
        str(base / "data/clean/tasks.parquet"),
        str(base / "data/clean/manifest.json"),
        iteration,
        str(base / "models/critic") if (base / "models/critic/critic.json").exists() else "",
    )
    score = _maybe_json(base / "metrics/score.json")
    manifest = _maybe_json(base / "data/clean/manifest.json")
    row = make_row(
        iteration,
        model_version=result.get("model_version", ""),
        dataset_version=str(manifest.get("dataset_version", "")),
        reward_fn_version=params.reward.version,
        eval_metrics=result,
        score_metrics=score,
    )
    alarms = hacking_alarms(history, row)
    decision = decide(
        result, history[-1] if history else None, params.evaluate.gate_tolerance, alarms
    )
    metrics = {
        "iteration": iteration,
        "model_version": row["model_version"],
        "sets": result["sets"],
        "gate": {**decision.to_dict(), "tolerance": params.evaluate.gate_tolerance},
    }
    write_json(base / "metrics/eval.json", metrics)
    trend = plot_rows(history + [row])
    write_json(base / "metrics/eval_plot.json", trend)
    publish_eval_artifacts(result, trend, _maybe_json(base / "data/clean/report.json"), score)
    publish_gate_artifacts(decision.to_dict(), alarms)
    return metrics


if __name__ == "__main__":
    evaluate()
