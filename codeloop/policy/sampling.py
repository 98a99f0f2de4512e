"""Per-row seeded sampling for `codeloop.policy.model.Policy.generate`.

Every row draws from its own CPU ``torch.Generator`` seeded from (call seed, prompt
tokens, rank among identical prompts, sample index), never from torch's process-global
RNG, so a row's sample does not depend on the other rows of its batch, on how a caller
chunks its prompts, on the thread or process that runs it, or on the device.
"""

from __future__ import annotations

import hashlib

import torch


class PolicyError(RuntimeError):
    """Our fault, not the sampled code's: a corrupt checkpoint or non-finite logits."""


def row_seed(seed: int, prompt_ids: list[int], rank: int, sample: int) -> int:
    """The seed of one sampled row: a function of its own inputs only."""
    key = f"{seed}|{rank}|{sample}|" + ",".join(map(str, prompt_ids))
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 1


def row_seeds(ids: list[list[int]], n: int, seed: int) -> list[int]:
    """Seeds of the flattened rows (prompt i, sample j): identical prompts get ranks 0, 1, ..."""
    seen: dict[tuple[int, ...], int] = {}
    seeds = []
    for p in ids:
        rank = seen.get(tuple(p), 0)
        seen[tuple(p)] = rank + 1
        seeds += [row_seed(seed, p, rank, j) for j in range(n)]
    return seeds


class RowSampler:
    """HF logits processor that samples each row with its own generator.

    Applies repetition penalty, temperature and top-p exactly as HF's sampler does, draws
    one token per row by inverse CDF from the row's generator, and returns scores that
    are 0 at the drawn token and -inf elsewhere (the caller decodes greedily).
    Non-finite logits raise PolicyError: they mean broken weights, never a model-code
    result, and sampling from them would silently produce garbage.
    """

    def __init__(self, seeds, temperature, top_p, repetition_penalty, model_desc: str):
        from transformers import RepetitionPenaltyLogitsProcessor, TopPLogitsWarper

        self.gens = [torch.Generator().manual_seed(s) for s in seeds]
        self.temperature = temperature
        rep = repetition_penalty
        self.rep = RepetitionPenaltyLogitsProcessor(rep) if rep != 1.0 else None
        self.top_p = TopPLogitsWarper(top_p) if top_p < 1.0 else None
        self.model_desc = model_desc
        self.step = 0
        self.logps: list[torch.Tensor] = []  # (B,) per generated token

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        bad = torch.isnan(scores).any(-1) | torch.isposinf(scores).any(-1)
        bad |= torch.isneginf(scores).all(-1)
        if bad.any():
            raise PolicyError(
                f"policy {self.model_desc}: non-finite logits at generated token {self.step} "
                f"for batch rows {bad.nonzero().flatten().tolist()[:8]}; the weights are "
                "broken (NaN/inf, or untied/uninitialised after a faulty load)"
            )
        raw = scores
        if self.rep is not None:
            scores = self.rep(input_ids, scores)
        scores = scores / self.temperature
        if self.top_p is not None:
            scores = self.top_p(input_ids, scores)
        probs = torch.softmax(scores, dim=-1)
        cdf = probs.cumsum(-1)
        u = torch.stack([torch.rand((), generator=g) for g in self.gens]).unsqueeze(-1)
        u = u.to(scores.device)  # CPU generators: the same draws on any device
        picks = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
        picks = picks.clamp_(max=scores.shape[-1] - 1)
        # The sampler log-prob of the pick, log_softmax(raw / T), kept per step: (B,) a
        # step instead of HF's output_logits, whose (B, T, V) is GBs at a 150k vocabulary.
        lp = torch.log_softmax(raw / self.temperature, dim=-1).gather(-1, picks)
        self.logps.append(lp.squeeze(-1).cpu())
        self.step += 1
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, picks, 0.0)
