"""Stage `sft`: SFT warm-start of models/base on reference solutions -> models/init.

Run: ``python -m flows.sft`` (reads ./params.yaml; no Prefect server needed).

Reads ``sft.*``, models/base and data/clean/tasks.parquet (training split only; the
frozen sets live elsewhere). Writes models/init (the iteration-0 policy that
``policy.checkpoint`` names by default) and metrics/sft.json (loss before/after,
seconds, model_version).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.io import write_json
from tasks.policy import sft_policy


@flow(name="sft")
def sft(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Write models/init and metrics/sft.json under ``root``; returns the SFT stats."""
    base = Path(root)
    params = load_params(base / params_path)
    stats = sft_policy(
        params,
        str(base / "models/base"),
        str(base / "data/clean/tasks.parquet"),
        str(base / "models/init"),
    )
    write_json(base / "metrics/sft.json", stats)
    return stats


if __name__ == "__main__":
    sft()
