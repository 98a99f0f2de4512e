"""Stage `score`: rewards for the rollout's trajectories, a replay check, metrics.

Run: ``python -m flows.score`` (reads ./params.yaml; no Prefect server needed).

Reads data/rollouts/ (trajectories without reward) and data/buckets/tasks.parquet;
re-executes each final code against the task's visible tests with the reward version
``reward.version`` (hidden tests run for diagnostics only). Writes data/trajectories/
(Parquet shards + trajectories.jsonl) and metrics/score.json (reward and per-component
distributions, visible/hidden pass rates and gap, infra errors, zero-std group fraction,
the replay summary). Then replays ``score.replay_sample`` stored trajectories and fails
the stage on any mismatch. Scoring fans out over ``runner.*`` in chunks of whole GRPO
groups (codeloop.rollout.scaleout.score_fanned); every runner gives the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.io import write_json
from codeloop.rewards.summary import summarize
from tasks.score import load_rollouts, publish_components, replay_sample, score_batch, write_scored


class ReplayMismatch(RuntimeError):
    """Stored rewards disagree with a recomputation: the score stage is not reproducible."""


@flow(name="score")
def score(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Score data/rollouts into data/trajectories and write metrics/score.json."""
    base = Path(root)
    params = load_params(base / params_path)
    trajs, tasks_by_id = load_rollouts(
        str(base / "data/rollouts"), str(base / "data/buckets/tasks.parquet")
    )
    scored = score_batch(params, trajs, tasks_by_id)
    out_dir = base / "data/trajectories"
    write_scored(str(out_dir), scored)
    metrics = summarize(scored, params.reward.version)
    rep: dict[str, Any] = {"replayed": 0, "mismatches": 0, "errors": 0}
    if params.score.replay_sample > 0 and scored:
        rep = replay_sample(params, str(out_dir), tasks_by_id)
    metrics["replay"] = {k: v for k, v in rep.items() if k != "table"}
    write_json(base / "metrics/score.json", metrics)
    publish_components(metrics)
    if rep["mismatches"]:
        raise ReplayMismatch(
            f"replay disagrees on {rep['mismatches']} trajectories:\n{rep['table']}"
        )
    return metrics


if __name__ == "__main__":
    score()
