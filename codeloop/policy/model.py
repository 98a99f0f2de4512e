"""The policy: an HF causal LM + tokenizer with batched sampling and a content hash.

`build_embedded` builds the embedded default (a BPE tokenizer trained on the task corpus
and a tiny Llama- or GPT-2-shaped model; ``codeloop.policy.init`` calls it for the policy_init
stage, or loads a hub id / local path instead); a LoRA checkpoint loads base + adapter.
`Policy.generate` samples n completions per prompt in left-padded batches and returns,
for every generated token, the sampler log-prob under the *temperature-scaled* raw
logits: log_softmax(logits / T). That is the distribution the GRPO trainer recomputes
(as TRL does); top_p and repetition_penalty shape sampling but not these log-probs.

Determinism: every row draws from its own ``torch.Generator`` seeded from (call seed,
prompt tokens, rank among identical prompts, sample index), never from torch's
process-global RNG, so a row's sample does not depend on the other rows of its batch,
on how a caller chunks its prompts, or on which thread or process runs it.

Thread safety of loading: transformers' ``from_pretrained`` patches process-global
functions while it loads (``PreTrainedModel.tie_weights``, ``torch.nn.init.*``) and
restores what it saw on entry. Two loads that overlap in threads restore each other's
patches, leaving ``tie_weights`` a no-op for the rest of the process: every later load
keeps ``lm_head`` untied on the meta device or uninitialised (garbage, NaN). All loads
here hold ``LOAD_LOCK``, and a loaded model is checked (no meta tensors, tied embeddings
tied) before anyone samples from it. Where it runs: ``policy.device`` (codeloop.policy.device).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codeloop.policy import prompts as P
from codeloop.policy.device import cuda_generate_kwargs, model_device, resolve_device
from codeloop.policy.formats import format_for
from codeloop.policy.sampling import PolicyError, RowSampler, row_seed, row_seeds  # noqa: F401
from codeloop.schema import Task

VERSION_FILE = "model_version.txt"
# Files whose bytes define a checkpoint (model_version). Other files (README, logs)
# may sit beside them without changing the version.
_HASHED_SUFFIXES = (".safetensors", ".bin", ".json", ".txt", ".model", ".jinja")
log = logging.getLogger(__name__)
LOAD_LOCK = threading.Lock()  # one from_pretrained at a time per process; every loader holds it


def set_threads() -> int:
    """Intra-op threads for torch: ``CODELOOP_THREADS`` if set, else 1.

    Why 1: the embedded model's matmuls are too small to gain from a second thread, and
    on a 2-core machine shared with sandbox workers or another stage, OpenMP threads
    spin-wait on each other, so under load an SFT step is several times slower with two
    threads than with one. Set CODELOOP_THREADS=2 (or more) on idle machines or for hub models.
    """
    n = max(1, int(os.environ.get("CODELOOP_THREADS", "1") or 1))
    torch.set_num_threads(n)
    return n


def checkpoint_hash(path: str | os.PathLike) -> str:
    """sha256 over the names and bytes of a checkpoint's defining files."""
    h = hashlib.sha256()
    root = Path(path)
    for f in sorted(root.rglob("*")):
        if not f.is_file() or f.name == VERSION_FILE or f.suffix not in _HASHED_SUFFIXES:
            continue
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def check_loaded(model, source: str | os.PathLike) -> None:
    """Raise PolicyError unless every weight is real and tied embeddings are tied."""
    meta = [n for n, p in model.named_parameters() if p.is_meta]
    if meta:
        raise PolicyError(f"{source}: weights left on the meta device after loading: {meta[:3]}")
    if getattr(model.config, "tie_word_embeddings", False):
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
        if out is not None and out.weight.data_ptr() != inp.weight.data_ptr():
            raise PolicyError(
                f"{source}: output embeddings are not tied to the input embeddings although "
                "config.tie_word_embeddings is true (was from_pretrained run in two threads?)"
            )


