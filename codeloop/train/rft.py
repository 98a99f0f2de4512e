"""Rejection-sampling fine-tuning (expert iteration) on passing episodes (``train.rft``).

Before the GRPO update (``rft: before``) or instead of it (``rft: instead``), the policy is
fine-tuned with cross-entropy on the episodes that passed every visible test, deduplicated
per task and final code, and on the repository episodes the judge resolved (per task and
final diff). A function episode's target is its last generation only, exactly as sampled
(its token ids), with everything before it as context: in a revise episode the failed
first attempt stays context, never a target. A resolved agent episode's targets are all
its tool calls, its observations context. With ``before``, GRPO's KL reference
is the fine-tuned policy (the update starts from it).

The source is the scored trajectories the stage trains on (tonight's; the archive's
``sft`` tier holds the same rows across nights: ``codeloop export --format sft``).
Every rank runs the same full-batch steps on the same rows, so ranks stay identical.
"""

from __future__ import annotations

from typing import Any

import torch

from codeloop.schema import Trajectory, passing, resolved_episode


def last_generation(t: Trajectory) -> tuple[int, int] | None:
    """[start, end) of the episode's last run of model-generated tokens, or None."""
    end = None
    for i in range(len(t.loss_mask) - 1, 0, -1):
        if t.loss_mask[i] and end is None:
            end = i + 1
        elif not t.loss_mask[i] and end is not None:
            return i + 1, end
    return (1, end) if end is not None else None


def rft_examples(trajs: list[Trajectory], max_len: int) -> list[tuple[list[int], list[int]]]:
    """(token ids, target mask) of passing episodes, one per (task, code or final diff).

    A function episode's target is its last generation (a failed first attempt stays
    context); a resolved agent episode's is every tool call it wrote (the mask GRPO uses),
    the observations between them context."""
    seen, out = set(), []
    for t in sorted(trajs, key=lambda t: t.trajectory_id):
        if not passing(t) or len(t.token_ids) > max_len:
            continue
        agent = resolved_episode(t)
        key = (t.task_id, t.final_diff if agent else t.final_code)
        span = None if agent else last_generation(t)
        if key in seen or not (agent or span):
            continue
        seen.add(key)
        if agent:
            out.append((list(t.token_ids), [int(m) for m in t.loss_mask]))
        else:
            s, e = span
            out.append((t.token_ids[:e], [0] * s + [1] * (e - s)))
    return out


def _loss(model, batch: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, int]:
    """Summed target-token cross-entropy of a micro-batch, and its target count."""
    length = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)  # (B, L)
    attn = torch.zeros((len(batch), length), dtype=torch.long)  # (B, L)
    labels = torch.full((len(batch), length), -100, dtype=torch.long)  # (B, L)
    for i, (row, mask) in enumerate(batch):
        ids[i, : len(row)] = torch.tensor(row)
        attn[i, : len(row)] = 1
        labels[i, : len(row)] = torch.tensor(
            [x if m else -100 for x, m in zip(row, mask, strict=True)]
        )
    device = next(model.parameters()).device
    logits = model(input_ids=ids.to(device), attention_mask=attn.to(device)).logits
    targets = labels[:, 1:].to(device)  # token t is predicted from t-1
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum"
    )
    return loss, int((targets != -100).sum())


def run_rft(policy, trajs: list[Trajectory], cfg) -> dict[str, Any]:
    """Fine-tune policy.model in place on passing episodes; returns the rft_* metrics."""
    examples = rft_examples(trajs, policy.max_context)
    stats: dict[str, Any] = {
        "rft_mode": cfg.rft,
        "rft_examples": len(examples),
        "rft_tasks": len({t.task_id for t in trajs if passing(t)}),
    }
    if not examples or cfg.rft_steps == 0:
        return {**stats, "rft_steps": 0, "rft_loss_first": 0.0, "rft_loss_last": 0.0}
    model = policy.model
    model.eval()  # no dropout, as the GRPO update (codeloop.train.trainer)
    tok = policy.tokenizer
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.rft_lr, weight_decay=0.0)
    losses = []
    for _ in range(cfg.rft_steps):  # full-batch steps: the passing set is small
        opt.zero_grad(set_to_none=True)
        n_targets = sum(sum(m) for _, m in examples)
        total = 0.0
        for i in range(0, len(examples), cfg.micro_batch_size):
            loss, _ = _loss(model, examples[i : i + cfg.micro_batch_size], pad_id)
            (loss / n_targets).backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        losses.append(total / n_targets)
    return {
        **stats,
        "rft_steps": len(losses),
        "rft_loss_first": losses[0],
        "rft_loss_last": losses[-1],
    }
