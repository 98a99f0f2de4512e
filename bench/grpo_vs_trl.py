"""codeloop's GRPO against TRL's GRPOTrainer: same numbers, and step time side by side.

Run: ``.venv/bin/python bench/grpo_vs_trl.py [--steps 6] [--skip-speed]``

1. Loss and gradients. One tiny, randomly initialised GPT-2 (dropout 0, built from a
   config with codeloop's offline BPE tokenizer; no hub) is saved to a temp dir and a real
   ``trl.GRPOTrainer`` is built on it for each loss_type. The same crafted batch goes
   through TRL's own ``_compute_loss(model, inputs)`` (prompt/completion ids, a
   ``tool_mask`` masking an environment span, advantages, off-policy old log-probs so
   clipping happens, reference log-probs for k3 KL, temperature 0.7) and through
   ``codeloop.train.grpo.token_logps`` + ``grpo_loss`` on the same model. Printed: |Δloss| and
   max |Δgrad| over all parameters (targets: ≤ 1e-5 and ~0). TRL's config defaults to
   bf16 autocast (on CPU too); it is set to fp32 so both sides compute in one precision.
2. Step time of a full GRPO step (generate + score + update) on the same model, batch,
   group size, completion length, reward function and gradient checkpointing (TRL 1.x
   defaults it on, codeloop off; ``--gradient-checkpointing both`` times both sides with
   it off, then both with it on, and prints both ratios): TRL's ``trainer.train()``
   (per-step wall time from a callback, first step dropped as warm-up) versus codeloop's
   ``Policy.generate`` → reward → ``GRPOUpdater.step``. Printed: both and the ratio
   TRL / codeloop (target ≥ 1.0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from codeloop.config import TrainConfig  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.policy.model import Policy, train_tokenizer  # noqa: E402
from codeloop.policy.prompts import task_prompt  # noqa: E402
from codeloop.schema import Trajectory, TrajectoryMetadata  # noqa: E402
from codeloop.train.grpo import grpo_loss, token_logps  # noqa: E402
from codeloop.train.trainer import GRPOUpdater, prepare_batch  # noqa: E402

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def build_tiny(out: Path, n_layer: int = 2, n_embd: int = 64) -> Path:
    """Random tiny GPT-2 + codeloop's BPE tokenizer, dropout off (deterministic forward)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = train_tokenizer(generate_tasks(60, seed=3), vocab_size=512)
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=len(tok),
        n_positions=256,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    Policy(GPT2LMHeadModel(cfg), tok, name="tiny").save(out)
    return out


def _reward(completions, **_) -> list[float]:
    """The same cheap, deterministic reward for both sides (share of 'e' characters)."""
    return [c.count("e") / max(1, len(c)) for c in completions]


def make_trl_trainer(model_dir: Path, out: Path, prompts: list[str], peft_config=None, **cfg):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    defaults = {
        "output_dir": str(out),
        "report_to": "none",
        "use_cpu": True,
        "save_strategy": "no",
        "logging_steps": 1,
        "disable_tqdm": True,
        "bf16": False,  # TRL defaults to bf16 autocast; both sides run fp32 here
    }
    args = GRPOConfig(**{**defaults, **cfg})
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tok,
        peft_config=peft_config,
    )


# ------------------------------------------------------------------ 1. equality


def crafted_batch(model, vocab: int, b=6, p=5, c=12, temperature=0.7, seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(5, vocab, (b, p), generator=g)
    completion_ids = torch.randint(5, vocab, (b, c), generator=g)
    completion_mask = torch.ones(b, c, dtype=torch.long)
    for i in range(b):  # ragged completions (right padding)
        completion_mask[i, c - i :] = 0
    tool_mask = torch.ones(b, c, dtype=torch.long)
    tool_mask[:, 3:6] = 0  # an environment observation inside the episode
    with torch.no_grad():
        ids = torch.cat([prompt_ids, completion_ids], 1)
        att = torch.cat([torch.ones_like(prompt_ids), completion_mask], 1)
        logits = model(input_ids=ids, attention_mask=att).logits[:, p - 1 : -1]
        logps, _ = token_logps(logits, completion_ids, temperature)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.randn(b, generator=g),
        "old_per_token_logps": logps + 0.4 * torch.randn(b, c, generator=g),
        "ref_per_token_logps": logps + 0.3 * torch.randn(b, c, generator=g),
        "num_items_in_batch": (completion_mask * tool_mask).sum(),
    }


