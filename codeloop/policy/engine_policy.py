"""An engine's policy: what samplers need of a ``Policy``, served by an inference engine.

``EnginePolicy`` has the tokenizer, prompt format, name, model_version and context length
of a checkpoint, and ``generate`` with ``Policy.generate``'s arguments and per-row seeds (a
row's seed depends on the call seed, its prompt, its rank among identical prompts and its
sample index, as for ``hf``). The episode loops use two more calls: ``sample_rows``
(explicit seeds, one turn of many episodes) and ``submit`` (one request, answered when it
finishes: an agent episode's next turn goes in as soon as its observation is back).
``sync`` serves another checkpoint of the same model (after a GRPO/RFT update).
``open_policy`` is what a sampling stage calls: hf loads the checkpoint, an engine serves
it, one per process (``shared_engine_policy``) so every rollout chunk of the process is
batched together; ``close_shared`` ends them and says what each did.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from codeloop.policy.engine import (
    Engine,
    EngineError,
    EngineSettings,
    SamplingSpec,
    max_context_of,
)
from codeloop.policy.formats import format_for
from codeloop.policy.lora import base_dir_of, is_adapter_dir, recorded_quantize
from codeloop.policy.model import VERSION_FILE, Generation, Tokenized, checkpoint_hash
from codeloop.policy.sampling import row_seeds
from codeloop.policy.vllm_engine import connect

log = logging.getLogger(__name__)


@dataclass
class EngineStats:
    """What the engine did for one stage: for metrics and the UI."""

    start_s: float = 0.0
    sync_s: list[float] = field(default_factory=list)
    requests: int = 0
    generated_tokens: int = 0

    def to_dict(self) -> dict:
        return {"start_s": round(self.start_s, 3), "syncs": len(self.sync_s),
                "sync_s": [round(s, 3) for s in self.sync_s], "requests": self.requests,
                "generated_tokens": self.generated_tokens}



class EnginePolicy(Tokenized):
    """A policy checkpoint served by an engine: what samplers need of a ``Policy``."""

    def __init__(self, checkpoint: str | os.PathLike, engine: Engine, *, lora: dict | None,
                 base_dir: Path) -> None:
        from transformers import AutoTokenizer

        self.checkpoint = Path(checkpoint)
        self.engine, self.lora, self.base_dir = engine, lora, base_dir
        self.tokenizer = AutoTokenizer.from_pretrained(self.checkpoint, local_files_only=True)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.format = format_for(self.tokenizer)
        self.name, self.model_version = checkpoint_identity(self.checkpoint)
        self.max_context = max_context_of(base_dir)
        self.stats = EngineStats(start_s=engine.start_s)
        self._lock = threading.Lock()

    engine_kind = "vllm"

    def submit(self, ids: list[int], seed: int, spec: SamplingSpec) -> Future:
        """One generation, answered (a Generation) when it finishes."""
        room = min(spec.max_new_tokens, self.max_context - len(ids))
        done: Future = Future()
        if room <= 0:
            done.set_result(Generation("", finish_reason="context"))
            return done
        sized = SamplingSpec(spec.temperature, spec.top_p, spec.repetition_penalty, room)
        raw = self.engine.submit(list(ids), seed, sized, self.stop_ids(),
                                 self.format.stop_strings(), self.lora)
        raw.add_done_callback(lambda f: self._finish(f, done))
        return done

    def _finish(self, raw: Future, done: Future) -> None:
        exc = raw.exception()
        if exc is not None:
            done.set_exception(exc)
            return
        ids, logps, finish = raw.result()
        with self._lock:
            self.stats.requests += 1
            self.stats.generated_tokens += len(ids)
        done.set_result(Generation(self.decode(ids), list(ids), list(logps), finish))

    def sample_rows(self, rows: list[list[int]], seeds: list[int],
                    spec: SamplingSpec) -> list[Generation]:
        """One generation per row with its own seed; all rows in flight at once."""
        futures = [self.submit(ids, s, spec) for ids, s in zip(rows, seeds, strict=True)]
        return [f.result() for f in futures]

    def generate(self, prompts, *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 repetition_penalty: float = 1.0, max_new_tokens: int = 128, seed: int = 0,
                 batch_size: int = 32) -> list[list[Generation]]:
        """``Policy.generate``'s contract on the engine (batch_size: the engine batches)."""
        ids = [list(p) if not isinstance(p, str) else self.encode(p) for p in prompts]
        seeds = row_seeds(ids, n, seed)
        rows = [p for p in ids for _ in range(n)]
        spec = SamplingSpec(temperature, top_p, repetition_penalty, max_new_tokens)
        flat = self.sample_rows(rows, seeds, spec)
        return [flat[i * n : (i + 1) * n] for i in range(len(ids))]

    def sync(self, checkpoint: str | os.PathLike) -> float:
        """Serve another checkpoint of the same model (after a GRPO/RFT update): full
        weights are reloaded in place, an adapter is hot-loaded under its new version.
        Returns the seconds it took."""
        path = Path(checkpoint)
        name, version = checkpoint_identity(path)
        if is_adapter_dir(path):
            if base_dir_of(path) != self.base_dir:
                raise EngineError(f"{path}: an adapter of another base than {self.base_dir}")
            self.lora = {"path": str(path.resolve()), "key": version}
            seconds = 0.0  # loaded with its first request
        else:
            if self.lora is not None:
                raise EngineError(f"{path}: full weights, but the engine serves adapters")
            seconds = self.engine.sync(str(path.resolve()), version)
            self.base_dir = path.resolve()
        self.checkpoint, self.name, self.model_version = path, name, version
        self.stats.sync_s.append(seconds)
        return seconds

    def close(self) -> None:
        self.engine.close()


