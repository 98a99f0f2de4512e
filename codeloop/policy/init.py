"""The base policy: the embedded tiny model built from the task corpus (tokenizer +
untrained model), or a pretrained one named by ``policy.model`` (hub id or local path),
placed on ``policy.device`` and saved. The policy_init stage (codeloop.stages.policy_init)
runs init_policy; the sft stage warm-starts what it writes.
"""

from __future__ import annotations

import logging
import os

from codeloop.config import Params
from codeloop.io import read_tasks
from codeloop.policy.device import resolve_device
from codeloop.policy.model import LOAD_LOCK, Policy, build_embedded, check_loaded, set_threads

log = logging.getLogger(__name__)


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
    params: Params,
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
