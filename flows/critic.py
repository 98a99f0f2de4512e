"""Stage `critic`: a CodeRL-style critic trained on the scored trajectories -> models/critic.

Run: ``python -m flows.critic`` (reads ./params.yaml; no Prefect server needed).

Reads data/trajectories (label: the trajectory's final code passed every visible test)
and data/buckets/tasks.parquet. Writes models/critic (critic.json + critic.npz) and
metrics/critic.json (examples, pass rate, AUC and accuracy on held-out tasks). The
evaluate stage uses it for critic-guided selection among the n samples per task, and
reward version ``v2-critic`` can use a promoted copy (``reward.critic_path``) as a dense
reward; it cannot read models/critic directly, as score feeds this stage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.io import write_json
from tasks.critic import fit_critic
from tasks.score import load_rollouts


@flow(name="critic")
def critic(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Write models/critic and metrics/critic.json under ``root``."""
    base = Path(root)
    params = load_params(base / params_path)
    trajs, tasks_by_id = load_rollouts(
        str(base / "data/trajectories"), str(base / "data/buckets/tasks.parquet")
    )
    metrics = fit_critic(params.critic, trajs, tasks_by_id, str(base / "models/critic"))
    write_json(base / "metrics/critic.json", metrics)
    return metrics


if __name__ == "__main__":
    critic()
