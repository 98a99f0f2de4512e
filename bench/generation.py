"""codeloop's sampler versus plain ``model.generate`` on the same batch, tokens/s.

Run: ``python bench/generation.py [--models embedded,qwen05b] [--batch 8]
[--max-new-tokens 16]``

For each model, the same left-padded batch of prompts goes through
`Policy.generate` (per-row seeded sampler, KV cache, sampler log-probs returned) and
through ``model.generate(do_sample=True)`` with the same temperature, top_p, stop ids
and max_new_tokens. Models: the embedded default (untrained tiny GPT-2, fp32) and a
random-initialised Qwen2 shaped like Qwen2.5-Coder-0.5B (494M parameters, 151936 vocab)
in bf16, both on CPU; keep the 0.5B run short (few tokens). Prints tokens/s of each
side and codeloop / plain.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import load_params  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.policy.model import Policy, build_embedded, set_threads  # noqa: E402
from codeloop.policy.tiny import QWEN25_05B, build_model, build_tokenizer  # noqa: E402


def _policy(kind: str, params_path: str) -> Policy:
    if kind == "embedded":
        return build_embedded(load_params(params_path), generate_tasks(300, seed=0))
    tok = build_tokenizer("qwen2")
    model = build_model("qwen2", tok, seed=0, **QWEN25_05B).to(torch.bfloat16)
    return Policy(model, tok, name="random-qwen2-0.5B-bf16")


def _ours(policy: Policy, ids: list[list[int]], max_new: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    out = policy.generate(ids, temperature=1.0, top_p=0.95, max_new_tokens=max_new, seed=0,
                          batch_size=len(ids))
    return sum(len(g.token_ids) for row in out for g in row), time.perf_counter() - t0


@torch.no_grad()
def _plain(policy: Policy, ids: list[list[int]], max_new: int) -> tuple[int, float]:
    pad, longest = policy.tokenizer.pad_token_id, max(map(len, ids))
    inp = torch.tensor([[pad] * (longest - len(r)) + r for r in ids])
    mask = torch.tensor([[0] * (longest - len(r)) + [1] * len(r) for r in ids])
    stops = policy.stop_ids()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    out = policy.model.generate(
        input_ids=inp, attention_mask=mask, do_sample=True, temperature=1.0, top_p=0.95,
        top_k=0, max_new_tokens=max_new, eos_token_id=stops, pad_token_id=pad,
    )
    dt = time.perf_counter() - t0
    tokens = 0
    for row in out[:, longest:].tolist():
        cut = next((k + 1 for k, t in enumerate(row) if t in stops), len(row))
        tokens += cut
    return tokens, dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="embedded,qwen05b")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--batch", type=int, default=8, help="prompts in the batch")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    a = ap.parse_args()
    threads = set_threads()
    tasks = generate_tasks(a.batch, seed=123, max_depth=3)
    print(f"torch threads: {threads}, batch: {a.batch}, max_new_tokens: {a.max_new_tokens}")
    print(f"{'model':<26}{'params':>8}{'dtype':>10}{'side':>10}{'tokens':>8}{'s':>8}{'tok/s':>9}")
    for kind in a.models.split(","):
        policy = _policy(kind, a.params)
        ids = [policy.format.prompt_ids(t) for t in tasks]
        _ours(policy, ids[:1], 2)  # warm-up (allocator, kernels), both sides share it
        n_params = f"{sum(p.numel() for p in policy.model.parameters()) / 1e6:.0f}M"
        dtype = str(next(policy.model.parameters()).dtype).replace("torch.", "")
        rates = {}
        for side, fn in (("plain", _plain), ("codeloop", _ours)):
            tokens, dt = fn(policy, ids, a.max_new_tokens)
            rates[side] = tokens / dt
            print(f"{policy.name[:25]:<26}{n_params:>8}{dtype:>10}{side:>10}{tokens:>8}"
                  f"{dt:>8.2f}{rates[side]:>9.1f}")
        print(f"{'':<26}codeloop / plain generate: {rates['codeloop'] / rates['plain']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
