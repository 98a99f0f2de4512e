"""A temp git copy of this repository on tiny params (the end-to-end tests' workspace)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

TINY = {
    "policy_init": {
        "vocab_size": 400,
        "n_layer": 1,
        "n_head": 2,
        "n_embd": 32,
        "n_positions": 512,
    },
    "sft": {"steps": 10, "batch_size": 8, "max_len": 256},
    "clean": {
        "sources": [{"kind": "synthetic", "n": 40, "seed": 1, "max_depth": 2}],
        "verify_runs": 1,
        # function tasks only: tests/test_pipeline_agent_e2e.py runs the repository tasks
        "repo_tasks": {"enabled": False},
    },
    "bucket": {"tasks_per_iteration": 6},
    "rollout": {"samples_per_task": 3, "max_steps": 2, "max_new_tokens": 24, "batch_size": 16},
    "train": {"steps": 1, "micro_batch_size": 4, "grad_accum": 1},
    "evaluate": {"max_tasks_per_set": 4, "max_new_tokens": 24},
}


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, val in over.items():
        out[key] = merge(base.get(key, {}), val) if isinstance(val, dict) else val
    return out


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def copy_repo(src: Path, dst: Path) -> None:
    """Copy tracked and untracked-but-not-ignored files: what a fresh clone would hold."""
    listed = git(src, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    for rel in filter(None, listed):
        if not (src / rel).is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dst / rel)
