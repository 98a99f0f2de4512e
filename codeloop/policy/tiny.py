"""Tiny random-initialised models of real families, built offline (tests and bench/).

`save_tiny(out_dir, family)` writes a Qwen2 or Llama model (transformers config
classes, 1-2 layers, small vocab) and a fast tokenizer with a real jinja chat template
(special tokens, a tool-call syntax) to a local directory, so ``policy.model: <dir>``
exercises the chat path of every stage with no download. Sizes can be raised to the
shape of a real checkpoint (``qwen2_config(**QWEN25_05B)``, ``QWEN25_15B``) for
benchmarks.

The two templates differ on purpose: Qwen's ChatML (``<|im_start|>role ... <|im_end|>``,
tools in the system turn, ``<tool_call>`` JSON in the reply, tool results as
``<tool_response>`` inside a user turn) and Llama 3's header style
(``<|start_header_id|>role<|end_header_id|> ... <|eot_id|>``, role ``ipython`` for tool
results), so the prompt code cannot lean on one family's layout.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

FAMILIES = ("qwen2", "llama")

# Qwen2.5-Coder-0.5B's shape (its config.json, 494M parameters with its 151936-token
# vocabulary); the tiny tokenizer's ids are all below that, so prompts stay valid.
QWEN25_05B = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}

# Qwen2.5-Coder-1.5B's shape (its config.json, 1.54B parameters, the same vocabulary).
QWEN25_15B = {
    "vocab_size": 151936,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}

CHATML_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    '{{- \'\\n</tools>\\nCall a tool as <tool_call>{"name": ..., "arguments": ...}'
    "</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' and loop.first %}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}"
    "{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for call in m.tool_calls %}"
    "{{- '<tool_call>' + (call.function | tojson) + '</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if tools %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- 'Environment: ipython\\nTools:' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '<|eot_id|>' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + messages[0].content + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' and loop.first %}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- for call in m.tool_calls %}{{- call.function | tojson }}{%- endfor %}"
    "{{- '<|eom_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)

_SPECIAL = {
    "qwen2": {
        "tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "bos": None,
        "template": CHATML_TEMPLATE,
    },
    "llama": {
        "tokens": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|finetune_right_pad_id|>",
        ],
        "eos": "<|eot_id|>",
        "pad": "<|finetune_right_pad_id|>",
        "bos": "<|begin_of_text|>",
        "template": LLAMA3_TEMPLATE,
    },
}

_CORPUS = [
    "You are a careful Python programmer. Answer with one ```python code block.",
    "Write a function that returns the sum of a list of integers.",
    "```python\ndef add(a, b):\n    return a + b\n```",
    "def f(xs):\n    out = []\n    for x in xs:\n        if x % 2 == 0:\n            out.append(x)\n    return out\n",
    "assert f([1, 2, 3]) == [2]\nstatus: failed\nfailing test: got: error: NameError",
    "Tests:\nassert solve(3) == 6\nThe previous code failed. Fix it.",
    'import json\nprint(json.dumps({"name": "run_tests", "arguments": {"code": "x"}}))',
]


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown tiny model family {family!r}; allowed: {', '.join(FAMILIES)}")


def build_tokenizer(family: str, vocab_size: int = 512, extra_texts: list[str] | None = None):
    """A byte-level BPE fast tokenizer with the family's special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    _check_family(family)
    spec = _SPECIAL[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=spec["tokens"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS + list(extra_texts or []), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=spec["eos"],
        pad_token=spec["pad"],
        bos_token=spec["bos"],
        padding_side="left",
    )
    fast.chat_template = spec["template"]
    return fast


_TINY = {  # a few layers: real architectures at test speed
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
}


def _config(cls, tok, tie: bool, bos_token_id, sizes: dict):
    kw = {**_TINY, "tie_word_embeddings": tie, **sizes}
    return cls(
        vocab_size=kw.pop("vocab_size", len(tok)),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=bos_token_id,
        attention_dropout=0.0,
        **kw,
    )


def qwen2_config(tok, **sizes):
    """A Qwen2Config for tok; sizes override the tiny defaults (e.g. **QWEN25_05B)."""
    from transformers import Qwen2Config

    return _config(Qwen2Config, tok, True, tok.eos_token_id, sizes)


def llama_config(tok, **sizes):
    """A LlamaConfig for tok (untied head, as Llama 3 8B); sizes override the defaults."""
    from transformers import LlamaConfig

    return _config(LlamaConfig, tok, False, tok.bos_token_id, sizes)


def build_model(family: str, tok, seed: int = 0, **sizes):
    """A random-initialised causal LM of the family, sized for tok's vocabulary."""
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    _check_family(family)
    torch.manual_seed(seed)
    if family == "qwen2":
        return Qwen2ForCausalLM(qwen2_config(tok, **sizes))
    return LlamaForCausalLM(llama_config(tok, **sizes))


def save_tiny(
    out_dir: str | os.PathLike, family: str, seed: int = 0, vocab_size: int = 512, **sizes
) -> Path:
    """Write a tiny model + chat tokenizer of the family to out_dir; returns the path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(family, vocab_size)
    model = build_model(family, tok, seed=seed, **sizes)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
