"""Shared by the multi-process train tests: a tiny workspace, its launches and its weights.

A workspace is the embedded GPT-2-style policy (tied LM head) at a tiny size, groups of
sampled trajectories with rewards that differ inside each group, and a params.yaml with
only a ``train`` section; launches run the real stage entry point
(``-m codeloop.stages.train``) as a subprocess under the given launcher.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import yaml

from codeloop.config import PolicyInitConfig
from codeloop.data.generator import generate_tasks
from codeloop.io import write_trajectories
from codeloop.paths import Paths
from codeloop.schema import Trajectory, TrajectoryMetadata

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# The documented multi-GPU command, with 2 processes (gloo on this CPU-only machine).
TORCHRUN = [
    str(BIN / "torchrun"),
    "--standalone",
    "--nproc_per_node",
    "2",
    "-m",
    "codeloop.stages.train",
]
SINGLE = [sys.executable, "-m", "codeloop.stages.train"]


def trajectories(policy, tasks) -> list[Trajectory]:
    """Sampled groups of 4 per task with rewards that differ inside each group."""
    from codeloop.policy import prompts as P

    prompts = [policy.encode(P.task_prompt(t)) for t in tasks]
    out = policy.generate(prompts, n=4, max_new_tokens=12, seed=9)
    rows = []
    for t, ids, gens in zip(tasks, prompts, out, strict=True):
        for j, g in enumerate(gens):
            rows.append(
                Trajectory(
                    trajectory_id=f"{t.task_id}-{j}",
                    task_id=t.task_id,
                    prompt_key=t.task_id,
                    prompt=P.task_prompt(t),
                    reward=float(j % 3) / 2 + 0.01 * len(g.token_ids),
                    metadata=TrajectoryMetadata(temperature=1.0, reward_fn_version="v1"),
                    token_ids=ids + g.token_ids,
                    loss_mask=[0] * len(ids) + [1] * len(g.token_ids),
                    sample_logprobs=[0.0] * len(ids) + list(g.logprobs),
                )
            )
    return rows


def make_workspace(root: Path, train: dict, n_layer: int = 1) -> Path:
    """A tiny policy at models/init, scored trajectories, and params.yaml's train section."""
    from codeloop.policy.model import build_embedded

    tasks = generate_tasks(5, seed=3, max_depth=1)
    cfg = PolicyInitConfig(vocab_size=300, n_layer=n_layer, n_head=2, n_embd=32, n_positions=256)
    policy = build_embedded(SimpleNamespace(policy_init=cfg), tasks)
    policy.save(Paths(root).init_model)
    write_trajectories(Paths(root).trajectories_dir, trajectories(policy, tasks))
    write_train(root, train)
    return root


def write_train(root: Path, train: dict) -> None:
    (root / "params.yaml").write_text(yaml.safe_dump({"train": train}))


def copy_workspace(src: Path, dst: Path, train: dict) -> Path:
    """The same policy and trajectories under another train section."""
    for name in ("models", "data"):
        shutil.copytree(src / name, dst / name)
    write_train(dst, train)
    return dst


def launch(cmd: list[str], root: Path, env: dict | None = None, check: bool = True):
    """Run the train stage under cmd on the workspace; the finished process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CODELOOP_THREADS": "1", **(env or {})}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [*cmd, "--root", str(root), "--skip-preflight"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def weights(ckpt: Path, name: str = "model.safetensors") -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(ckpt / name)
