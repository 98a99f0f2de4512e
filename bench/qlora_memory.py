"""Memory and time of one GRPO step, LoRA on a full-precision base versus QLoRA, on CPU.

Run: ``python bench/qlora_memory.py [--shape 0.5b|tiny] [--rows 2] [--tokens 128]``

A random-initialised Qwen2 (shaped like Qwen2.5-Coder-0.5B by default) is saved once;
then each mode runs in its own process (so each peak RSS is its own): ``Policy.load``
with ``train.lora.quantize`` none (the baseline: fp32 base) / 4bit (NF4, double quant,
bf16 compute) / 8bit, LoRA r=16 on the attention projections, and one `GRPOUpdater`
step (KL on, so the adapter-disabled reference forward is included) over ``rows``
sequences of ``tokens`` tokens. Prints, per mode: the model's tensor bytes after loading
(weights + quantization state, exact), trainable parameters, the process's peak RSS after
the load and after the step, and the step's seconds, each beside the fp32-base LoRA
baseline as a ratio (timings are noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

MODES = ("none", "4bit", "8bit")


def _trajectories(vocab: int, rows: int, tokens: int):
    from codeloop.schema import Trajectory, TrajectoryMetadata

    g = torch.Generator().manual_seed(0)
    half = tokens // 2
    out = []
    for i in range(rows):
        ids = torch.randint(3, vocab, (tokens,), generator=g).tolist()
        out.append(Trajectory(
            trajectory_id=str(i), task_id="t", prompt_key="t", prompt="", reward=float(i % 2),
            metadata=TrajectoryMetadata(temperature=1.0), token_ids=ids,
            loss_mask=[0] * half + [1] * (tokens - half), sample_logprobs=[-5.0] * tokens,
        ))
    return out


def _tensor_bytes(model) -> int:
    """Parameters + buffers + bitsandbytes' quantization constants (absmax, scales)."""
    tensors = list(model.parameters()) + list(model.buffers())
    for m in model.modules():
        w = getattr(m, "weight", None)
        qs = getattr(w, "quant_state", None)  # 4-bit: absmax (+ nested state), code book
        if qs is not None:
            tensors += [qs.absmax, qs.code]
            if qs.nested:
                tensors += [qs.offset, qs.state2.absmax, qs.state2.code]
        if getattr(w, "SCB", None) is not None:  # 8-bit: one fp32 scale per row
            tensors.append(w.SCB)
    return sum(t.numel() * t.element_size() for t in tensors)


def measure(model_dir: str, quantize: str, rows: int, tokens: int) -> dict:
    """One mode, in this process: load, one GRPO step; bytes, params, peak RSS, seconds."""
    from codeloop.config import LoraConfig, TrainConfig
    from codeloop.policy.model import Policy
    from codeloop.train.trainer import GRPOUpdater, prepare_batch

    policy = Policy.load(model_dir, quantize=quantize)
    model_bytes = _tensor_bytes(policy.model)
    load_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB
    lora = LoraConfig(r=16, alpha=32.0, quantize=quantize)
    cfg = TrainConfig(
        steps=1, lr=1e-5, beta=0.02, loss_type="dapo", micro_batch_size=rows, grad_accum=1,
        skip_tied_groups=False, keep_optimizer_state=False, lora=lora,
    )
    updater = GRPOUpdater(policy, cfg)
    trainable = sum(p.numel() for p in updater.params)
    items, _ = prepare_batch(_trajectories(len(policy.tokenizer), rows, tokens), cfg, 10**6)
    t0 = time.perf_counter()
    row = updater.step([items], tokens)
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB
    return {"quantize": quantize, "model_mb": model_bytes / 2**20, "trainable": trainable,
            "load_peak_rss_mb": load_peak_kb / 1024, "peak_rss_mb": peak_kb / 1024,
            "step_s": seconds, "loss": row["loss"]}


def _save_model(out: Path, shape: str) -> None:
    from codeloop.policy.model import Policy
    from codeloop.policy.tiny import QWEN25_05B, build_model, build_tokenizer

    tok = build_tokenizer("qwen2")
    model = build_model("qwen2", tok, seed=0, **(QWEN25_05B if shape == "0.5b" else {}))
    Policy(model, tok, name=f"random-qwen2-{shape}").save(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("0.5b", "tiny"), default="0.5b")
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)  # model_dir quantize
    a = ap.parse_args()
    if a._child:
        print(json.dumps(measure(a._child[0], a._child[1], a.rows, a.tokens)))
        return 0
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        _save_model(Path(tmp) / "model", a.shape)
        for mode in a.modes.split(","):
            cmd = [sys.executable, __file__, "--rows", str(a.rows), "--tokens", str(a.tokens),
                   "--_child", str(Path(tmp) / "model"), mode]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
    base = next((r for r in results if r["quantize"] == "none"), results[0])
    print(f"shape {a.shape}, {a.rows} rows x {a.tokens} tokens, CPU, LoRA r=16 (q,k,v,o)")
    print(f"{'quantize':>8} {'model MB':>9} {'x base':>7} {'trainable':>10} {'load RSS':>9} "
          f"{'peak RSS MB':>12} {'x base':>7} {'step s':>7} {'x base':>7}")
    for r in results:
        print(f"{r['quantize']:>8} {r['model_mb']:9.0f} {r['model_mb'] / base['model_mb']:7.2f} "
              f"{r['trainable']:10d} {r['load_peak_rss_mb']:9.0f} {r['peak_rss_mb']:12.0f} "
              f"{r['peak_rss_mb'] / base['peak_rss_mb']:7.2f} {r['step_s']:7.2f} "
              f"{r['step_s'] / base['step_s']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
