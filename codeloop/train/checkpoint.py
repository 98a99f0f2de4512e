"""Checkpoint side files of the GRPO trainer: AdamW state, the candidate dir, peak memory."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import torch

from codeloop.policy.model import VERSION_FILE

OPT_FILE = "optimizer.pt"  # AdamW state beside a checkpoint (train.keep_optimizer_state)


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory so far: CUDA's allocator peak on a GPU, the process's peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def load_opt_state(policy_dir, model) -> dict | None:
    """The AdamW state the previous iteration saved beside this policy, or None.

    A state whose tensors do not fit the model (another architecture) is refused with
    the file named: resuming it would fail later with a shape error inside AdamW.
    """
    path = Path(policy_dir) / OPT_FILE
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        raise ValueError(
            f"{path}: unreadable optimizer state ({exc}); delete it to start fresh"
        ) from exc
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not an optimizer state dict; delete it to start fresh")
    shapes = [tuple(p.shape) for p in model.parameters() if p.requires_grad]
    saved = state.get("state", {})
    for idx, entry in saved.items():
        avg = entry.get("exp_avg")
        if idx >= len(shapes) or avg is None or tuple(avg.shape) != shapes[idx]:
            raise ValueError(
                f"{path}: optimizer state does not match the model in {policy_dir} "
                f"(parameter {idx}); delete the file to start a fresh optimizer"
            )
    return state


def prepare_out(out_dir) -> None:
    """Empty a previous candidate; refuse to wipe a directory that is not a checkpoint."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        if not (out / VERSION_FILE).exists():
            raise FileExistsError(
                f"{out} exists, is not empty and holds no {VERSION_FILE}: not overwriting it"
            )
        shutil.rmtree(out)
