"""Per-row seeded sampling (Policy.generate) versus HF's own sampler, same model and batch.

Run: ``python bench/row_sampler.py [--sequences 32] [--max-new-tokens 64] [--repeat 3]``

Policy.generate draws each row from its own torch.Generator through a logits processor
and decodes greedily over its pick (so rows do not depend on batch composition or
process); the baseline is ``model.generate(do_sample=True)`` with the same temperature,
top_p and repetition penalty, drawing from torch's global RNG. Same left-padded batch,
same max_new_tokens, no early stop (the stop ids are disabled on both sides so both
generate exactly the same number of tokens). Prints generated tokens/s of each and the
ratio: the price of per-row determinism.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from codeloop.config import PolicyInitConfig  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.policy import prompts as P  # noqa: E402
from codeloop.policy.model import build_embedded, set_threads  # noqa: E402


def _hf_sample(policy, ids: list[list[int]], new: int) -> int:
    pad = policy.tokenizer.pad_token_id
    longest = max(map(len, ids))
    inp = torch.tensor([[pad] * (longest - len(b)) + b for b in ids])
    mask = torch.tensor([[0] * (longest - len(b)) + [1] * len(b) for b in ids])
    with torch.no_grad():
        out = policy.model.generate(
            input_ids=inp, attention_mask=mask, do_sample=True, temperature=1.0, top_p=0.95,
            top_k=0, max_new_tokens=new, eos_token_id=[], pad_token_id=pad,
            output_logits=True, return_dict_in_generate=True,
        )
    return int(out.sequences[:, longest:].numel())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="runs per side (best is kept)")
    args = ap.parse_args()
    set_threads()
    tasks = generate_tasks(args.sequences, seed=1, max_depth=2)
    cfg = PolicyInitConfig(vocab_size=1024, n_layer=2, n_head=4, n_embd=128, n_positions=512)
    policy = build_embedded(SimpleNamespace(policy_init=cfg), tasks)
    policy.stop_ids = lambda: []  # no early stop: both sides generate the same token count
    ids = [policy.encode(P.task_prompt(t)) for t in tasks]
    new = args.max_new_tokens
    ours = base = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = policy.generate(ids, n=1, top_p=0.95, max_new_tokens=new)
        ours = min(ours, time.perf_counter() - t0)
        n_ours = sum(len(g.token_ids) for row in out for g in row)
        t0 = time.perf_counter()
        n_base = _hf_sample(policy, ids, new)
        base = min(base, time.perf_counter() - t0)
    print(f"{args.sequences} sequences x {new} new tokens, batch of {args.sequences}")
    print(f"{'sampler':<34}{'tokens':>8}{'seconds':>9}{'tokens/s':>10}")
    print(f"{'HF do_sample (global RNG, base)':<34}{n_base:>8}{base:>9.2f}{n_base / base:>10.0f}")
    print(f"{'per-row generators (ours)':<34}{n_ours:>8}{ours:>9.2f}{n_ours / ours:>10.0f}")
    print(f"ours / baseline throughput: {(n_ours / ours) / (n_base / base):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
