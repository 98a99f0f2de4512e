"""codeloop's sampler versus plain ``model.generate``, and versus the vLLM engine.

Run: ``python bench/generation.py [--models embedded,qwen05b] [--batch 8]
[--max-new-tokens 16]``

For each model, the same left-padded batch of prompts goes through
`Policy.generate` (per-row seeded sampler, KV cache, sampler log-probs returned) and
through ``model.generate(do_sample=True)`` with the same temperature, top_p, stop ids
and max_new_tokens. Models: the embedded default (untrained tiny GPT-2, fp32) and a
random-initialised Qwen2 shaped like Qwen2.5-Coder-0.5B (494M parameters, 151936 vocab)
in bf16, both on CPU; keep the 0.5B run short (few tokens). Prints tokens/s of each
side and codeloop / plain.

``--engine`` (``bash scripts/setup.sh --vllm`` first) compares the two samplers of
``policy.engine``: hf (`Policy.generate`, one padded batch) and vllm
(`EnginePolicy.generate`, the engine beside this process), on the same checkpoint
(``--model``: a checkpoint directory, default the embedded model of params.yaml, whose
head size 32 vLLM's CPU kernels take; float32 on both sides) and the same prompts, at
each batch size of ``--batches``: tokens/s over ``--max-new-tokens`` per row, and
time to first token (the same batch with one new token: prefill plus one step, every row
answered). Every measurement has prompts of its own, so the engine's prefix cache holds
what real rollouts share (the format's preamble) and never a whole repeated prompt.
``--out`` writes the table as CSV.

On a CPU the engine is expected to be slower than hf for a model this small: each
engine step runs vLLM's scheduler, input preparation and sampler in Python, and its
requests go through a pipe to another process, a fixed cost per step and per request
that a few-million-parameter model's matrix products cannot hide; vLLM's CPU backend has
no CUDA graphs, and continuous batching and the paged KV cache pay off only when the
model's own compute and memory traffic dominate (a GPU, a real checkpoint, long
generations, many requests finishing at different times).
"""
from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import load_params  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.policy.engine import EngineSettings  # noqa: E402
from codeloop.policy.engine_policy import open_engine_policy  # noqa: E402
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


def _timed(policy, ids: list[list[int]], max_new: int) -> tuple[int, float]:
    """(generated tokens, seconds) of one generate call over the whole batch."""
    t0 = time.perf_counter()
    out = policy.generate(ids, temperature=1.0, top_p=0.95, max_new_tokens=max_new, seed=0,
                          batch_size=len(ids))
    return sum(len(g.token_ids) for row in out for g in row), time.perf_counter() - t0


def _prompts(policy, n: int, seed: int) -> list[list[int]]:
    return [policy.format.prompt_ids(t) for t in generate_tasks(n, seed=seed, max_depth=3)]


def engine_table(a) -> list[dict]:
    """hf vs the vLLM engine on one checkpoint (module doc), one row per batch size."""
    tmp = None
    model = a.model
    if not model:
        tmp = tempfile.TemporaryDirectory(prefix="codeloop-bench-")
        model = str(Path(tmp.name) / "embedded")
        build_embedded(load_params(a.params), generate_tasks(300, seed=0)).save(model)
    hf = Policy.load(model, device=a.device)
    engine = open_engine_policy(model, EngineSettings(device=a.device, seed=0))
    sides = (("hf", hf), ("vllm", engine))
    try:
        for _, policy in sides:  # warm-up: allocator, kernels, the engine's first steps
            _timed(policy, _prompts(hf, 4, 99), 4)
        rows = []
        for b in [int(x) for x in a.batches.split(",")]:
            gen_ids, first_ids = _prompts(hf, b, 1000 + b), _prompts(hf, b, 2000 + b)
            row = {"batch": b, "max_new_tokens": a.max_new_tokens}
            for side, policy in sides:
                tokens, dt = _timed(policy, gen_ids, a.max_new_tokens)
                _, ttft = _timed(policy, first_ids, 1)
                row.update({f"{side}_tokens": tokens, f"{side}_s": round(dt, 3),
                            f"{side}_tok_s": round(tokens / dt, 1),
                            f"{side}_ttft_s": round(ttft, 3)})
            row["vllm_over_hf"] = round(row["vllm_tok_s"] / row["hf_tok_s"], 2)
            rows.append(row)
            print(f"{b:>6}{row['hf_tok_s']:>11.1f}{row['vllm_tok_s']:>12.1f}"
                  f"{row['vllm_over_hf']:>11.2f}{row['hf_ttft_s']:>10.3f}"
                  f"{row['vllm_ttft_s']:>12.3f}", flush=True)
    finally:
        engine.close()
        if tmp:
            tmp.cleanup()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="embedded,qwen05b")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--batch", type=int, default=8, help="prompts in the batch")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--engine", action="store_true", help="hf vs the vLLM engine (module doc)")
    ap.add_argument("--model", default="", help="--engine: a checkpoint dir (default: embedded)")
    ap.add_argument("--batches", default="1,16,64,256", help="--engine: batch sizes")
    ap.add_argument("--device", default="auto", help="--engine: policy.device of both sides")
    ap.add_argument("--out", default="", help="--engine: write the table here (CSV)")
    a = ap.parse_args()
    threads = set_threads()
    if a.engine:
        print(f"torch threads: {threads}, max_new_tokens: {a.max_new_tokens}, device: "
              f"{a.device}, model: {a.model or 'embedded (params.yaml policy_init)'}")
        print(f"{'batch':>6}{'hf tok/s':>11}{'vllm tok/s':>12}{'vllm/hf':>11}"
              f"{'hf TTFT s':>10}{'vllm TTFT s':>12}")
        rows = engine_table(a)
        if a.out:
            with open(a.out, "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        return 0
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
