"""Promotion: the gated candidate becomes the next iteration.

The gate (codeloop.evaluate.gate) decides; this acts. It copies models/candidate to
models/iter-NNNN (merged when LoRA asks for it), ships the night's critic with it, `dvc add`s
it, points policy.checkpoint at it and appends the history row; the nightly flow commits and
tags the result. params.yaml is edited in place so its comments survive.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

from codeloop.paths import Paths

log = logging.getLogger(__name__)


def set_param(params_path: str | Path, section: str, key: str, value: str) -> str:
    """Set one top-level ``section.key`` scalar in params.yaml in place, keeping the
    file's comments and layout (a yaml round trip would drop them); returns the old value.
    """
    path = Path(params_path)
    text = path.read_text()
    pattern = re.compile(
        rf"^({re.escape(section)}:[ \t]*(?:#.*)?\n(?:[ \t]+.*\n|\s*\n)*?[ \t]+{re.escape(key)}:[ \t]*)"
        r"(\S+)",
        re.M,
    )
    m = pattern.search(text)
    if not m:
        raise ValueError(f"{path}: no {section}.{key} key to update")
    path.write_text(text[: m.start(2)] + value + text[m.end(2) :])
    return m.group(2)


def set_checkpoint(params_path: str | Path, checkpoint: str) -> str:
    """Point policy.checkpoint at a new directory, keeping the file's comments; returns old."""
    return set_param(params_path, "policy", "checkpoint", checkpoint)


def _ship_critic(repo: Path, target: Path) -> None:
    """Promote the night's critic (models/critic) with its checkpoint, as target/critic.

    Why: score feeds the critic stage, so v2-critic cannot read models/critic without a
    DVC cycle; it reads the last promoted critic instead (reward.critic_path, updated here
    only when the reward version needs a critic, so other versions' score stays cached).
    """
    from codeloop.config import load_params
    from codeloop.rewards.registry import get_composition

    if not (Paths(repo).critic_model / "critic.json").exists():
        return
    shutil.copytree(Paths(repo).critic_model, target / "critic")
    if get_composition(load_params(repo / "params.yaml").reward.version).needs_critic:
        set_param(
            repo / "params.yaml", "reward", "critic_path", f"{target.relative_to(repo)}/critic"
        )


def merge_lora_checkpoint(src: str | Path, dst: str | Path) -> str:
    """Write a LoRA checkpoint's base + adapter merged into one full checkpoint at dst."""
    from codeloop.policy.model import Policy

    policy = Policy.load(src, quantize="none")  # QLoRA too: merge into the full weights
    policy.model = policy.model.merge_and_unload()
    policy.lora_base, policy.lora_quantize = None, "none"
    return policy.save(dst)


def _copy_candidate(src: Path, target: Path, repo: Path) -> None:
    """The candidate as promoted: a copy, or (LoRA, train.lora.merge_on_promote) the base
    with the adapter merged into one full model (codeloop.policy.lora)."""
    from codeloop.config import load_params
    from codeloop.policy.lora import is_adapter_dir

    if is_adapter_dir(src) and load_params(repo / "params.yaml").train.lora.merge_on_promote:
        merge_lora_checkpoint(src, target)
    else:
        shutil.copytree(src, target)


def keep_eval_tasks(paths: Paths, tag: str) -> None:
    """Keep the promoted candidate's per-task frozen-set results (metrics/eval_tasks.json)
    as history/eval_baseline.json, tagged, for the next nights' paired gate. Without them
    the old file goes: a baseline of an older iteration must never pair with a newer one.
    Misshapen results are not kept either (logged, naming the file and field)."""
    from codeloop.evaluate.history import HistoryError, read_task_results
    from codeloop.io import write_json

    try:
        kept = read_task_results(paths.eval_tasks)
    except HistoryError as exc:
        log.warning("not kept for the next gate: %s", exc)
        kept = None
    if kept is not None:
        write_json(paths.eval_baseline, {**kept, "tag": tag})
    else:
        paths.eval_baseline.unlink(missing_ok=True)


def promote(repo: str | Path, iteration: int, row: dict[str, Any], pass_rates: dict[str, float]):
    """Copy models/candidate to models/iter-NNNN, `dvc add` it, point policy.checkpoint
    at it, append the history row, merge pass rates and keep the per-task evaluation
    results. Returns the files to commit.

    On any failure everything this step wrote is undone, so the last good iteration
    stays exactly as it was.
    """
    from codeloop.evaluate.history import (
        ITERATIONS_CSV,
        PASS_RATES_JSON,
        append_iteration,
        tag_for,
        update_pass_rates,
    )
    from codeloop.ops.vcs import dvc, git

    repo = Path(repo)
    tag = tag_for(iteration)
    target = repo / "models" / tag
    if target.exists() or (repo / f"models/{tag}.dvc").exists():
        raise FileExistsError(f"{target}: already exists; iteration {iteration} was promoted")
    try:
        _copy_candidate(Paths(repo).candidate_model, target, repo)
        _ship_critic(repo, target)
        dvc(repo, "add", f"models/{tag}")
        set_checkpoint(repo / "params.yaml", f"models/{tag}")
        append_iteration(row, repo / ITERATIONS_CSV)
        update_pass_rates(pass_rates, repo / PASS_RATES_JSON)
        keep_eval_tasks(Paths(repo), tag)
    except Exception:
        shutil.rmtree(target, ignore_errors=True)
        (repo / f"models/{tag}.dvc").unlink(missing_ok=True)
        git(repo, "checkout", "HEAD", "--", "params.yaml", "history", check=False)
        git(repo, "checkout", "HEAD", "--", "models/.gitignore", check=False)
        raise
    return [f"models/{tag}.dvc", "models/.gitignore", "params.yaml", "history"]
