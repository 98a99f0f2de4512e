"""Stage `train`: one GRPO iteration on the scored trajectories.

Run: ``python -m flows.train`` (reads ./params.yaml; no Prefect server needed).

Reads ``params.train``, the policy at ``params.policy.checkpoint`` and data/trajectories
(complete, scored rows). Refuses to start when ``codeloop preflight`` fails. Writes
models/candidate (HF model + tokenizer + model_version.txt, the content hash; the
per-step log in train_history.jsonl) and metrics/train.json (DVC metrics: loss, kl,
clip ratios, entropy, completion lengths, reward mean/std, frac_reward_zero_std).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.io import write_json, write_jsonl
from tasks.train import check_preflight, load_trajectories, train_policy


@flow(name="train")
def train(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Train models/candidate from data/trajectories; write metrics/train.json."""
    base = Path(root)
    params = load_params(base / params_path)
    preflight = check_preflight(params, str(base))
    trajectories = load_trajectories(str(base / "data/trajectories"))
    policy_dir = Path(params.policy.checkpoint)
    if not policy_dir.is_absolute():
        policy_dir = base / policy_dir
    out_dir = base / "models/candidate"
    result = train_policy(str(policy_dir), trajectories, params.train, str(out_dir))
    history = result.pop("history")
    # .jsonl is outside the checkpoint hash, so the log never changes model_version.
    write_jsonl(out_dir / "train_history.jsonl", history)
    metrics = {**result, "preflight": "ok" if preflight.get("ok") else "skipped"}
    write_json(base / "metrics/train.json", metrics)
    return metrics


if __name__ == "__main__":
    train()
