"""One generation interface for the episode loop: ``hf`` (``Policy.generate``) or an engine.

``policy.engine: vllm`` samples through vLLM (codeloop.policy.vllm_engine): an engine
process beside the stage (``LLM``, colocated on the stage's device), or a running vLLM
OpenAI-compatible server (``policy.engine_url``). Either way the loop hands it token ids
and gets token ids back (never re-tokenised text, so the trainer's sequence is the
sampler's), with per-token log-probs and why each generation stopped.

An engine's policy (codeloop.policy.engine_policy.EnginePolicy) stands where a ``Policy``
stands for every sampling caller (rollout, evaluate); the episode loops also give it
explicit per-episode seeds (``episode_seed``) and submit turns one by one (``submit``).

The engine's samples are not ``hf``'s: another sampler draws with other random streams.
Log-probs: with temperature 1 they are log_softmax(logits) of the sampled token, as
``hf`` stores them; at another temperature they are the engine's processed log-probs
(temperature, penalties and top-p applied), the distribution it really sampled from.
Either way the trainer recomputes the policy's own log-probs for rows an engine sampled
and corrects the gap with truncated importance weights (codeloop.train.trainer).
A bad combination (no engine installed, a model it cannot load, a server that is down)
raises ``EngineError`` naming the key; nothing ever falls back to ``hf``.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from codeloop.policy.sampling import row_seed

ENGINES = ("hf", "vllm")


class EngineError(RuntimeError):
    """The engine cannot serve (not installed, cannot load the model, server down): our
    infrastructure's fault, never a model-code result; the message names the key."""


@dataclass(frozen=True)
class SamplingSpec:
    """How to sample one turn (the stop tokens and strings come from the prompt format)."""

    temperature: float = 1.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    max_new_tokens: int = 128


@dataclass(frozen=True)
class EngineSettings:
    """What an engine is started with (policy.* and the stage's sampling temperature)."""

    engine: str = "vllm"
    url: str = ""  # policy.engine_url: a running server; "" starts one beside the stage
    dtype: str = "auto"  # policy.engine_dtype
    memory: float = 0.5  # policy.engine_memory: share of GPU memory (GPU only)
    device: str = "auto"  # policy.device
    seed: int = 0
    temperature: float = 1.0  # picks which log-probs the engine reports (module doc)

    @classmethod
    def of(cls, policy_cfg, temperature: float, seed: int = 0) -> EngineSettings:
        return cls(engine=policy_cfg.engine, url=policy_cfg.engine_url,
                   dtype=policy_cfg.engine_dtype, memory=policy_cfg.engine_memory,
                   device=policy_cfg.device, seed=seed, temperature=temperature)


class Engine(Protocol):
    """A running engine: one request at a time in, each answered when it finishes."""

    start_s: float

    def submit(self, ids: list[int], seed: int, spec: SamplingSpec, stops: list[int],
               stop_strings: list[str], lora: dict | None) -> Future: ...

    def sync(self, path: str, version: str) -> float: ...

    def close(self) -> None: ...


def episode_seed(turn_seed: int, task_id: str, sample: int) -> int:
    """An engine episode's seed for one turn: its own identity, never its batch-mates'
    (lock-step and asynchronous turns draw alike)."""
    return row_seed(turn_seed, list(task_id.encode()), sample, 0)


def max_context_of(model_dir: Path) -> int:
    cfg = json.loads((model_dir / "config.json").read_text())
    return int(cfg.get("n_positions") or cfg.get("max_position_embeddings") or 2048)


def is_engine(policy) -> bool:
    """True for a policy an engine samples (it takes explicit per-episode seeds)."""
    return getattr(policy, "engine_kind", "hf") != "hf"
