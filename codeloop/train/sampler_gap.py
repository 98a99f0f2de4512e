"""Rows an inference engine sampled: the trainer's log-probs, the engine's as the sampler.

An engine (``metadata.engine`` other than ``hf``, codeloop.policy.engine) computes its
log-probs with its own kernels and precision, and at temperatures other than 1 after its
top-p and penalties: they are not this trainer's log-probs of the same weights. So, as
TRL's vLLM importance-sampling correction does, the PPO ratio of such a row is taken
against pi_start, the policy as this iteration starts (recomputed once, before the first
step), and the gap between the engine mu and pi_start is corrected by the detached weight
w_t = min(exp(start_t - mu_t), ``train.engine_is_cap``) per generated token (truncated
importance sampling: bias for bounded variance, the same per-token weight
codeloop.train.archive_replay gives replayed rows). ``hf`` rows keep the sampler's
log-probs: they are this trainer's own forward pass.

Reported (metrics/train.json and the UI): ``engine_rows``, ``engine_logp_gap`` (mean
|start_t - mu_t| over generated tokens), ``engine_is_truncated`` (share of those tokens
whose weight hit the cap) and ``engine_is_weight_mean``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from codeloop.schema import Trajectory
from codeloop.train.archive_replay import weights_for


def engine_sampled(t: Trajectory) -> bool:
    return t.metadata.engine not in ("", "hf")


def correct(
    items: list[tuple[Trajectory, float]],
    start_logps: Callable[[list[Trajectory]], list[list[float]]],
    cap: float,
) -> tuple[list[tuple[Trajectory, float]], dict[str, list[float]], dict[str, Any]]:
    """(items with engine rows' old log-probs set to pi_start's, their weights by id, stats)."""
    rows = [t for t, _ in items if engine_sampled(t)]
    if not rows:
        return items, {}, {}
    starts = dict(zip((t.trajectory_id for t in rows), start_logps(rows), strict=True))
    out, weights, gaps, used = [], {}, [], []
    for t, a in items:
        if t.trajectory_id not in starts:
            out.append((t, a))
            continue
        start = starts[t.trajectory_id]
        full, raw = weights_for(t, start, "token", cap)
        weights[t.trajectory_id] = full
        gen = [i for i, m in enumerate(t.loss_mask) if m and i > 0]
        gaps.extend(abs(start[i] - t.sample_logprobs[i]) for i in gen)
        used.extend(raw)
        old = [s if m else 0.0 for s, m in zip(start, t.loss_mask, strict=True)]
        out.append((replace(t, sample_logprobs=old), a))
    n = max(1, len(used))
    stats = {
        "engine_rows": len(rows),
        "engine_logp_gap": sum(gaps) / max(1, len(gaps)),
        "engine_is_truncated": sum(w > cap for w in used) / n,
        "engine_is_weight_mean": sum(min(w, cap) for w in used) / n,
    }
    return out, weights, stats
