"""Stage `sft`: SFT warm-start of models/base on reference solutions -> models/init.

Reads ``sft.*``, models/base and data/clean/tasks.parquet (training split only; the
frozen sets live elsewhere). Writes models/init (the iteration-0 policy that
``policy.checkpoint`` names by default) and metrics/sft.json (loss before/after,
seconds, model_version, base_version). With ``sft.steps == 0`` the base policy is saved
unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from codeloop.config import Params
from codeloop.io import read_tasks, write_json
from codeloop.paths import Paths
from codeloop.policy.model import Policy
from codeloop.policy.sft import run_sft
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Write models/init and metrics/sft.json; returns the SFT stats."""
    policy = Policy.load(paths.base_model, device=params.policy.device)
    base_version = policy.model_version
    stats = step(run_sft, policy, read_tasks(paths.clean_tasks), params.sft)
    version = policy.save(paths.init_model)
    stats = {**stats, "model_version": version, "base_version": base_version}
    log.info(
        "sft %s -> %s: %s steps on %s examples, loss %s -> %s",
        base_version[:12], version[:12], stats["steps"], stats["examples"],
        stats["loss_first"], stats["loss_last"],
    )  # fmt: skip
    write_json(paths.metrics("sft"), stats)
    return stats
