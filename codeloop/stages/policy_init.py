"""Stage `policy_init`: the base policy (tokenizer + untrained tiny GPT-2, or policy.model).

Reads ``policy.model``, ``policy_init.*`` and data/clean/tasks.parquet (the corpus the
embedded BPE tokenizer is trained on). Writes models/base (HF model + tokenizer +
model_version.txt). The `sft` stage turns it into models/init.
"""

from __future__ import annotations

import logging
from typing import Any

from codeloop.config import Params
from codeloop.paths import Paths
from codeloop.policy.model import init_policy
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Write models/base; returns {"model_version": its content hash}."""
    version = step(init_policy, params, paths.clean_tasks, paths.base_model)
    log.info("base policy %s (%s) -> %s", version, params.policy.model, paths.base_model)
    return {"model_version": version}
