"""GRPO trainer over scored trajectories (the `train` stage's library entry point).

One iteration: load the policy, freeze a copy as the reference, build group advantages
per ``prompt_key``, then ``cfg.steps`` AdamW steps of ``grad_accum`` micro-batches each
(at most one epoch of the batch per step: a large ``grad_accum`` gives full-batch steps),
with the clipped surrogate of ``codeloop.train.grpo`` against the sampler's log-probs and k3
KL to the reference. Only model-generated tokens (``loss_mask``) carry loss, so
environment feedback inside a multi-turn episode is context, never a target. AdamW's
moments travel with the checkpoint (``optimizer.pt``, ``train.keep_optimizer_state``),
so the nightly iterations are one continuous optimisation, as in a single TRL run.

Departures from TRL's GRPOTrainer, on purpose:
- old log-probs are the sampler's (``Trajectory.sample_logprobs``), not a recomputation:
  rollout happened in another stage, so the ratio measures the drift since sampling
  (hf rows; an engine's rows are recomputed, see below).
- dropout is off while training (``model.eval()``): the sampler ran without dropout and
  a stochastic forward would make the ratio noisy at step 0.
- with ``skip_tied_groups`` (default) groups whose rewards all tie are dropped before the
  update (DAPO's dynamic sampling) instead of riding along with advantage 0.

With ``train.rft`` (before / instead) the policy is first fine-tuned on the passing
episodes (codeloop.train.rft); ``instead`` skips the GRPO update. With
``train.replay.fraction`` > 0 archived episodes of earlier nights join the update with
truncated importance weights (codeloop.train.archive_replay). Rows an inference engine
sampled (``policy.engine: vllm``) are corrected likewise against the policy as the
iteration starts (codeloop.train.sampler_gap).
"""

from __future__ import annotations

import copy
import math
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from codeloop.config import TrainConfig
from codeloop.policy.lora import (
    enable_lora,
    is_adapter_dir,
    is_peft,
    is_quantized,
    training_quantize,
)
from codeloop.policy.model import Policy
from codeloop.schema import Trajectory
from codeloop.train import distributed as ddp
from codeloop.train import sharding
from codeloop.train.archive_replay import add_replay, scorable
from codeloop.train.checkpoint import OPT_FILE, load_opt_state, peak_memory_mb, prepare_out
from codeloop.train.grpo import group_advantages_by_key, grpo_loss, token_logps
from codeloop.train.rft import run_rft
from codeloop.train.sampler_gap import correct as correct_engine_rows

# ---------------------------------------------------------------- data


def _check(t: Trajectory) -> None:
    n = len(t.token_ids)
    for name in ("loss_mask", "sample_logprobs"):
        if len(getattr(t, name)) != n:
            raise ValueError(
                f"trajectory {t.trajectory_id}: field {name} has {len(getattr(t, name))} "
                f"entries but token_ids has {n}; the rollout wrote a corrupt row"
            )


def select_trajectories(
    trajectories: list[Trajectory], max_len: int
) -> tuple[list[Trajectory], Counter]:
    """Trajectories that can train, and a count of the others by reason."""
    keep, excluded = [], Counter()
    for t in trajectories:
        _check(t)
        if t.infra_error:
            excluded["infra_error"] += 1
        elif t.actions and t.actions[0].observation.status == "prompt_too_long":
            excluded["prompt_too_long"] += 1  # rollout's per-task error row: no tokens
        elif sum(t.loss_mask[1:]) == 0:
            excluded["no_generated_tokens"] += 1
        elif len(t.token_ids) > max_len:
            excluded["longer_than_context"] += 1
        else:
            keep.append(t)
    return keep, excluded


def collate(
    batch: list[Trajectory], pad_id: int, weights: dict[str, list[float]] | None = None
) -> dict[str, torch.Tensor]:
    """Right-padded tensors; targets are shifted by one (token t is scored from t-1).

    ``weights`` (replayed rows' per-position importance weights by trajectory_id) adds
    "weights" (B, L-1), 1.0 for every row it does not name.
    """
    length = max(len(t.token_ids) for t in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)  # (B, L)
    attn = torch.zeros((len(batch), length), dtype=torch.long)  # (B, L)
    mask = torch.zeros((len(batch), length), dtype=torch.float32)  # (B, L)
    old = torch.zeros((len(batch), length), dtype=torch.float32)  # (B, L)
    for i, t in enumerate(batch):
        n = len(t.token_ids)
        ids[i, :n] = torch.tensor(t.token_ids, dtype=torch.long)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(t.loss_mask, dtype=torch.float32)
        old[i, :n] = torch.tensor(t.sample_logprobs, dtype=torch.float32)
    temps = torch.tensor([t.metadata.temperature or 1.0 for t in batch], dtype=torch.float32)
    out = {}
    if weights and any(t.trajectory_id in weights for t in batch):
        w = torch.ones((len(batch), length), dtype=torch.float32)  # (B, L)
        for i, t in enumerate(batch):
            if t.trajectory_id in weights:
                w[i, : len(t.token_ids)] = torch.tensor(weights[t.trajectory_id])
        out["weights"] = w[:, 1:]  # (B, L-1)
    return {
        **out,
        "input_ids": ids,
        "attention_mask": attn,
        "targets": ids[:, 1:],  # (B, L-1)
        "mask": mask[:, 1:],  # (B, L-1)
        "old_logps": old[:, 1:],  # (B, L-1)
        "temperature": temps,  # (B,)
    }


