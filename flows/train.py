"""Stage `train`: one GRPO iteration on the scored trajectories -> models/candidate.

Run: ``python -m flows.train`` (reads ./params.yaml; no Prefect server needed). The
stage itself is codeloop.stages.train.run; this module only runs it as a Prefect flow,
each step a Prefect task (tasks/steps.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.paths import Paths
from codeloop.stages import train as stage
from tasks.steps import as_task, stage_logs


@flow(name="train")
def train(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Run the train stage under ``root``; returns its metrics."""
    with stage_logs():
        return stage.run(load_params(Path(root) / params_path), Paths(Path(root)), step=as_task)


if __name__ == "__main__":
    train()
