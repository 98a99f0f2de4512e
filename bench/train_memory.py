"""Bytes each rank holds for training, ``train.strategy`` ddp versus fsdp, on 2 ranks (gloo on CPU).

Run: ``python bench/train_memory.py [--layers 4] [--width 128] [--nproc 2] [--out metrics/train_memory.json]``

The embedded policy (tied LM head) at a small size is saved once; then each strategy runs
under ``torchrun --standalone --nproc_per_node 2`` (this file's ``--worker`` mode): the
trainer's own GRPOUpdater (KL on, so the frozen reference is held too) takes one step over
the same rows. After the step every rank adds up the bytes of the tensors it really holds:
its parameters (a DTensor's local shard, ``to_local``), their gradients, AdamW's state
(exp_avg, exp_avg_sq, step) and the reference's parameters. Printed per rank side by side,
with fsdp / ddp as a ratio; DDP's gradient buckets and activations are not counted there.
Each rank also records the step's seconds and its peak memory (``peak_mb``: the process's
peak RSS on CPU; on CUDA, where the ranks use nccl and bf16, ``max_memory_allocated``,
which does count activations and buckets: scripts/gpu_check.sh runs it on 2+ GPUs).
Figures to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

KINDS = ("params", "grads", "optimizer", "reference")


def _nbytes(t: torch.Tensor | None) -> int:
    from torch.distributed.tensor import DTensor

    if t is None:
        return 0
    t = t.to_local() if isinstance(t, DTensor) else t
    return t.numel() * t.element_size()


def held_bytes(updater) -> dict[str, int]:
    """Bytes of the local tensors this rank holds, by kind (params of the trained model)."""
    params = list(updater.peft.parameters())
    opt = [v for st in updater.opt.state.values() for v in st.values() if torch.is_tensor(v)]
    ref = list(updater.ref.parameters()) if updater.ref is not None else []
    return {
        "params": sum(_nbytes(p) for p in params),
        "grads": sum(_nbytes(p.grad) for p in params),
        "optimizer": sum(_nbytes(v) for v in opt),
        "reference": sum(_nbytes(p) for p in ref),
    }


def _rows(vocab: int, n: int = 8, tokens: int = 48):
    from codeloop.schema import Trajectory, TrajectoryMetadata

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        ids = torch.randint(3, vocab, (tokens,), generator=g).tolist()
        out.append(
            Trajectory(
                trajectory_id=str(i),
                task_id=f"t{i // 4}",
                prompt_key=f"t{i // 4}",
                prompt="",
                reward=float(i % 2),
                metadata=TrajectoryMetadata(temperature=1.0),
                token_ids=ids,
                loss_mask=[0] * (tokens // 2) + [1] * (tokens - tokens // 2),
                sample_logprobs=[-5.0] * tokens,
            )
        )
    return out


def worker(model_dir: str, strategy: str, out: str) -> None:
    """One rank: one GRPO step under strategy, then everyone's held bytes to rank 0's out."""
    import torch.distributed as dist

    from codeloop.config import TrainConfig
    from codeloop.policy.model import Policy
    from codeloop.train import distributed as ddp
    from codeloop.train.checkpoint import peak_memory_mb
    from codeloop.train.trainer import GRPOUpdater, prepare_batch

    ddp.init()
    policy = Policy.load(model_dir)
    cuda = torch.cuda.is_available()
    cfg = TrainConfig(
        strategy=strategy, steps=1, micro_batch_size=4, grad_accum=2, lr=1e-3, bf16=cuda
    )
    items, _ = prepare_batch(_rows(policy.model.config.vocab_size), cfg, policy.max_context)
    updater = GRPOUpdater(policy, cfg)
    longest = max(sum(t.loss_mask[1:]) for t, _ in items)
    window = [items[i : i + 4] for i in range(0, len(items), 4)]
    t0 = time.perf_counter()
    updater.step(window, longest)
    seconds = time.perf_counter() - t0
    peak = round(peak_memory_mb(updater.device), 1)
    row = {**held_bytes(updater), "step_s": round(seconds, 3), "peak_mb": peak}
    per_rank: list = [None] * ddp.world_size()
    dist.all_gather_object(per_rank, row)
    if ddp.is_main():
        Path(out).write_text(json.dumps(per_rank))
    ddp.shutdown()


def _save_model(path: Path, layers: int, width: int, heads: int) -> int:
    from codeloop.config import PolicyInitConfig
    from codeloop.data.generator import generate_tasks
    from codeloop.policy.model import build_embedded

    cfg = PolicyInitConfig(
        vocab_size=300, n_layer=layers, n_head=heads, n_embd=width, n_positions=256
    )
    policy = build_embedded(SimpleNamespace(policy_init=cfg), generate_tasks(4, seed=0))
    policy.save(path)
    return sum(p.numel() for p in policy.model.parameters())


def _launch(model_dir: Path, strategy: str, out: Path, nproc: int) -> list[dict]:
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", str(nproc), __file__]
    cmd += ["--worker", "--strategy", strategy, "--model", str(model_dir), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{strategy} ranks failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def _table(result: dict) -> str:
    lines = [f"{'bytes per rank':<16}{'ddp':>12}{'fsdp':>12}{'fsdp/ddp':>10}"]
    for r in range(len(result["ddp"])):
        for kind in (*KINDS, "total", "peak_mb", "step_s"):
            d, f = result["ddp"][r][kind], result["fsdp"][r][kind]
            ratio = f"{f / d:.3f}" if d else "-"
            lines.append(f"rank {r} {kind:<9}{d:>12,}{f:>12,}{ratio:>10}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--nproc", type=int, default=2, help="ranks (GPUs under CUDA)")
    ap.add_argument("--out", default=str(ROOT / "metrics" / "train_memory.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--strategy", default="ddp", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.model, args.strategy, args.out)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        n_params = _save_model(model, args.layers, args.width, args.heads)
        result = {
            s: _launch(model, s, Path(tmp) / f"{s}.json", args.nproc) for s in ("ddp", "fsdp")
        }
    for ranks in result.values():
        for row in ranks:
            row["total"] = sum(row[k] for k in KINDS)
    print(_table(result))
    ratio = sum(r["total"] for r in result["fsdp"]) / sum(r["total"] for r in result["ddp"])
    summary = {
        "model": {"layers": args.layers, "width": args.width, "parameters": n_params},
        "world_size": args.nproc,
        "backend": "nccl (CUDA, bf16)" if torch.cuda.is_available() else "gloo (CPU)",
        "per_rank": result,
        "fsdp_over_ddp_total": round(ratio, 4),
    }
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(f"fsdp / ddp, all ranks' training bytes: {ratio:.3f}; figures in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
