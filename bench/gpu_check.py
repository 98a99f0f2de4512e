"""The GPU check behind ``scripts/gpu_check.sh``: rollout tokens/s and a GRPO step on a
random-initialised model shaped like Qwen2.5-Coder-0.5B in bf16, beside TRL.

Run on one GPU: ``python bench/gpu_check.py [--out gpu_check.json]``; on CPU with tiny
sizes to check the code path: ``--cpu-smoke``. Figures (also written to --out as JSON):

1. rollout: ``Policy.generate`` on prompts x samples x new tokens (64 x 8 x 256 on GPU),
   tokens/s, beside plain ``model.generate(do_sample=True)`` on the same batch;
2. one GRPO step of codeloop (`GRPOUpdater.step` over every rollout row, one optimizer
   step), full fine-tuning, LoRA and QLoRA (the same adapters on an NF4 4-bit base,
   ``train.lora.quantize: 4bit``), with wall time and peak memory;
3. the same step through TRL's GRPOTrainer (generate + score + update, equal batch,
   group, completion length, loss, precision and gradient checkpointing), full and
   LoRA, and the ratio TRL / codeloop (codeloop's side timed as rollout + step). QLoRA
   has no TRL counterpart here (TRL would need its own quantized model_init_kwargs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.generation import _plain  # noqa: E402
from bench.grpo_vs_trl import _reward, trl_step_times  # noqa: E402
from codeloop.config import LoraConfig, TrainConfig  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.policy.model import Policy  # noqa: E402
from codeloop.policy.tiny import QWEN25_05B, build_model, build_tokenizer  # noqa: E402
from codeloop.schema import Trajectory, TrajectoryMetadata  # noqa: E402
from codeloop.train.trainer import GRPOUpdater, peak_memory_mb, prepare_batch  # noqa: E402

GPU = {"prompts": 64, "samples": 8, "new_tokens": 256, "micro": 16, "trl_steps": 2}
SMOKE = {"prompts": 4, "samples": 2, "new_tokens": 8, "micro": 4, "trl_steps": 2}
LORA = LoraConfig(r=16, alpha=32.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])


def build(out: Path, smoke: bool) -> Path:
    """Random model + chat tokenizer saved to out (fp32 weights; bf16 at use)."""
    tok = build_tokenizer("qwen2")
    model = build_model("qwen2", tok, seed=0, **({} if smoke else QWEN25_05B))
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def rollout(policy: Policy, prompts, size: dict, device) -> tuple[list[Trajectory], dict]:
    """Sample the batch with codeloop and with plain generate; trajectories for the step."""
    ids = [policy.format.prompt_ids(t) for t in prompts]
    flat = [p for p in ids for _ in range(size["samples"])]
    policy.generate(ids[:1], max_new_tokens=2)  # warm-up (kernels, static cache compile)
    _sync(device)
    t0 = time.perf_counter()
    gens = policy.generate(ids, n=size["samples"], max_new_tokens=size["new_tokens"],
                           batch_size=len(flat), seed=0)
    _sync(device)
    ours_s = time.perf_counter() - t0
    plain_tokens, plain_s = _plain(policy, flat, size["new_tokens"])
    trajs, tokens = [], 0
    for i, (p_ids, group) in enumerate(zip(ids, gens, strict=True)):
        for j, g in enumerate(group):
            tokens += len(g.token_ids)
            trajs.append(Trajectory(
                trajectory_id=f"{i}-{j}", task_id=str(i), prompt_key=str(i), prompt="",
                reward=_reward([g.text])[0], metadata=TrajectoryMetadata(temperature=1.0),
                token_ids=p_ids + g.token_ids, loss_mask=[0] * len(p_ids) + [1] * len(g.token_ids),
                sample_logprobs=[0.0] * len(p_ids) + g.logprobs,
            ))
    figures = {
        "sequences": len(flat),
        "codeloop_tokens_per_s": tokens / ours_s,
        "plain_generate_tokens_per_s": plain_tokens / plain_s,
        "codeloop_rollout_s": ours_s,
    }
    figures["ratio_codeloop_over_plain"] = (
        figures["codeloop_tokens_per_s"] / figures["plain_generate_tokens_per_s"]
    )
    return trajs, figures


def grpo_step(model_dir: Path, trajs, size: dict, device, lora: bool, bf16: bool,
              quantize: str = "none") -> dict:
    """One codeloop optimizer step over every row: seconds and peak memory."""
    if device.type == "cuda":  # a quantized load lands on the GPU at once
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    policy = Policy.load(model_dir, quantize=quantize)
    lora_cfg = LORA.model_copy(update={"quantize": quantize}) if lora else LoraConfig()
    cfg = TrainConfig(
        steps=1, lr=1e-5, beta=0.02, loss_type="dapo", micro_batch_size=size["micro"],
        grad_accum=max(1, len(trajs) // size["micro"]), skip_tied_groups=False, bf16=bf16,
        lora=lora_cfg, keep_optimizer_state=False,
    )
    policy.model.to(device)
    updater = GRPOUpdater(policy, cfg)
    items, _ = prepare_batch(trajs, cfg, policy.max_context)
    longest = max(sum(t.loss_mask) for t, _ in items)
    window = [
        items[i : i + cfg.micro_batch_size] for i in range(0, len(items), cfg.micro_batch_size)
    ]
    _sync(device)
    t0 = time.perf_counter()
    row = updater.step(window, longest)
    _sync(device)
    return {"seconds": time.perf_counter() - t0, "peak_mem_mb": peak_memory_mb(device),
            "loss": row["loss"], "rows": len(items)}


def trl_step(model_dir: Path, work: Path, prompts, size: dict, device, lora: bool, bf16: bool):
    """Median wall time of TRL GRPOTrainer steps with the same batch and settings."""
    from peft import LoraConfig as PeftLora

    from codeloop.policy.formats import ChatFormat

    fmt = ChatFormat(build_tokenizer("qwen2"))
    texts = [fmt.prompt(t) for t in prompts]
    peft_cfg = None
    if lora:
        peft_cfg = PeftLora(r=LORA.r, lora_alpha=LORA.alpha, target_modules=LORA.target_modules,
                            task_type="CAUSAL_LM")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = trl_step_times(
        model_dir, work / f"trl-{lora}", texts, size["samples"], size["new_tokens"],
        size["trl_steps"], 1e-5, 0.02, False, peft_cfg,
        use_cpu=device.type != "cuda", bf16=bf16, per_device_train_batch_size=size["micro"],
        gradient_accumulation_steps=max(1, len(texts) * size["samples"] // size["micro"]),
    )
    return {"seconds": statistics.median(times[1:] or times), "peak_mem_mb": peak_memory_mb(device)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU (code path)")
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--skip-trl", action="store_true")
    a = ap.parse_args()
    smoke = a.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; use --cpu-smoke to run the code path on CPU")
        return 2
    device = torch.device("cpu" if smoke else "cuda")
    size = SMOKE if smoke else GPU
    bf16 = not smoke  # TRL's default precision on GPU; fp32 on the CPU smoke run
    results: dict = {"device": torch.cuda.get_device_name() if not smoke else "cpu",
                     "shape": "tiny" if smoke else "Qwen2.5-Coder-0.5B", "size": size}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build(Path(tmp) / "model", smoke)
        prompts = generate_tasks(size["prompts"], seed=7)
        policy = Policy.load(model_dir)
        policy.model.to(device, torch.bfloat16 if bf16 else torch.float32)
        trajs, results["rollout"] = rollout(policy, prompts, size, device)
        del policy
        for lora in (False, True):
            key = "lora" if lora else "full"
            results[f"codeloop_step_{key}"] = grpo_step(model_dir, trajs, size, device, lora, bf16)
            if a.skip_trl:
                continue
            trl = trl_step(model_dir, Path(tmp), prompts, size, device, lora, bf16)
            ours = (
                results["rollout"]["codeloop_rollout_s"]
                + results[f"codeloop_step_{key}"]["seconds"]
            )
            results[f"trl_step_{key}"] = trl
            results[f"ratio_trl_over_codeloop_{key}"] = trl["seconds"] / ours
        if importlib.util.find_spec("bitsandbytes") is None:  # not worth a crash at the end
            results["codeloop_step_qlora"] = {"skipped": "pip install 'codeloop[qlora]'"}
        else:
            results["codeloop_step_qlora"] = grpo_step(
                model_dir, trajs, size, device, True, bf16, quantize="4bit"
            )
    Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
