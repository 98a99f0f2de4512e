"""GRPO math in pure torch: group advantages and the clipped surrogate loss.

Definitions follow TRL's ``GRPOTrainer`` (trl 1.16, ``_generate_and_score_completions``
and ``_compute_loss``) so that ``bench/grpo_vs_trl.py`` can check them token for token:

- advantage ``A_i = r_i - mean(group)``, divided by ``std + 1e-4`` for scale "group"
  (the group's std) or "batch" (the whole batch's std), undivided for "none"; std uses
  Bessel's correction as TRL's ``nanstd`` does.
- ratio ``rho = exp(logp - old_logp)`` per token, surrogate
  ``-min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)``, plus ``beta * k3`` with
  ``k3 = exp(ref - logp) - (ref - logp) - 1`` (Schulman's unbiased, positive KL estimator),
  multiplied by ``rho`` when ``kl_ratio_correction`` (TRL 1.16's default
  ``use_bias_correction_kl``: the samples come from the old policy, DeepSeek-V3.2 eq. 8).
- normalisation per ``loss_type``: "grpo" mean over each sequence's tokens then over
  sequences; "bnpo" mean over all tokens of the micro-batch; "dr_grpo" sum over
  ``B * max_completion_length``; "dapo" sum over the number of loss tokens in the whole
  accumulation window (``num_items``), so micro-batches add up to one global token mean.

Departures from TRL, on purpose:
- a group whose rewards all tie (std ~ 0) gets an advantage of exactly 0 in every
  scale mode. TRL leaves ``(r - mean) / 1e-4``, which is 0 up to float rounding of the
  mean; forcing 0 guarantees tied groups carry no policy gradient.
- groups may have unequal sizes (``group_advantages_by_key``): after infrastructure
  failures are excluded a prompt's group can shrink. A group of one has no baseline and
  gets advantage 0, as TRL does for an unscorable completion.
- ``frac_reward_zero_std`` counts groups whose rewards tie, whatever the scale mode
  (TRL's log uses the batch std when scale is "batch").
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALES = ("group", "batch", "none")
STD_EPS = 1e-4  # TRL's additive epsilon in the advantage denominator


def _grouped_mean_std(rewards: torch.Tensor, ids: torch.Tensor, n_groups: int):
    """Per-element group mean and Bessel std (NaN for a group of one)."""
    # rewards: (B,) float; ids: (B,) long in [0, n_groups)
    counts = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, ids, torch.ones_like(rewards))
    sums = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, ids, rewards)
    mean = sums / counts  # (G,)
    dev2 = (rewards - mean[ids]) ** 2  # (B,)
    var = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, ids, dev2)
    var = var / (counts - 1)  # (G,) inf/NaN where count == 1
    std = torch.where(counts > 1, var.sqrt(), torch.full_like(var, float("nan")))
    return mean[ids], std[ids], std  # (B,), (B,), (G,)


def _advantages_from_ids(
    rewards: torch.Tensor, ids: torch.Tensor, n_groups: int, scale: str
) -> tuple[torch.Tensor, torch.Tensor]:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}; got {scale!r}")
    rewards = rewards.to(torch.float32)
    mean_b, std_b, std_g = _grouped_mean_std(rewards, ids, n_groups)
    adv = rewards - mean_b  # (B,)
    if scale == "group":
        adv = adv / (std_b + STD_EPS)
    elif scale == "batch":
        batch_std = rewards.std() if rewards.numel() > 1 else torch.tensor(float("nan"))
        adv = adv / (batch_std + STD_EPS)
    # A tie (or a group of one, std NaN) carries no signal: exactly zero, never noise.
    tied_g = torch.isnan(std_g) | torch.isclose(std_g, torch.zeros_like(std_g))  # (G,)
    adv = torch.where(tied_g[ids], torch.zeros_like(adv), adv)
    return adv, tied_g


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "group") -> torch.Tensor:
    """Advantages for contiguous, equal groups (TRL's layout: prompt i owns rows i*G..i*G+G-1).

    rewards: (B,) with B a multiple of group_size; returns (B,) float32.
    """
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(
            f"group_size {group_size} must be >= 1 and divide the batch size {rewards.numel()}"
        )
    ids = torch.arange(rewards.numel()) // group_size  # (B,)
    adv, _ = _advantages_from_ids(rewards.flatten(), ids, rewards.numel() // group_size, scale)
    return adv


def group_advantages_by_key(
    rewards: torch.Tensor, keys: Sequence[Hashable], scale: str = "group"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages for groups named by key (``Trajectory.prompt_key``), any sizes, any order.

    rewards: (B,); keys: B hashables. Returns advantages (B,) and group stats:
    ``n_groups``, ``frac_reward_zero_std`` (share of groups whose rewards tie),
    ``reward_mean``, ``reward_std``.
    """
    if len(keys) != rewards.numel():
        raise ValueError(f"{len(keys)} keys for {rewards.numel()} rewards")
    index: dict[Hashable, int] = {}
    ids = torch.tensor([index.setdefault(k, len(index)) for k in keys], dtype=torch.long)
    adv, tied_g = _advantages_from_ids(rewards.flatten(), ids, len(index), scale)
    return adv, group_stats(rewards, tied_g)


def tied_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(B // group_size,) bool: True where a contiguous group's rewards all tie."""
    ids = torch.arange(rewards.numel()) // group_size
    _, tied = _advantages_from_ids(rewards.flatten(), ids, rewards.numel() // group_size, "none")
    return tied


def group_stats(rewards: torch.Tensor, tied_g: torch.Tensor) -> dict[str, float]:
    r = rewards.to(torch.float32)
    return {
        "n_groups": int(tied_g.numel()),
        "frac_reward_zero_std": float(tied_g.float().mean()) if tied_g.numel() else 0.0,
        "reward_mean": float(r.mean()) if r.numel() else 0.0,
        "reward_std": float(r.std()) if r.numel() > 1 else 0.0,
    }


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor | None,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "grpo",
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    beta: float = 0.0,
    max_completion_length: int | None = None,
    num_items: float | torch.Tensor | None = None,
    accum_steps: int = 1,
    kl_ratio_correction: bool = True,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped GRPO surrogate with k3 KL, normalised as TRL's ``loss_type`` does.

    logps, old_logps, ref_logps, mask: (B, T), token log-probs of the taken tokens under
    the current / sampling / reference policy; mask is 1 on tokens that carry loss
    (model-generated), 0 on prompt, environment feedback and padding.
    old_logps None: on-policy, ``logps.detach()`` (TRL with num_iterations=1).
    advantages: (B,) or (B, T). ``max_completion_length`` (dr_grpo) defaults to T.
    ``num_items`` (dapo) is the loss-token count of the whole accumulation window
    (default: this micro-batch's). ``accum_steps`` divides grpo/bnpo/dr_grpo as TRL does
    under gradient accumulation. ``kl_ratio_correction`` weights k3 by the ratio (TRL's
    ``use_bias_correction_kl``, default on). ``weights`` (B, T), detached: off-policy
    importance weights multiplying each token's loss (replay, codeloop.train.archive_replay);
    None = 1 everywhere. Returns (loss, stats): kl, ratio_mean, clip_ratio_low,
    clip_ratio_high, clip_ratio_region (masked token means) and policy_loss.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}; got {loss_type!r}")
    mask = mask.to(logps.dtype)  # (B, T)
    if old_logps is None:
        old_logps = logps.detach()
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # (B, 1) | (B, T)
    adv = adv.to(logps.dtype)

    coef_1 = torch.exp(logps - old_logps)  # (B, T) importance ratio
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)  # (B, T)
    per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv)  # (B, T)
    per_token_kl = None
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta != 0 needs ref_logps")
        delta = ref_logps - logps  # (B, T)
        per_token_kl = torch.exp(delta) - delta - 1  # (B, T) k3 estimator, >= 0
        if kl_ratio_correction:
            per_token_kl = per_token_kl * coef_1  # (B, T) importance-weighted: unbiased gradient
        per_token_loss = per_token_loss + beta * per_token_kl
    if weights is not None:  # replayed rows: the sample came from an older policy
        per_token_loss = per_token_loss * weights.to(logps.dtype)

    masked = per_token_loss * mask  # (B, T)
    if loss_type == "grpo":
        loss = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accum_steps
    elif loss_type == "bnpo":
        loss = masked.sum() / mask.sum().clamp(min=1.0) / accum_steps
    elif loss_type == "dr_grpo":
        length = max_completion_length or logps.size(1)
        loss = masked.sum() / (logps.size(0) * length) / accum_steps
    else:  # dapo
        n = mask.sum() if num_items is None else torch.as_tensor(num_items, dtype=logps.dtype)
        loss = masked.sum() / n.clamp(min=1.0)

    with torch.no_grad():
        low = ((coef_1 < 1 - epsilon_low) & (adv < 0)).to(logps.dtype)  # (B, T)
        high = ((coef_1 > 1 + epsilon_high) & (adv > 0)).to(logps.dtype)  # (B, T)
        stats = {
            "policy_loss": float(loss.detach()) * (accum_steps if loss_type != "dapo" else 1),
            "kl": float(_masked_mean(per_token_kl, mask)) if per_token_kl is not None else 0.0,
            "ratio_mean": float(_masked_mean(coef_1, mask)),
            "clip_ratio_low": float(_masked_mean(low, mask)),
            "clip_ratio_high": float(_masked_mean(high, mask)),
            "clip_ratio_region": float(_masked_mean(torch.clamp(low + high, max=1.0), mask)),
        }
    return loss, stats


def token_logps(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each target token and the entropy of its distribution.

    logits: (B, T, V) already aligned with targets (B, T) (shift done by the caller).
    Logits are divided by the sampling temperature first, as TRL does, so ratios compare
    the same distribution the sampler drew from; temperature is a float or (B,) per row.
    Returns (logps (B, T), entropy (B, T)).
    """
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.to(logits.device, torch.float32).view(-1, 1, 1)  # (B, 1, 1)
    logits = logits.float() / temperature  # (B, T, V)
    logp_all = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    logps = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)  # (B, T)
    return logps, entropy
