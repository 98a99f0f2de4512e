"""A tiny real GPT-2 policy and GRPO groups of trajectories on it, for trainer tests."""

from __future__ import annotations

from pathlib import Path

import torch

from codeloop.data.generator import generate_tasks
from codeloop.policy.model import Policy, train_tokenizer
from codeloop.schema import Trajectory, TrajectoryMetadata

PROMPT = "<|task|>Write f(x) returning x plus one.\n<|code|>"
GOOD = "def f(x):\n    return x + 1\n<|end|>"
BAD = "def f(x):\n    return x\n<|end|>"
FEEDBACK = "\n<|feedback|>status: failed\n<|revise|>"


def make_tiny_policy(out: Path) -> Path:
    """A 1-layer GPT-2 with the embedded tokenizer, saved as a real checkpoint in out."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = train_tokenizer(generate_tasks(30, seed=1), vocab_size=400)
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=len(tok),
        n_positions=256,
        n_embd=32,
        n_layer=1,
        n_head=2,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    Policy(GPT2LMHeadModel(cfg), tok, name="tiny").save(out)
    return out


def logps(policy: Policy, ids: list[int], temperature: float) -> list[float]:
    """The sampler's view: log_softmax(logits / T) of each token given its prefix."""
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0, :-1] / temperature
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1))
    return [0.0] + lp.squeeze(-1).tolist()


def episode(policy, key, turns, reward, temperature=1.0, tid="t") -> Trajectory:
    """Prompt, then (generated, feedback) turns; loss_mask 1 on generated text only."""
    ids, mask = policy.encode(PROMPT), []
    mask = [0] * len(ids)
    for gen, fb in turns:
        g = policy.encode(gen)
        ids, mask = ids + g, mask + [1] * len(g)
        if fb:
            f = policy.encode(fb)
            ids, mask = ids + f, mask + [0] * len(f)
    lps = logps(policy, ids, temperature)
    return Trajectory(
        trajectory_id=tid,
        task_id=key,
        prompt_key=key,
        prompt=PROMPT,
        reward=reward,
        metadata=TrajectoryMetadata(temperature=temperature),
        token_ids=ids,
        loss_mask=mask,
        sample_logprobs=[lp if m else 0.0 for lp, m in zip(lps, mask, strict=True)],
    )


def group(policy, key="k", temperature=1.0):
    return [
        episode(policy, key, [(GOOD, "")], 1.0, temperature, f"{key}-0"),
        episode(policy, key, [(GOOD, "")], 1.0, temperature, f"{key}-1"),
        episode(policy, key, [(BAD, FEEDBACK), (BAD, "")], 0.0, temperature, f"{key}-2"),
        episode(policy, key, [(BAD, "")], 0.0, temperature, f"{key}-3"),
    ]