@dataclass
class Generation:
    """One sampled completion: decoded text, token ids and per-token sampler log-probs."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"  # stop (EOS/end marker) | length | context (no room left)


class Tokenized:
    """Text to ids and back through ``self.tokenizer`` and ``self.format`` (a prompt
    format): what every sampler of a checkpoint has, whoever runs its model."""

    def encode(self, text: str) -> list[int]:
        """Token ids of text, no BOS/EOS added (templates carry their own markers)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def stop_ids(self) -> list[int]:
        """Token ids that end a turn: the format's (EOS, end marker, end-of-turn tokens)."""
        return self.format.stop_ids()


class Policy(Tokenized):
    """A causal LM and its tokenizer, loaded from (and saved to) one directory."""

    engine_kind = "hf"  # what samples it (codeloop.policy.engine: an engine's policies differ)

    def __init__(self, model, tokenizer, name: str = "", model_version: str = ""):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or "policy"
        self.model_version = model_version
        model.eval()  # sampling and its log-probs must not see dropout
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.format = format_for(tokenizer)  # compact | chat | base (codeloop.policy.formats)

    @classmethod
    def load(
        cls, path: str | os.PathLike, quantize: str | None = None, device: str | None = None
    ) -> Policy:
        """Load a saved checkpoint directory (offline; never reaches a hub).

        quantize ("none" | "4bit" | "8bit", codeloop.policy.lora.QUANTIZE) loads the
        weights quantized by bitsandbytes (QLoRA's frozen base); None means an adapter's
        recorded mode for its base, full precision for a full checkpoint. device: a
        ``policy.device`` value (codeloop.policy.device), resolved before anything loads;
        None leaves the model where from_pretrained puts it (the CPU when unquantized).
        """
        path = Path(path)
        dev = resolve_device(device) if device is not None else None
        if (path / "adapter_config.json").exists():  # LoRA: base + adapter (policy.lora)
            return cls._load_adapter(path, quantize, dev)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"policy checkpoint not found: {path} (no config.json)")
        from codeloop.policy.lora import keep_cpu_layout, load_kwargs

        set_threads()
        extra = load_kwargs(quantize or "none")
        if extra and dev is not None:  # bitsandbytes quantizes as it places, on dev
            extra["device_map"] = {"": dev}
        with LOAD_LOCK:  # the lazy transformers import is not thread-safe either
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **extra)
        check_loaded(model, path)
        keep_cpu_layout(model)  # quantized: one 4-bit layout for sampling and training
        if dev is not None and not extra:
            model.to(dev)
        model.eval()
        vf = path / VERSION_FILE
        version = vf.read_text().strip() if vf.exists() else checkpoint_hash(path)
        nf = path / "model_name.txt"
        name = nf.read_text().strip() if nf.exists() else ""
        policy = cls(model, tok, name=name or path.name, model_version=version)
        policy.lora_quantize = quantize or "none"
        log.info("loaded %s on %s (policy.device %s)", path, policy.device, device or "unset")
        return policy

    @classmethod
    def _load_adapter(cls, path: Path, quantize: str | None, dev) -> Policy:
        from codeloop.policy.lora import attach_adapter, base_dir_of, recorded_quantize

        base_dir = base_dir_of(path)
        base = cls.load(base_dir, quantize or recorded_quantize(path), str(dev) if dev else None)
        with LOAD_LOCK:
            from transformers import AutoTokenizer

            model = attach_adapter(base.model, base.model_version, path, base_dir)
            if dev is not None and base.lora_quantize == "none":  # bnb placed its own
                model.to(dev)  # the adapter's weights beside its base's
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        nf = path / "model_name.txt"
        name = nf.read_text().strip() if nf.exists() else path.name
        policy = cls(model, tok, name=name, model_version=(path / VERSION_FILE).read_text().strip())
        policy.lora_base, policy.lora_base_version = base_dir, base.model_version
        policy.lora_quantize = base.lora_quantize
        log.info("loaded adapter %s on %s", path, policy.device)
        return policy

    def save(self, path: str | os.PathLike, state_dict: dict | None = None) -> str:
        """Save model + tokenizer; returns (and writes) the content-hash model_version.

        ``state_dict``: the weights to write instead of the model's own (a sharded
        model's, gathered to this process: codeloop.train.sharding).
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path, safe_serialization=True, state_dict=state_dict)
        self.tokenizer.save_pretrained(path)
        (path / "model_name.txt").write_text(self.name + "\n")
        if getattr(self, "lora_base", None):  # an adapter: where its base lives
            from codeloop.policy.lora import write_base_pointer

            write_base_pointer(self, path)
        self.model_version = checkpoint_hash(path)
        (path / VERSION_FILE).write_text(self.model_version + "\n")
        return self.model_version

    @property
    def device(self) -> torch.device:
        """Where the model's forward passes run (its first parameter's device)."""
        return model_device(self.model)

    @property
    def max_context(self) -> int:
        cfg = self.model.config
        return int(
            getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", 2048)
        )

    @torch.no_grad()
    def generate(
        self,
        prompts: list[str] | list[list[int]],
        *,
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        max_new_tokens: int = 128,
        seed: int = 0,
        batch_size: int = 32,
    ) -> list[list[Generation]]:
        """Sample n completions per prompt (text or token ids); result[i][j] is sample j of prompt i.

        Sequences are grouped by length into left-padded batches of `batch_size`.
        Deterministic for the same inputs, arguments and seed; a row's sample depends
        only on its own prompt, its rank among identical prompts, j and the seed.
        """
        ids = [list(p) if not isinstance(p, str) else self.encode(p) for p in prompts]
        flat = [i for i in range(len(ids)) for _ in range(n)]
        seeds = row_seeds(ids, n, seed)
        order = sorted(range(len(flat)), key=lambda j: len(ids[flat[j]]))
        results: list[Generation | None] = [None] * len(flat)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = [ids[flat[j]] for j in chunk]
            sampler = RowSampler(
                [seeds[j] for j in chunk], temperature, top_p, repetition_penalty,
                f"{self.name} ({self.model_version[:12] or 'unsaved'})",
            )
            was_training = self.model.training  # a trainer's model (gradient checkpointing)
            self.model.eval()  # HF drops the KV cache while checkpointing in train mode
            try:
                outs = self._generate_batch(batch, sampler, temperature, max_new_tokens)
            finally:
                self.model.train(was_training)
            for j, g in zip(chunk, outs, strict=True):
                results[j] = g
        grouped: list[list[Generation]] = [[] for _ in ids]
        for j, g in enumerate(results):
            grouped[flat[j]].append(g)
        return grouped

    def _generate_batch(self, batch, sampler, temperature, max_new_tokens):
        longest = max(len(b) for b in batch)
        room = min(max_new_tokens, self.max_context - longest)
        if room <= 0:
            return [Generation("", finish_reason="context") for _ in batch]
        from transformers import GenerationConfig, LogitsProcessorList

        pad = self.tokenizer.pad_token_id
        dev = self.model.device
        input_ids = torch.tensor([[pad] * (longest - len(b)) + b for b in batch], device=dev)
        mask = torch.tensor([[0] * (longest - len(b)) + [1] * len(b) for b in batch], device=dev)
        stops = self.stop_ids()
        kw = cuda_generate_kwargs(self.model)
        if self.format.stop_strings():  # markers that are not single tokens: stop on text
            kw.update(stop_strings=self.format.stop_strings(), tokenizer=self.tokenizer)
        # Greedy over scores in which RowSampler has already left one token per row:
        # HF's own sampling would draw from the process-global RNG. A fresh generation
        # config: a hub model's own (repetition_penalty 1.1, top_k 20, ...) would otherwise
        # reshape the logits before RowSampler sees them.
        gen_cfg = GenerationConfig(
            do_sample=False, max_new_tokens=room, eos_token_id=stops, pad_token_id=pad,
            return_dict_in_generate=True,
        )
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            generation_config=gen_cfg,
            logits_processor=LogitsProcessorList([sampler]),
            **kw,
        )
        seqs = out.sequences[:, longest:].cpu()  # (B, T)
        logps = torch.stack(sampler.logps, dim=1)  # (B, T) log_softmax(raw / T) of picks
        gens = []
        for row, lp in zip(seqs.tolist(), logps.tolist(), strict=True):
            cut = next((k + 1 for k, t in enumerate(row) if t in stops), None)
            toks = row[:cut] if cut else row
            reason = "stop" if cut else "length"
            gens.append(Generation(self.decode(toks), toks, lp[: len(toks)], reason))
        return gens


def _function_docs(t: Task) -> list[str]:
    return [P.task_prompt(t) + P.completion_text(t.reference_solution, P.signature(t))]


def _repo_docs(t: Task) -> list[str]:
    """Statement and patches; the repository's files come in the extra texts."""
    return [P.TASK + t.prompt + "\n" + P.TOOL, t.patch, t.test_patch]


