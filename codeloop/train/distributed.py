"""Multi-process GRPO training with torch.distributed (multi-GPU, or gloo on CPU).

Run the train stage on N GPUs of one machine (from the workspace root; it runs
``codeloop preflight`` first and writes models/candidate and metrics/train.json like
``python -m flows.train``; the entry point is codeloop.stages.train):

    torchrun --nproc_per_node N -m codeloop.stages.train --root .
    accelerate launch --multi_gpu --num_processes N -m codeloop.stages.train --root .

Both launchers set WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; ``init``
reads them and picks nccl on CUDA, gloo on CPU (the test runs the torchrun line with
N=2 on CPU). Without them everything here is a no-op and training is single-process.

How the trainer uses it (codeloop.train.trainer): the model is wrapped in
DistributedDataParallel; every rank builds the same shuffled window of micro-batches
(same seed) and takes a contiguous shard of each micro-batch (``shard``); the shard's
loss is reweighted so that DDP's gradient *average* equals the gradient of the
full micro-batch's loss for every ``train.loss_type`` (gradient averaging is then
exactly single-process training on the full batch, up to float rounding). Only rank 0
writes checkpoints and metrics; before saving, all ranks compare parameter digests and
a mismatch raises (a desynchronised run must never be promoted).

``train.strategy: fsdp`` shards the weights, gradients and AdamW state across the ranks
instead of replicating them (torch FSDP2, codeloop.train.sharding); the same launch
commands run it, or accelerate with the committed FSDP config:

    accelerate launch --config_file configs/accelerate_fsdp.yaml -m codeloop.stages.train --root .

Micro-batch sharding and reweighting are unchanged: FSDP's reduce-scatter averages the
gradients over the ranks as DDP's all-reduce does. Saving gathers the full weights to
rank 0, which writes the usual Hugging Face directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


class DistributedError(RuntimeError):
    """Ranks disagree (parameters, setup): an infrastructure fault, never a result."""


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def init() -> bool:
    """Join the process group described by the launcher's env vars; True if distributed."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    return True


def device() -> torch.device:
    """This rank's GPU under an nccl group; the CPU otherwise (single-process is unchanged)."""
    if world_size() > 1 and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def wrap(model: torch.nn.Module, strategy: str = "ddp") -> torch.nn.Module:
    """DistributedDataParallel around model when distributed, or the model sharded in place
    by FSDP (``strategy`` fsdp: codeloop.train.sharding); model itself alone."""
    if world_size() == 1:
        return model
    if strategy == "fsdp":
        from codeloop.train import sharding

        return sharding.wrap(model, device())
    from torch.nn.parallel import DistributedDataParallel

    dev = device()
    return DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)


def _loss_tokens(items: list) -> int:
    return sum(sum(t.loss_mask[1:]) for t, _ in items)


def shard(
    items: list, loss_type: str, rank_: int | None = None, world: int | None = None
) -> tuple[list, float]:
    """This rank's contiguous share of a micro-batch of (trajectory, advantage), and its weight.

    The weight rescales the shard's loss (normalised over the shard by grpo_loss) to its
    share of the full micro-batch's loss, times world size, because DDP averages
    gradients over ranks (as FSDP's reduce-scatter does: its divide factor is the world size). A rank left with no rows still runs one row at weight 0:
    DDP and FSDP need every rank in every collective. rank_/world default to this
    process's place in the group.
    """
    w = world_size() if world is None else world
    r = rank() if rank_ is None else rank_
    n = len(items)
    if w == 1:
        return items, 1.0
    mine = items[r * n // w : (r + 1) * n // w]
    if not mine:
        return items[:1], 0.0
    if loss_type == "dapo":  # normalised by the window's token count: already global
        return mine, float(w)
    if loss_type == "bnpo":  # normalised by the micro-batch's loss tokens
        return mine, w * _loss_tokens(mine) / max(1, _loss_tokens(items))
    return mine, w * len(mine) / n  # grpo, dr_grpo: normalised by the row count


def to_device(batch: dict[str, torch.Tensor], dev: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(dev) for k, v in batch.items()}


def average(row: dict[str, Any]) -> dict[str, Any]:
    """Numeric stats averaged over ranks (per-rank values describe only that shard)."""
    if world_size() == 1:
        return row
    keys = [k for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    vals = torch.tensor([float(row[k]) for k in keys], dtype=torch.float64, device=device())
    dist.all_reduce(vals)
    return {**row, **{k: float(v) / world_size() for k, v in zip(keys, vals.tolist(), strict=True)}}


def param_digest(model: torch.nn.Module) -> str:
    """sha256 over every state-dict entry's name and bytes (CPU copy)."""
    from codeloop.train.sharding import digest

    return digest(model.state_dict())


def save_on_main(policy, path: str | os.PathLike) -> str:
    """Save on rank 0 after checking every rank holds the same weights; version on all ranks.

    Rank 0 also writes ``ranks.jsonl`` beside the checkpoint (outside the content hash):
    one row per rank with its parameter digest, the record that the ranks agreed. A
    sharded model (fsdp) is gathered first; its rows hold each rank's shard digest and
    the full weights' digest.
    """
    if world_size() == 1:
        return policy.save(path)
    from codeloop.train import sharding

    if sharding.is_sharded(policy.model):
        return _save_sharded(policy, path)
    box: list[str | None] = [None]
    digests: list[str | None] = [None] * world_size()
    dist.all_gather_object(digests, param_digest(policy.model))
    if len(set(digests)) != 1:
        raise DistributedError(f"ranks hold different parameters before saving {path}: {digests}")
    if is_main():
        box[0] = policy.save(path)
        _write_ranks(path, [{"rank": r, "param_sha256": d} for r, d in enumerate(digests)])
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


def _save_sharded(policy, path: str | os.PathLike) -> str:
    """fsdp: the full weights gathered to rank 0 and saved there, once each rank's shards
    are found in them (codeloop.train.sharding.gather_checked)."""
    from codeloop.train import sharding

    full, rows, problem = sharding.gather_checked(policy.model)
    if problem:
        raise DistributedError(f"before saving {path}: {problem}")
    box: list[str | None] = [None]
    if is_main():
        box[0] = policy.save(path, state_dict=full)
        _write_ranks(path, rows)
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


def _write_ranks(path: str | os.PathLike, rows: list[dict]) -> None:
    from codeloop.io import write_jsonl

    write_jsonl(Path(path) / "ranks.jsonl", rows)


def barrier() -> None:
    """Wait for every rank (a no-op in a single process)."""
    if dist.is_initialized():
        dist.barrier()


def shutdown() -> None:
    """Leave the process group, if one was joined."""
    if dist.is_initialized():
        dist.destroy_process_group()