def forward_logps(model, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits
    return token_logps(logits[:, :-1], mb["targets"], mb["temperature"])  # (B, L-1) x2


def _batches(items: list, size: int, rng: random.Random):
    """Endless stream of micro-batches: shuffled epochs over items."""
    while True:
        order = items[:]
        rng.shuffle(order)
        for i in range(0, len(order), size):
            yield order[i : i + size]


# ---------------------------------------------------------------- training


def drop_tied_groups(items: list[tuple[Trajectory, float]]) -> list[tuple[Trajectory, float]]:
    """Items whose group (``prompt_key``) has any non-zero advantage.

    A group whose rewards tie has all advantages exactly 0; a live group always has at
    least one non-zero. A member of a live group that sits on its group's mean (advantage
    0) stays: it still carries its KL term and counts in the loss denominator.
    """
    live = {t.prompt_key for t, a in items if a != 0.0}
    return [(t, a) for t, a in items if t.prompt_key in live]


def prepare_batch(
    trajectories: list[Trajectory], cfg: TrainConfig, max_len: int
) -> tuple[list[tuple[Trajectory, float]], dict[str, Any]]:
    """(trajectory, advantage) pairs for the update, and the batch's reward/group stats."""
    usable, excluded = select_trajectories(trajectories, max_len)
    # Advantages over every usable trajectory: the group baseline needs the whole group.
    if usable:
        rewards = torch.tensor([t.reward for t in usable], dtype=torch.float32)
        adv, gstats = group_advantages_by_key(
            rewards, [t.prompt_key for t in usable], cfg.scale_rewards
        )
    else:
        adv = torch.zeros(0)
        gstats = {"n_groups": 0, "frac_reward_zero_std": 0.0, "reward_mean": 0.0, "reward_std": 0.0}
    items = list(zip(usable, adv.tolist(), strict=True))
    if cfg.skip_tied_groups:
        items = drop_tied_groups(items)
    lengths = [sum(t.loss_mask[1:]) for t in usable]
    stats = {
        "n_trajectories": len(trajectories),
        "n_used": len(usable),
        "n_in_update": len(items),
        "excluded": dict(excluded),
        **gstats,
        "completion_length_mean": sum(lengths) / len(lengths) if lengths else 0.0,
        "completion_length_max": max(lengths, default=0),
    }
    return items, stats


class GRPOUpdater:
    """Holds the policy, its frozen reference and the optimizer; one call = one step.

    Usable in-process (bench/, notebooks); `train_grpo` wraps it for the stage.
    """

    def __init__(self, policy: Policy, cfg: TrainConfig, opt_state: dict | None = None):
        self.policy, self.cfg = policy, cfg
        # Under torchrun this rank's device; alone, wherever the caller put the model (the
        # CPU as Policy.load leaves it, a GPU for a bench, a quantized base's own device).
        self.device = ddp.device() if ddp.world_size() > 1 else policy.model.device
        if cfg.lora.quantize != "none" and not is_quantized(policy.model):
            raise ValueError(
                f"train.lora.quantize is {cfg.lora.quantize} but the policy was loaded in full "
                "precision: load it with Policy.load(path, quantize=...)"
            )
        if cfg.lora.r and not is_peft(policy.model):
            enable_lora(policy, cfg.lora)  # in-process use; train_grpo enables it with a base dir
        self.lora = is_peft(policy.model)
        self.peft = policy.model.to(self.device)
        # The reference is the policy as loaded (KL keeps one iteration's update small),
        # or for LoRA the base with the adapter disabled: no second copy in memory.
        self.ref = None
        if cfg.beta and not self.lora:
            self.ref = copy.deepcopy(self.peft).eval().requires_grad_(False)
        self.peft.eval()  # no dropout: see the module docstring
        if cfg.gradient_checkpointing:
            self.peft.gradient_checkpointing_enable({"use_reentrant": False})
            self.peft.train()  # HF checkpoints only in train mode; keep dropout at 0
        # Under torchrun: DDP, or FSDP sharding self.peft (and the reference) in place.
        self.model = ddp.wrap(self.peft, cfg.strategy)
        self.sharded = sharding.is_sharded(self.peft)
        if self.sharded and self.ref is not None:
            self.ref = ddp.wrap(self.ref, cfg.strategy)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        if opt_state is not None and self.sharded:
            sharding.load_optimizer_state(self.peft, self.opt, opt_state)
        elif opt_state is not None:
            self.opt.load_state_dict(opt_state)
        if opt_state is not None:
            for group in self.opt.param_groups:  # params.yaml wins over the saved values
                group.update(lr=cfg.lr, weight_decay=cfg.weight_decay)
        tok = policy.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        self.weights: dict[str, list[float]] = {}  # replayed rows' (codeloop.train.archive_replay)

    @torch.no_grad()
    def start_logps(self, rows: list[Trajectory]) -> list[list[float]]:
        """The policy's log-prob of every token position of each row, as it stands now."""
        out = []
        for i in range(0, len(rows), self.cfg.micro_batch_size):
            batch = rows[i : i + self.cfg.micro_batch_size]
            mb = ddp.to_device(collate(batch, self.pad_id), self.device)
            with self._autocast():
                lps = forward_logps(self.peft, mb)[0].float().cpu()  # (B, L-1)
            out.extend([0.0, *lps[j, : len(t.token_ids) - 1].tolist()] for j, t in enumerate(batch))
        return out

    def step(self, window: list[list[tuple[Trajectory, float]]], longest: int) -> dict:
        """One optimizer step over grad_accum micro-batches of (trajectory, advantage)."""
        cfg = self.cfg
        # dapo normalises by the loss tokens of the whole accumulation window (TRL's
        # num_items_in_batch), so every micro-batch needs the window's count up front.
        num_items = sum(sum(t.loss_mask[1:]) for mb in window for t, _ in mb)
        rows = []
        self.opt.zero_grad(set_to_none=True)
        for mb_items in window:
            mb_items, weight = ddp.shard(mb_items, cfg.loss_type)  # (all rows, 1.0) alone
            mb = collate([t for t, _ in mb_items], self.pad_id, self.weights)
            mb = ddp.to_device(mb, self.device)
            advantages = torch.tensor([a for _, a in mb_items], dtype=torch.float32)  # (B,)
            advantages = advantages.to(self.device)
            with self._autocast():
                logps, entropy = forward_logps(self.model, mb)
            ref_logps = self.ref_logps(mb) if cfg.beta else None
            loss, stats = grpo_loss(
                logps,
                mb["old_logps"],
                ref_logps,
                advantages,
                mb["mask"],
                loss_type=cfg.loss_type,
                epsilon_low=cfg.epsilon_low,
                epsilon_high=cfg.epsilon_high,
                beta=cfg.beta,
                max_completion_length=cfg.max_completion_length or longest,
                num_items=num_items,
                accum_steps=len(window),
                kl_ratio_correction=cfg.kl_ratio_correction,
                weights=mb.get("weights"),
            )
            (loss * weight).backward()
            m = mb["mask"]
            stats["entropy"] = float((entropy * m).sum() / m.sum().clamp(min=1.0))
            stats["loss"] = float(loss.detach())
            rows.append(stats)
        grad_norm = sharding.plain(torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm))
        self.opt.step()
        row = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
        row["loss"] = sum(r["loss"] for r in rows)  # the accumulated objective of the step
        row.update({"grad_norm": float(grad_norm), "loss_tokens": num_items})
        row["peak_mem_mb"] = peak_memory_mb(self.device)
        return ddp.average(row)

    def optimizer_state(self) -> dict:
        """AdamW's state as an unsharded optimizer's state_dict ({} off rank 0 when sharded:
        gathering it is collective, so every rank calls this)."""
        if self.sharded:
            return sharding.full_optimizer_state(self.peft, self.opt)
        return self.opt.state_dict()

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16)

    @torch.no_grad()
    def ref_logps(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Token log-probs of the KL reference: the frozen copy, or the adapter-less base."""
        with self._autocast():
            if self.ref is not None:
                logps = forward_logps(self.ref, mb)[0]
                sharding.reshard(self.ref)  # FSDP keeps a root it expects a backward for
                return logps
            with self.peft.disable_adapter():
                return forward_logps(self.peft, mb)[0]

    def fit(self, items, out_dir=None, seed: int = 0) -> list[dict]:
        """cfg.steps steps over shuffled epochs of items; checkpoints every N under out_dir."""
        cfg = self.cfg
        if not items or cfg.steps == 0:
            return []
        longest = max(sum(t.loss_mask[1:]) for t, _ in items)
        stream = _batches(items, cfg.micro_batch_size, random.Random(seed))
        # A window never spans more than one epoch: a larger grad_accum means "the whole
        # batch per step" (each step one exact pass), not the same rows counted twice.
        accum = min(cfg.grad_accum, math.ceil(len(items) / cfg.micro_batch_size))
        history = []
        for step in range(1, cfg.steps + 1):
            row = {
                "step": step,
                **self.step([next(stream) for _ in range(accum)], longest),
            }
            if out_dir and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                if step < cfg.steps:
                    ckpt = Path(out_dir) / "checkpoints" / f"step-{step:05d}"
                    row["checkpoint"] = ddp.save_on_main(self.policy, ckpt)
            history.append(row)
        return history


def _mean(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if key in r and not math.isnan(r[key])]
    return sum(vals) / len(vals) if vals else 0.0


def train_grpo(
    policy_dir: str | os.PathLike,
    trajectories: list[Trajectory],
    cfg: TrainConfig,
    out_dir: str | os.PathLike,
    archived: list[Trajectory] | None = None,
    iteration: int | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Run one GRPO iteration on scored trajectories; save the candidate to out_dir.

    ``archived``: rows of earlier nights (data/archive) for ``train.replay`` and
    ``train.rft_source: archive``; ``iteration`` is tonight's (default: the newest row's).
    ``device``: policy.device (None: where Policy.load leaves it); under torchrun each rank
    trains on its own device (codeloop.train.distributed).
    Returns the summary (loss, kl, clip ratios, entropy, completion lengths, reward
    mean/std, frac_reward_zero_std, model_version, replay_* ...) plus a per-step ``history``.
    """
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    if ddp.world_size() > 1:
        device = str(ddp.device())
    policy = Policy.load(policy_dir, training_quantize(policy_dir, cfg.lora), device)
    if cfg.lora.r or is_peft(policy.model):  # an adapter checkpoint keeps training its adapter
        enable_lora(policy, cfg.lora, base_dir=policy_dir)
    items, summary = prepare_batch(trajectories, cfg, policy.max_context)
    archived = archived or []
    if iteration is None:
        iteration = max((t.iteration for t in trajectories), default=0)
    if cfg.rft != "off":  # rejection-sampling fine-tuning first (codeloop.train.rft)
        earlier = scorable(archived, policy, iteration) if cfg.rft_source == "archive" else []
        summary.update(run_rft(policy, trajectories + earlier, cfg))
        summary["rft_source"] = cfg.rft_source
        if cfg.rft == "instead":
            items = []
    if ddp.is_main():
        prepare_out(out_dir)
    summary["policy_version"] = policy.model_version
    # A full model's AdamW state cannot resume an adapter's (nor the reverse): start fresh.
    resumable = cfg.keep_optimizer_state and is_adapter_dir(policy_dir) == is_peft(policy.model)
    opt_state = load_opt_state(policy_dir, policy.model) if resumable else None
    summary["optimizer_resumed"] = opt_state is not None
    updater = GRPOUpdater(policy, cfg, opt_state)
    # An engine's rows: ratio against pi_start, the engine-vs-trainer gap as a weight.
    items, weights, gap = correct_engine_rows(items, updater.start_logps, cfg.engine_is_cap)
    updater.weights.update(weights)
    summary.update(gap)
    if cfg.replay.fraction > 0 and items:  # pi_start is the policy after RFT, if any
        items, replay_stats = add_replay(updater, items, archived, iteration)
        summary.update(replay_stats)
    history = updater.fit(items, out_dir, seed=cfg.seed)
    summary["model_version"] = ddp.save_on_main(policy, out_dir)
    opt_out = updater.optimizer_state() if cfg.keep_optimizer_state else None
    if opt_out is not None and ddp.is_main():
        # Not a hashed suffix: the optimizer is not part of the model_version.
        torch.save(opt_out, Path(out_dir) / OPT_FILE)
    summary["steps"] = len(history)
    summary["train_time_s"] = round(time.perf_counter() - t_start, 3)
    summary["lora"] = updater.lora
    summary["peak_mem_mb"] = max((r["peak_mem_mb"] for r in history), default=0.0)
    for key in ("loss", "kl", "entropy", "ratio_mean", "grad_norm"):
        summary[key] = _mean(history, key)
    for key in ("clip_ratio_low", "clip_ratio_high", "clip_ratio_region"):
        summary[key] = _mean(history, key)
    # Far from 1 at step 1 means the sampler's log-probs disagree with ours (template,
    # temperature or tokenisation drift): worth a look before trusting the update.
    summary["ratio_mean_first_step"] = history[0]["ratio_mean"] if history else 1.0
    summary["history"] = history
    return summary
