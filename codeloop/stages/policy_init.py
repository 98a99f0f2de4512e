"""Stage `policy_init`: the base policy (tokenizer + untrained tiny model, or policy.model).

Reads ``policy.model``, ``policy_init.*`` and data/clean/tasks.parquet (the corpus the
embedded BPE tokenizer is trained on). Writes models/base (HF model + tokenizer +
model_version.txt). The `sft` stage turns it into models/init. With repository tasks in
the training split the embedded tokenizer also sees their snapshots' files (under
data/clean/repos/, named by content hash in tasks.parquet, so that file pins them) and
their expert calls in the agent grammar.
"""

from __future__ import annotations

import logging
from typing import Any

from codeloop.config import Params
from codeloop.io import read_tasks
from codeloop.paths import Paths
from codeloop.policy.init import init_policy
from codeloop.schema import by_kind
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Write models/base; returns {"model_version": its content hash}."""
    extra: list[str] = []
    if params.policy.model == "embedded":
        tasks = read_tasks(paths.clean_tasks)
        if by_kind(tasks)["repo"]:
            from codeloop.policy.agent_format import repo_corpus

            extra = step(repo_corpus, tasks, paths.repos_dir)
    version = step(init_policy, params, paths.clean_tasks, paths.base_model, extra)
    log.info("base policy %s (%s) -> %s", version, params.policy.model, paths.base_model)
    return {"model_version": version}
