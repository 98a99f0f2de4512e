"""Replay: archived episodes of earlier nights in tonight's GRPO update (``train.replay``).

Which rows: archive rows of nights N-max_age .. N-1 (N = tonight's iteration; a row of
tonight or of a later night is never read, so a `dvc repro` against a newer archive reads
the same rows), with tokens (stripped rows have none), sampled by the same model family
(``metadata.model_name`` equals the policy's name, every token id inside its vocabulary:
a row of another tokenizer cannot be scored by this trainer) and fitting the context.

Advantages: per archived group (iteration, prompt_key), from the rewards as archived.
The archive keeps whole groups while under its size budget; a stripped row keeps its
reward, so it still counts in its group's baseline though it cannot train. Tied groups
carry no gradient and are left out, as tonight's are.

Correction (decoupled PPO, Hilton et al. 2021): the tokens were sampled by an older
policy mu whose per-token log-probs the row stores. The PPO ratio is taken against
pi_start, the policy as this iteration starts (recomputed once before the first step), so
clipping bounds this update's move exactly as for tonight's rows; the sampling
distribution is corrected by the detached weight w = pi_start / mu, truncated at
``clip``. Level ``token`` (default): w_t = min(exp(start_t - mu_t), clip) per generated
token. Why per token: a per-sequence weight is the product over dozens of tokens of a sampler
a night or more old, which spans orders of magnitude, so a handful of rows would carry
the batch (its ESS collapses); truncating per token trades that variance for bias, as
TRL's vLLM importance-sampling correction (token_truncate) does. Level ``sequence``:
w = min(exp(sum_t(start_t - mu_t)), clip) on every token of the row.

How many: floor(fraction / (1 - fraction) x tonight's rows in the update), drawn
uniformly (seeded) from the live groups' trainable rows; fewer if fewer are there.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from codeloop.schema import Trajectory
from codeloop.train.grpo import group_advantages_by_key

PREFIX = "replay:"  # replayed copies' trajectory_id prefix: never collides with tonight's


def _reason(
    t: Trajectory, iteration: int, max_age: int, name: str, vocab: int, max_len: int
) -> str:
    """Why an archived row cannot be replayed tonight ("" when it can)."""
    if t.iteration >= iteration:
        return "not_earlier"
    if t.iteration < iteration - max_age:
        return "older_than_max_age"
    if t.infra_error:
        return "infra_error"
    if not t.token_ids or sum(t.loss_mask[1:]) == 0:
        return "no_tokens"
    if len(t.loss_mask) != len(t.token_ids) or len(t.sample_logprobs) != len(t.token_ids):
        return "corrupt"
    if t.metadata.model_name != name or max(t.token_ids) >= vocab:
        return "other_model"
    if len(t.token_ids) > max_len:
        return "longer_than_context"
    return ""


def candidates(
    archived: list[Trajectory], iteration: int, cfg, name: str, vocab: int, max_len: int
) -> tuple[list[tuple[Trajectory, float]], Counter]:
    """(row, advantage) of every replayable archived row of a live group; exclusion counts."""
    excluded: Counter = Counter()
    groups: dict[tuple[int, str], list[Trajectory]] = defaultdict(list)
    reasons = {}
    for t in archived:
        reasons[id(t)] = _reason(t, iteration, cfg.max_age, name, vocab, max_len)
        if reasons[id(t)] in ("not_earlier", "older_than_max_age", "infra_error"):
            excluded[reasons[id(t)]] += 1
        else:  # the baseline counts every archived reward of the group, stripped or not
            groups[(t.iteration, t.prompt_key)].append(t)
    out = []
    for key, rows in sorted(groups.items()):
        rewards = torch.tensor([t.reward for t in rows], dtype=torch.float32)
        adv, _ = group_advantages_by_key(rewards, [key] * len(rows), "group")
        live = bool((adv != 0).any())
        for t, a in zip(rows, adv.tolist(), strict=True):
            if reasons[id(t)]:
                excluded[reasons[id(t)]] += 1
            elif not live:
                excluded["tied_group"] += 1
            else:
                out.append((t, a))
    return out, excluded


def draw(pool: list, n_tonight: int, fraction: float, seed: int) -> list:
    """The replayed share: fraction / (1 - fraction) x n_tonight of pool, seeded."""
    n = min(len(pool), math.floor(fraction / (1 - fraction) * n_tonight + 1e-9))
    order = sorted(pool, key=lambda item: item[0].trajectory_id)
    return random.Random(f"replay:{seed}").sample(order, n)


def weights_for(
    t: Trajectory, start: list[float], level: str, clip: float
) -> tuple[list[float], list[float]]:
    """(truncated, raw) weights per token position of t (1.0 off the generated tokens)."""
    gen = [i for i, m in enumerate(t.loss_mask) if m and i > 0]
    log_ratio = [start[i] - t.sample_logprobs[i] for i in gen]
    if level == "sequence":
        raw_seq = math.exp(min(sum(log_ratio), 700.0))
        raw = [raw_seq] * len(gen)
    else:
        raw = [math.exp(min(lr, 700.0)) for lr in log_ratio]
    full = [1.0] * len(t.token_ids)
    for i, r in zip(gen, raw, strict=True):
        full[i] = min(r, clip)
    return full, raw


def prepare(
    items: list[tuple[Trajectory, float]],
    start_logps: Callable[[list[Trajectory]], list[list[float]]],
    cfg,
) -> tuple[list[tuple[Trajectory, float]], dict[str, list[float]], dict[str, Any]]:
    """Replay copies (old log-probs = pi_start's), their weights by id, and weight stats.

    ``start_logps(rows)`` gives pi_start's log-prob of every token position of each row
    (0.0 at position 0), from the model as this iteration starts.
    """
    if not items:
        return [], {}, weight_stats([], [], cfg)
    starts = start_logps([t for t, _ in items])
    out, weights, used, raws = [], {}, [], []
    for (t, a), start in zip(items, starts, strict=True):
        full, raw = weights_for(t, start, cfg.level, cfg.clip)
        copy = replace(
            t,
            trajectory_id=PREFIX + t.trajectory_id,
            prompt_key=f"{PREFIX}{t.iteration}:{t.prompt_key}",
            sample_logprobs=[s if m else 0.0 for s, m in zip(start, t.loss_mask, strict=True)],
        )
        weights[copy.trajectory_id] = full
        out.append((copy, a))
        if cfg.level == "sequence":
            used.append(min(raw[0], cfg.clip))
            raws.append(raw[0])
        else:
            used.extend(min(r, cfg.clip) for r in raw)
            raws.extend(raw)
    return out, weights, weight_stats(used, raws, cfg)


def weight_stats(used: list[float], raw: list[float], cfg) -> dict[str, Any]:
    """Mean/max of the truncated weights, the raw max, the clipped share and the ESS.

    ESS = (sum w)^2 / sum w^2 over the units weighted (tokens or sequences);
    ``replay_ess_fraction`` = ESS / units: 1 when every weight is equal.
    """
    n = len(used)
    ess = sum(used) ** 2 / sum(w * w for w in used) if n else 0.0
    return {
        "replay_level": cfg.level,
        "replay_weight_units": n,
        "replay_weight_mean": sum(used) / n if n else 0.0,
        "replay_weight_max": max(used, default=0.0),
        "replay_weight_raw_max": max(raw, default=0.0),
        "replay_clipped_share": sum(r > cfg.clip for r in raw) / n if n else 0.0,
        "replay_ess": ess,
        "replay_ess_fraction": ess / n if n else 0.0,
    }


def add_replay(
    updater, items: list, archived: list[Trajectory], iteration: int
) -> tuple[list, dict[str, Any]]:
    """Tonight's items plus the replayed share; sets ``updater.weights``; replay metrics."""
    cfg, policy = updater.cfg.replay, updater.policy
    pool, excluded = candidates(
        archived, iteration, cfg, policy.name, len(policy.tokenizer), policy.max_context
    )
    picked = draw(pool, len(items), cfg.fraction, updater.cfg.seed + iteration)
    replayed, weights, wstats = prepare(picked, updater.start_logps, cfg)
    updater.weights = weights
    n = len(items) + len(replayed)
    stats = {
        "replay_fraction": cfg.fraction,
        "replay_archived_rows": len(archived),
        "replay_candidates": len(pool),
        "replay_rows": len(replayed),
        "replay_share": len(replayed) / n if n else 0.0,
        "replay_iterations": sorted({t.iteration for t, _ in picked}),
        "replay_excluded": dict(sorted(excluded.items())),
        **wstats,
    }
    return items + replayed, stats


def scorable(archived: list[Trajectory], policy, iteration: int) -> list[Trajectory]:
    """Archived rows of earlier nights this policy can train on (same model, in context)."""
    name, vocab, max_len = policy.name, len(policy.tokenizer), policy.max_context
    # Every earlier night: a passing episode does not go stale as an importance ratio does.
    return [t for t in archived if not _reason(t, iteration, iteration, name, vocab, max_len)]
