"""Stage `policy_init`: the base policy (tokenizer + untrained tiny GPT-2, or policy.model).

Run: ``python -m flows.policy_init`` (reads ./params.yaml; no Prefect server needed).

Reads ``policy.model``, ``policy_init.*`` and data/clean/tasks.parquet (the corpus the
embedded BPE tokenizer is trained on). Writes models/base (HF model + tokenizer +
model_version.txt). The `sft` stage turns it into models/init.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from codeloop.config import load_params
from tasks.policy import init_base_policy


@flow(name="policy_init")
def policy_init(params_path: str = "params.yaml", root: str = ".") -> str:
    """Write models/base under ``root``; returns its model_version."""
    base = Path(root)
    params = load_params(base / params_path)
    return init_base_policy(
        params, str(base / "data/clean/tasks.parquet"), str(base / "models/base")
    )


if __name__ == "__main__":
    policy_init()
