"""Stage `critic`: a CodeRL-style critic trained on the scored trajectories -> models/critic.

Reads data/trajectories (label: the trajectory's final code passed every visible test)
and data/buckets/tasks.parquet. Writes models/critic (critic.json + critic.npz) and
metrics/critic.json (examples, pass rate, AUC and accuracy on held-out tasks, or why the
held-out split is too degenerate to carry them). The evaluate stage uses it for
critic-guided selection among the n samples per task, and the unreleased reward version
``v2-critic`` can use a promoted copy (``reward.critic_path``) as a dense reward; it
cannot read models/critic directly, as score feeds this stage.
"""

from __future__ import annotations

import logging
from typing import Any

from codeloop.config import Params
from codeloop.io import read_with_tasks, write_json
from codeloop.paths import Paths
from codeloop.rewards.critic import fit_critic
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Write models/critic and metrics/critic.json; returns the metrics."""
    trajs, tasks_by_id = step(read_with_tasks, paths.trajectories_dir, paths.bucket_tasks)
    critic, metrics = step(fit_critic, trajs, tasks_by_id, params.critic)
    critic.save(paths.critic_model)
    log.info(
        "critic on %d examples (pass rate %.3f, skipped %s): held-out %s, AUC %s over %d rows",
        metrics["n_examples"], metrics["pass_rate"], metrics["skipped"] or "none",
        metrics["holdout_status"], metrics["holdout_auc"], metrics["n_holdout"],
    )
    write_json(paths.metrics("critic"), metrics)
    return metrics
