"""Stage `critic`: a CodeRL-style critic on the scored trajectories -> models/critic.

Run: ``python -m flows.critic`` (reads ./params.yaml; no Prefect server needed). The
stage itself is codeloop.stages.critic.run; this module only runs it as a Prefect flow,
each step a Prefect task (tasks/steps.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.paths import Paths
from codeloop.stages import critic as stage
from tasks.steps import as_task, stage_logs


@flow(name="critic")
def critic(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Run the critic stage under ``root``; returns its metrics."""
    with stage_logs():
        return stage.run(load_params(Path(root) / params_path), Paths(Path(root)), step=as_task)


if __name__ == "__main__":
    critic()
