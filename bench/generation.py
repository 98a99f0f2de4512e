"""Batched generation tokens/s versus one-sample-at-a-time on the same model.

Run: ``python bench/generation.py [--checkpoint models/init] [--sequences 32]
[--max-new-tokens 64] [--batch-size 32]``

Both sides call `Policy.generate` with the same prompts, sampling parameters and
seed; the only difference is batch_size (32 left-padded sequences per forward vs 1).
Without --checkpoint it builds the embedded default (params.yaml policy_init) on
generated tasks, untrained, so completions run to max_new_tokens on both sides. Prints
generated tokens/s of each and the ratio (target >= 4x).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import load_params  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.policy import prompts as P  # noqa: E402
from codeloop.policy.model import Policy, build_embedded, set_threads  # noqa: E402


def _timed(policy: Policy, prompts: list[str], n: int, batch_size: int, max_new: int):
    t0 = time.perf_counter()
    out = policy.generate(prompts, n=n, temperature=1.0, top_p=0.95, max_new_tokens=max_new,
                          seed=0, batch_size=batch_size)  # fmt: skip
    dt = time.perf_counter() - t0
    tokens = sum(len(g.token_ids) for row in out for g in row)
    return tokens, dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="", help="policy dir; default: build embedded")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--sequences", type=int, default=32, help="prompts x samples per side")
    ap.add_argument("--samples", type=int, default=4, help="samples per prompt (GRPO group)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    a = ap.parse_args()
    threads = set_threads()
    tasks = generate_tasks(max(8, a.sequences // a.samples), seed=123, max_depth=3)
    if a.checkpoint:
        policy = Policy.load(a.checkpoint)
    else:
        policy = build_embedded(load_params(a.params), generate_tasks(300, seed=0))
    prompts = [P.task_prompt(t) for t in tasks[: a.sequences // a.samples]]
    _timed(policy, prompts[:1], 1, 1, 4)  # warm-up (allocator, kernels)
    tok_b, dt_b = _timed(policy, prompts, a.samples, a.batch_size, a.max_new_tokens)
    tok_1, dt_1 = _timed(policy, prompts, a.samples, 1, a.max_new_tokens)
    rate_b, rate_1 = tok_b / dt_b, tok_1 / dt_1
    print(f"model: {policy.name} ({sum(p.numel() for p in policy.model.parameters()):,} params), "
          f"torch threads: {threads}")  # fmt: skip
    print(f"sequences: {len(prompts) * a.samples}, max_new_tokens: {a.max_new_tokens}")
    print(f"{'mode':<28}{'tokens':>8}{'seconds':>10}{'tokens/s':>12}")
    print(f"{'one at a time (baseline)':<28}{tok_1:>8}{dt_1:>10.2f}{rate_1:>12.1f}")
    print(f"{f'batched (batch_size={a.batch_size})':<28}{tok_b:>8}{dt_b:>10.2f}{rate_b:>12.1f}")
    print(f"speed-up: {rate_b / rate_1:.1f}x (target >= 4x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
