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
import os
from typing import Any

from codeloop.config import Params
from codeloop.io import read_tasks
from codeloop.paths import Paths
from codeloop.policy.device import resolve_device
from codeloop.policy.model import LOAD_LOCK, Policy, build_embedded, check_loaded, set_threads
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Write models/base; returns {"model_version": its content hash}."""
    extra: list[str] = []
    if params.policy.model == "embedded":
        tasks = read_tasks(paths.clean_tasks)
        if any(t.kind == "repo" for t in tasks):
            from codeloop.policy.agent_format import repo_corpus

            extra = step(repo_corpus, tasks, paths.repos_dir)
    version = step(init_policy, params, paths.clean_tasks, paths.base_model, extra)
    log.info("base policy %s (%s) -> %s", version, params.policy.model, paths.base_model)
    return {"model_version": version}


def load_pretrained(name_or_path: str) -> Policy:
    """A hub id (from the local HF cache; set HF_HUB_OFFLINE=1 offline) or a local path."""
    try:
        with LOAD_LOCK:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tok = AutoTokenizer.from_pretrained(name_or_path)
            model = AutoModelForCausalLM.from_pretrained(name_or_path)
    except OSError as exc:
        raise ValueError(
            f"policy.model: cannot load {name_or_path!r} (not a local path and not in the HF "
            f"cache; this machine may be offline): {exc}"
        ) from None
    check_loaded(model, name_or_path)
    return Policy(model, tok, name=name_or_path)


def init_policy(
    params,
    tasks_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    extra_texts: list[str] | None = None,
) -> str:
    """Build (embedded) or load (hub id / path) the base policy on ``policy.device`` and
    save it into out_dir; returns model_version. extra_texts join the embedded
    tokenizer's corpus."""
    set_threads()
    dev = resolve_device(params.policy.device)  # before any work: a bad device fails fast
    if params.policy.model == "embedded":
        policy = build_embedded(params, read_tasks(tasks_path), extra_texts)
    else:
        policy = load_pretrained(params.policy.model)
    policy.model.to(dev)
    log.info("policy_init: %s on %s", policy.name, policy.device)
    return policy.save(out_dir)