def checkpoint_identity(path: Path) -> tuple[str, str]:
    """(model name, model_version) of a checkpoint directory, as Policy.load reads them."""
    vf, nf = path / VERSION_FILE, path / "model_name.txt"
    version = vf.read_text().strip() if vf.exists() else checkpoint_hash(path)
    name = nf.read_text().strip() if nf.exists() else ""
    return name or path.name, version


def open_engine_policy(checkpoint: str | os.PathLike, settings: EngineSettings,
                       quantize: str | None = None) -> EnginePolicy:
    """Start (or connect to) the engine for a checkpoint; full weights or base + adapter."""
    path = Path(checkpoint)
    if not (path / "config.json").exists() and not is_adapter_dir(path):
        raise FileNotFoundError(f"policy checkpoint not found: {path} (no config.json)")
    lora, base = None, path.resolve()
    if is_adapter_dir(path):
        base = base_dir_of(path)
        lora = {"path": str(path.resolve()), "key": checkpoint_identity(path)[1]}
    mode = quantize or (recorded_quantize(path) if lora else "none")
    if mode != "none":
        raise EngineError(
            f"policy.engine: {settings.engine} samples full-precision weights, but this "
            f"checkpoint is trained on a {mode} base (train.lora.quantize); use policy.engine: "
            "hf for QLoRA, or train.lora.quantize: none"
        )
    rank = int(json.loads((path / "adapter_config.json").read_text())["r"]) if lora else 0
    engine = connect(settings, base, lora_rank=rank, version=checkpoint_identity(base)[1])
    try:
        return EnginePolicy(path, engine, lora=lora, base_dir=base)
    except BaseException:
        engine.close()
        raise


_SHARED: dict[tuple, EnginePolicy] = {}
_SHARED_LOCK = threading.Lock()


def shared_engine_policy(checkpoint: str | os.PathLike, settings: EngineSettings,
                         quantize: str | None = None) -> EnginePolicy:
    """One engine per (checkpoint, settings) in this process: every rollout chunk of a
    stage (threads of one process) samples through it, so the engine batches them all."""
    key = (str(Path(checkpoint).resolve()), settings, quantize)
    with _SHARED_LOCK:
        if key not in _SHARED:
            if not _SHARED:
                atexit.register(close_shared)
            _SHARED[key] = open_engine_policy(checkpoint, settings, quantize)
            log.info("engine %s serves %s", settings.engine, checkpoint)
        return _SHARED[key]


def close_shared() -> list[dict]:
    """Close this process's shared engines; what each did (EngineStats.to_dict)."""
    with _SHARED_LOCK:
        engines = list(_SHARED.values())
        _SHARED.clear()
    out = []
    for policy in engines:
        out.append(policy.stats.to_dict())
        policy.close()
    return out


def open_policy(checkpoint: str | os.PathLike, policy_cfg, temperature: float, *,
                seed: int = 0, quantize: str | None = None):
    """What a sampling stage samples from: ``policy.engine: hf`` loads the checkpoint here
    (on ``policy.device``); an engine serves it (this process's shared one)."""
    if policy_cfg.engine == "hf":
        from codeloop.policy.model import Policy

        return Policy.load(checkpoint, quantize, policy_cfg.device)
    settings = EngineSettings.of(policy_cfg, temperature, seed)
    return shared_engine_policy(checkpoint, settings, quantize)


def engine_metrics(engine: str, stats: list[dict], seconds: float) -> dict:
    """The engine block of a stage's metrics: start and sync seconds, tokens per second
    over the stage's sampling time (the workers' engines, where a runner used several)."""
    tokens = sum(s["generated_tokens"] for s in stats)
    return {
        "engine": engine,
        "engines": len(stats),
        "start_s": round(max((s["start_s"] for s in stats), default=0.0), 3),
        "sync_s": [x for s in stats for x in s["sync_s"]],
        "requests": sum(s["requests"] for s in stats),
        "generated_tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else 0.0,
    }