def ours_loss(model, inputs, *, loss_type, beta, eps_low, eps_high, temperature, kl_corr):
    p = inputs["prompt_ids"].size(1)
    c = inputs["completion_ids"].size(1)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    logits = model(input_ids=ids, attention_mask=att).logits[:, p - 1 : -1]
    logps, _ = token_logps(logits, inputs["completion_ids"], temperature)
    return grpo_loss(
        logps,
        inputs["old_per_token_logps"],
        inputs["ref_per_token_logps"],
        inputs["advantages"],
        inputs["completion_mask"] * inputs["tool_mask"],
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        beta=beta,
        max_completion_length=c,
        num_items=inputs["num_items_in_batch"],
        kl_ratio_correction=kl_corr,
    )


def _grads(model) -> list[torch.Tensor]:
    return [
        (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for p in model.parameters()
    ]


def compare_loss(
    model_dir: Path, work: Path, loss_type: str, kl_corr: bool = True, seed: int = 0
) -> dict:
    """|Δloss| and max |Δgrad| between TRL's _compute_loss and ours on one crafted batch."""
    beta, eps_low, eps_high, temp, c = 0.04, 0.2, 0.28, 0.7, 12
    trainer = make_trl_trainer(
        model_dir,
        work / f"trl-{loss_type}-{kl_corr}",
        ["x"] * 6,
        loss_type=loss_type,
        beta=beta,
        epsilon=eps_low,
        epsilon_high=eps_high,
        temperature=temp,
        max_completion_length=c,
        per_device_train_batch_size=6,
        num_generations=6,
        use_bias_correction_kl=kl_corr,
    )
    model = trainer.model
    model.train()  # TRL's "train" mode; dropout is 0 so the forward is deterministic
    if not hasattr(trainer, "current_gradient_accumulation_steps"):
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() normally
    inputs = crafted_batch(model, model.config.vocab_size, c=c, temperature=temp, seed=seed)
    model.zero_grad()
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    g_trl = _grads(model)
    model.zero_grad()
    loss, stats = ours_loss(
        model, inputs, loss_type=loss_type, beta=beta, eps_low=eps_low, eps_high=eps_high,
        temperature=temp, kl_corr=kl_corr,
    )
    loss.backward()
    g_ours = _grads(model)
    dgrad = max(float((a - b).abs().max()) for a, b in zip(g_trl, g_ours, strict=True))
    gmax = max(float(a.abs().max()) for a in g_trl)
    return {
        "loss_type": loss_type + ("" if kl_corr else "/nocorr"),
        "trl_loss": float(trl_loss.detach()),
        "ours_loss": float(loss.detach()),
        "dloss": abs(float(trl_loss.detach()) - float(loss.detach())),
        "dgrad": dgrad,
        "grad_max": gmax,
        "clip_region": stats["clip_ratio_region"],
        "trl_clip_region": trainer._metrics["train"]["clip_ratio/region_mean"][-1],
        "kl": stats["kl"],
        "trl_kl": trainer._metrics["train"]["kl"][-1],
    }


# ------------------------------------------------------------------ 2. step time


def trl_step_times(
    model_dir, work, prompts, g, c, steps, lr, beta, gc=False, peft_config=None, **cfg
) -> list[float]:
    from transformers import TrainerCallback

    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            marks.append(time.perf_counter())

    kw = dict(
        loss_type="dapo", beta=beta, learning_rate=lr, temperature=1.0, top_p=1.0,
        max_completion_length=c, per_device_train_batch_size=len(prompts) * g,
        num_generations=g, max_steps=steps, seed=0, gradient_checkpointing=gc,
    )
    kw.update(cfg)  # e.g. bf16, use_cpu, micro-batch x accumulation on a GPU
    trainer = make_trl_trainer(
        model_dir, work / f"trl-speed-{gc}", prompts * (steps + 1), peft_config=peft_config, **kw
    )
    trainer.add_callback(Clock())
    trainer.train()
    return [marks[i + 1] - marks[i] for i in range(0, len(marks) - 1, 2)]


def codeloop_step_times(model_dir, prompts, g, c, steps, lr, beta, gc=False) -> list[float]:
    policy = Policy.load(model_dir)
    cfg = TrainConfig(
        steps=1, lr=lr, beta=beta, loss_type="dapo", micro_batch_size=len(prompts) * g,
        grad_accum=1, skip_tied_groups=False, gradient_checkpointing=gc,
    )
    updater = GRPOUpdater(policy, cfg)
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        gens = policy.generate(
            prompts, n=g, temperature=1.0, top_p=1.0, max_new_tokens=c, seed=step,
            batch_size=len(prompts) * g,
        )
        trajs = []
        for i, (prompt, group) in enumerate(zip(prompts, gens, strict=True)):
            p_ids = policy.encode(prompt)
            for j, gen in enumerate(group):
                trajs.append(
                    Trajectory(
                        trajectory_id=f"{step}-{i}-{j}", task_id=str(i), prompt_key=str(i),
                        prompt=prompt, reward=_reward([gen.text])[0],
                        metadata=TrajectoryMetadata(temperature=1.0),
                        token_ids=p_ids + gen.token_ids,
                        loss_mask=[0] * len(p_ids) + [1] * len(gen.token_ids),
                        sample_logprobs=[0.0] * len(p_ids) + gen.logprobs,
                    )
                )
        items, _ = prepare_batch(trajs, cfg, policy.max_context)
        longest = max(sum(t.loss_mask) for t, _ in items)
        updater.step([items], longest)
        times.append(time.perf_counter() - t0)
    return times


def _gc_settings(choice: str) -> list[bool]:
    return {"off": [False], "on": [True], "both": [False, True]}[choice]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="timed GRPO steps per side")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="generations per prompt")
    ap.add_argument("--completion", type=int, default=48, help="max new tokens")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument(
        "--gradient-checkpointing", choices=("off", "on", "both"), default="both",
        help="set on both sides alike (TRL 1.x defaults it on, codeloop off)",
    )
    args = ap.parse_args()
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    import trl

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = build_tiny(work / "tiny")
        print(f"TRL {trl.__version__}, torch {torch.__version__}, tiny GPT-2 in {model_dir}")
        print("\n1. same batch through TRL's _compute_loss and codeloop.grpo_loss")
        print(f"{'loss_type':<11} {'TRL loss':>12} {'ours':>12} {'|Δloss|':>9} {'max|Δgrad|':>10}"
              f" {'max|grad|':>9} {'clip TRL/ours':>14} {'kl TRL/ours':>16}")
        worst = 0.0
        for lt, corr in [(lt, True) for lt in LOSS_TYPES] + [("grpo", False)]:
            r = compare_loss(model_dir, work, lt, corr)
            worst = max(worst, r["dloss"])
            print(
                f"{r['loss_type']:<11} {r['trl_loss']:>12.7f} {r['ours_loss']:>12.7f} {r['dloss']:>9.1e}"
                f" {r['dgrad']:>10.1e} {r['grad_max']:>9.2e}"
                f" {r['trl_clip_region']:>6.3f}/{r['clip_region']:<6.3f}"
                f" {r['trl_kl']:>7.4f}/{r['kl']:<7.4f}"
            )
        print(f"max |Δloss| = {worst:.1e} (target ≤ 1e-5): {'OK' if worst <= 1e-5 else 'FAIL'}")
        if args.skip_speed:
            return 0 if worst <= 1e-5 else 1

        tasks = generate_tasks(args.prompts, seed=7)
        prompts = [task_prompt(t) for t in tasks]
        g, c, n, lr, beta = args.group, args.completion, args.steps, 1e-4, 0.02
        print(f"\n2. full GRPO step (generate + score + update): {len(prompts)} prompts x {g}"
              f" generations, {c} new tokens, dapo, beta={beta}, {n} steps (first dropped)")
        from trl import GRPOConfig

        default_gc = GRPOConfig(output_dir=str(work / "d"), use_cpu=True).gradient_checkpointing
        print(f"(TRL's own default gradient_checkpointing={default_gc}; codeloop's is off;"
              " each row below sets both sides to the same value)")
        for gc in _gc_settings(args.gradient_checkpointing):
            trl_t = trl_step_times(model_dir, work, prompts, g, c, n + 1, lr, beta, gc)[1:]
            ours_t = codeloop_step_times(model_dir, prompts, g, c, n + 1, lr, beta, gc)[1:]
            trl_s, ours_s = statistics.median(trl_t), statistics.median(ours_t)
            print(f"gradient checkpointing {'on ' if gc else 'off'}: TRL GRPOTrainer median "
                  f"{trl_s * 1000:8.1f} ms, codeloop {ours_s * 1000:8.1f} ms, "
                  f"ratio TRL/codeloop = {trl_s / ours_s:.2f} (target ≥ 1.0)")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
