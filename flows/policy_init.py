"""Stage `policy_init`: the base policy (tokenizer + untrained tiny GPT-2, or policy.model) -> models/base.

Run: ``python -m flows.policy_init`` (reads ./params.yaml; no Prefect server needed). The
stage itself is codeloop.stages.policy_init.run; this module only runs it as a Prefect flow,
each step a Prefect task (tasks/steps.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from codeloop.config import load_params
from codeloop.paths import Paths
from codeloop.stages import policy_init as stage
from tasks.steps import as_task, stage_logs


@flow(name="policy_init")
def policy_init(params_path: str = "params.yaml", root: str = ".") -> dict[str, Any]:
    """Run the policy_init stage under ``root``; returns its metrics."""
    with stage_logs():
        return stage.run(load_params(Path(root) / params_path), Paths(Path(root)), step=as_task)


if __name__ == "__main__":
    policy_init()