# What a task of each kind adds to the tokenizer's corpus.
CORPUS_DOCS = {"function": _function_docs, "repo": _repo_docs}


def _corpus(tasks: list[Task], extra_texts: list[str] | None = None) -> list[str]:
    docs = list(extra_texts or [])  # e.g. repository tasks' files and agent episodes
    for t in tasks:
        docs += CORPUS_DOCS[t.kind](t)
    # Feedback vocabulary, so multi-turn text does not fall apart into bytes.
    for status in ("failed", "runtime_error", "syntax_error", "timeout", "no_code"):
        docs.append(P.feedback_text(status, "assert f(1) == 2", "3", "NameError: name 'x'"))
    return docs


def train_tokenizer(tasks: list[Task], vocab_size: int, extra_texts: list[str] | None = None):
    """A byte-level BPE tokenizer trained on prompts + reference solutions (+ extra texts)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(P.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(tasks, extra_texts), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=P.END, pad_token=P.PAD, padding_side="left"
    )


def build_embedded(params, tasks: list[Task], extra_texts: list[str] | None = None) -> Policy:
    """Tokenizer + a freshly initialised tiny GPT-2 (no network, seconds on CPU)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = params.policy_init
    if cfg.n_embd % cfg.n_head:
        raise ValueError(
            f"policy_init.n_embd ({cfg.n_embd}) must be divisible by policy_init.n_head ({cfg.n_head})"
        )
    if not tasks:
        raise ValueError("policy_init: no tasks to train the tokenizer on")
    torch.manual_seed(cfg.seed)
    tok = train_tokenizer(tasks, cfg.vocab_size, extra_texts)
    if cfg.arch == "llama":
        return Policy(_embedded_llama(cfg, tok), tok, name="codeloop-embedded-llama")
    gcfg = GPT2Config(
        vocab_size=len(tok),
        n_positions=cfg.n_positions,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        # No dropout: GRPO ratios compare the trainer's log-probs with the sampler's,
        # and dropout noise would make them differ even before any update (TRL does the same).
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return Policy(GPT2LMHeadModel(gcfg), tok, name="codeloop-embedded-gpt2")


def _embedded_llama(cfg, tok):
    """The tiny model with rotary positions: attention by relative offset, which a head that
    copies the token after an earlier match (the edit's old text from the file it read) needs;
    GPT-2's learned absolute positions left that at chance on digits (bench/agent_copy.py)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    lcfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=cfg.n_embd,
        intermediate_size=-(-8 * cfg.n_embd // 3 // 32) * 32,  # SwiGLU at GPT-2's MLP size
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_head,
        max_position_embeddings=cfg.n_positions,
        tie_word_embeddings=True,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        attention_dropout=0.0,  # (no dropout: see GPT-2's above)
    )
    return LlamaForCausalLM(lcfg)
