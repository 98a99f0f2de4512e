"""The GPU check behind ``scripts/gpu_check.sh``: rollout tokens/s and a GRPO step on a
random-initialised model shaped like Qwen2.5-Coder-0.5B in bf16, beside TRL.

Run on one GPU: ``python bench/gpu_check.py [--out metrics/gpu_check.json]``; on CPU with tiny
sizes to check the code path: ``--cpu-smoke``. Figures (also written to --out as JSON):

1. rollout: ``Policy.generate`` on prompts x samples x new tokens (64 x 8 x 256 on GPU),
   tokens/s, beside plain ``model.generate(do_sample=True)`` on the same batch;
2. one GRPO step of codeloop (`GRPOUpdater.step` over every rollout row, one optimizer
   step), full fine-tuning, LoRA and QLoRA (the same adapters on an NF4 4-bit base,
   ``train.lora.quantize: 4bit``), with wall time and peak memory;
3. the same step through TRL's GRPOTrainer (generate + score + update, equal batch,
   group, completion length, loss, precision and gradient checkpointing), full and
   LoRA, and the ratio TRL / codeloop (codeloop's side timed as rollout + step). QLoRA
   has no TRL counterpart here (TRL would need its own quantized model_init_kwargs);
4. the inference engine (``policy.engine: vllm``, ``bash scripts/setup.sh --vllm``) on a
   random model shaped like Qwen2.5-Coder-1.5B in bf16: rollout tokens/s of the hf sampler
   (`Policy.generate`) and of the engine (`EnginePolicy.generate`) on the same 64 prompts
   x 256 new tokens, the engine's start seconds, and the seconds of one weight sync
   (`EnginePolicy.sync` to another checkpoint of the same shape, reloaded in place from
   disk, as after a GRPO update). Without the engine installed this part is skipped and
   the JSON says why.

Every figure is written to --out (default metrics/gpu_check.json) as soon as its part
ends, so a run stopped by scripts/gpu_check.sh's time limit keeps what it measured;
``timings`` has each part's wall seconds. ``--cpu-smoke`` runs every part at tiny sizes
(the engine's tiny model has head size 32, the least vLLM's CPU kernels take).
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

from bench.generation import _plain, _timed  # noqa: E402
from bench.grpo_vs_trl import _reward, trl_step_times  # noqa: E402
from codeloop.config import LoraConfig, TrainConfig  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.policy.engine import EngineSettings  # noqa: E402
from codeloop.policy.engine_policy import open_engine_policy  # noqa: E402
from codeloop.policy.model import VERSION_FILE, Policy  # noqa: E402
from codeloop.policy.tiny import QWEN25_05B, QWEN25_15B, build_model, build_tokenizer  # noqa: E402
from codeloop.policy.vllm_engine import engine_missing  # noqa: E402
from codeloop.schema import Trajectory, TrajectoryMetadata  # noqa: E402
from codeloop.train.trainer import GRPOUpdater, peak_memory_mb, prepare_batch  # noqa: E402

GPU = {"prompts": 64, "samples": 8, "new_tokens": 256, "micro": 16, "trl_steps": 2}
SMOKE = {"prompts": 4, "samples": 2, "new_tokens": 8, "micro": 4, "trl_steps": 2}
ENGINE_GPU = {"batch": 64, "new_tokens": 256, "shape": QWEN25_15B, "name": "Qwen2.5-Coder-1.5B"}
ENGINE_SMOKE = {"batch": 4, "new_tokens": 8, "name": "tiny",
                "shape": {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}}
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


def build_engine_models(out: Path, spec: dict, device, dtype) -> tuple[Path, Path]:
    """Checkpoint a of the engine's shape and b, the same weights nudged (every tensor
    x 1.01, a sync must move all of them): each with its model_version written, so
    loading never hashes gigabytes."""
    tok = build_tokenizer("qwen2")
    with torch.device(device):  # a 1.5B random init takes seconds on the GPU, minutes on a CPU
        model = build_model("qwen2", tok, seed=0, **spec["shape"]).to(dtype)
    paths = (out / "engine-a", out / "engine-b")
    for k, path in enumerate(paths):
        if k:
            with torch.no_grad():
                for param in model.parameters():
                    param.mul_(1.01)
        model.save_pretrained(path, safe_serialization=True)
        tok.save_pretrained(path)
        (path / VERSION_FILE).write_text(f"gpu-check-{path.name}\n")
    del model
    return paths


def engine_rollout(out: Path, prompts, spec: dict, device, dtype) -> dict:
    """hf vs the vLLM engine on one batch (module doc, 4), then one weight sync."""
    a, b = build_engine_models(out, spec, device, dtype)
    hf = Policy.load(a)
    hf.model.to(device, dtype)
    ids = [hf.format.prompt_ids(t) for t in prompts[: spec["batch"]]]
    _timed(hf, ids[:1], 2)  # warm-up
    _sync(device)
    hf_tokens, hf_s = _timed(hf, ids, spec["new_tokens"])
    del hf
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the engine takes its share of what is free
    engine = open_engine_policy(a, EngineSettings(device=str(device), seed=0))
    try:
        _timed(engine, ids[:1], 2)  # warm-up
        vllm_tokens, vllm_s = _timed(engine, ids, spec["new_tokens"])
        sync_s = engine.sync(b)
        after, _ = _timed(engine, ids[:1], 2)  # the synced weights serve
    finally:
        engine.close()
    return {
        "shape": spec["name"], "batch": len(ids), "new_tokens": spec["new_tokens"],
        "hf_tokens_per_s": hf_tokens / hf_s, "vllm_tokens_per_s": vllm_tokens / vllm_s,
        "ratio_vllm_over_hf": (vllm_tokens / vllm_s) / (hf_tokens / hf_s),
        "engine_start_s": engine.stats.start_s, "weight_sync_s": sync_s,
        "tokens_after_sync": after,
    }


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
    ap.add_argument("--out", default="metrics/gpu_check.json")
    ap.add_argument("--skip-trl", action="store_true")
    ap.add_argument("--skip-engine", action="store_true")
    a = ap.parse_args()
    smoke = a.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; use --cpu-smoke to run the code path on CPU")
        return 2
    device = torch.device("cpu" if smoke else "cuda")
    size = SMOKE if smoke else GPU
    bf16 = not smoke  # TRL's default precision on GPU; fp32 on the CPU smoke run
    dtype = torch.bfloat16 if bf16 else torch.float32
    results: dict = {"device": torch.cuda.get_device_name() if not smoke else "cpu",
                     "shape": "tiny" if smoke else "Qwen2.5-Coder-0.5B", "size": size,
                     "timings": {}}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def done(part: str, t0: float) -> None:  # every part's figures land at once
        results["timings"][part] = round(time.perf_counter() - t0, 1)
        out.write_text(json.dumps(results, indent=2) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        model_dir = build(Path(tmp) / "model", smoke)
        prompts = generate_tasks(max(size["prompts"], ENGINE_GPU["batch"]), seed=7)
        policy = Policy.load(model_dir)
        policy.model.to(device, dtype)
        trajs, results["rollout"] = rollout(policy, prompts[: size["prompts"]], size, device)
        del policy
        done("rollout", t0)
        for lora in (False, True):
            key = "lora" if lora else "full"
            t0 = time.perf_counter()
            results[f"codeloop_step_{key}"] = grpo_step(model_dir, trajs, size, device, lora, bf16)
            done(f"codeloop_step_{key}", t0)
            if a.skip_trl:
                continue
            t0 = time.perf_counter()
            trl = trl_step(model_dir, Path(tmp), prompts[: size["prompts"]], size, device, lora,
                           bf16)
            ours = (
                results["rollout"]["codeloop_rollout_s"]
                + results[f"codeloop_step_{key}"]["seconds"]
            )
            results[f"trl_step_{key}"] = trl
            results[f"ratio_trl_over_codeloop_{key}"] = trl["seconds"] / ours
            done(f"trl_step_{key}", t0)
        t0 = time.perf_counter()
        if importlib.util.find_spec("bitsandbytes") is None:  # not worth a crash at the end
            results["codeloop_step_qlora"] = {"skipped": "pip install 'codeloop[qlora]'"}
        else:
            results["codeloop_step_qlora"] = grpo_step(
                model_dir, trajs, size, device, True, bf16, quantize="4bit"
            )
        done("codeloop_step_qlora", t0)
        t0 = time.perf_counter()
        missing = "--skip-engine" if a.skip_engine else engine_missing()
        if missing:
            results["engine"] = {"skipped": f"{missing}: bash scripts/setup.sh --vllm"}
            print(f"gpu_check: engine part skipped ({results['engine']['skipped']})")
        else:
            spec = ENGINE_SMOKE if smoke else ENGINE_GPU
            results["engine"] = engine_rollout(Path(tmp), prompts, spec, device, dtype)
        done("engine", t0)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
