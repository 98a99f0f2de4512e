"""LoRA adapters via peft: train, save, load and merge a base + adapter policy.

An adapter checkpoint holds only the adapter (``adapter_config.json``,
``adapter_model.safetensors``), the tokenizer and two pointer files: ``lora_base.txt``
(the base checkpoint's path *relative to the adapter directory*, so a promoted copy in
models/iter-NNNN still finds models/init) and ``lora_base_version.txt`` (the base's
model_version, checked on load: an adapter on another base is refused, never silently
applied). `codeloop.policy.model.Policy.load` loads base + adapter transparently (with
`base_dir_of` and `attach_adapter` here), so rollout and evaluate need nothing special;
`codeloop.ops.promote.merge_lora_checkpoint` writes the merged full model (promotion
with ``train.lora.merge_on_promote``). This module never imports the model module (it
imports this one), so the policy package has no import cycle.

The KL reference of a LoRA run is the base with the adapter disabled
(``PeftModel.disable_adapter``), as TRL does: no second copy of the model in memory.

QLoRA (``train.lora.quantize``): the base is loaded quantized by bitsandbytes through
transformers' ``BitsAndBytesConfig`` (4bit: NF4, double quantisation, bf16 compute) and
prepared with ``peft.prepare_model_for_kbit_training``; the adapters stay fp32. The
adapter checkpoint records the settings in ``lora_quantization.json`` (hashed into its
model_version), and every load of that checkpoint quantizes its base the same way, so
rollout samples the very policy that was trained. Merging loads the base unquantized
(the usual QLoRA merge: adapters added to the full-precision weights). bitsandbytes'
CPU backend runs both modes on CPU (0.50, torch 2.13), which is what the tests use.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from codeloop.policy.sampling import PolicyError

ADAPTER_CONFIG = "adapter_config.json"
BASE_FILE = "lora_base.txt"
BASE_VERSION_FILE = "lora_base_version.txt"
QUANT_FILE = "lora_quantization.json"
QUANTIZE = ("none", "4bit", "8bit")
# bitsandbytes' CPU backend logs, when peft or we first import it, a failed fetch of an
# optional kernel from the hub (offline here) and falls back to its own: nothing to act on.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


def is_adapter_dir(path: str | os.PathLike) -> bool:
    """True for a checkpoint that holds an adapter rather than full weights."""
    return (Path(path) / ADAPTER_CONFIG).exists()


def is_peft(model) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def enable_lora(policy, cfg, base_dir: str | os.PathLike | None = None) -> None:
    """Make policy.model a trainable LoRA model: wrap a plain model in a fresh adapter
    (``cfg``: codeloop.config.LoraConfig), or unfreeze a loaded adapter's weights.

    base_dir is where the base checkpoint lives (written as the adapter's pointer on
    save); None for an in-process policy that will not be saved as an adapter.
    """
    from peft import LoraConfig, get_peft_model

    if is_quantized(policy.model):  # freezes the base, upcasts its norms for stable grads
        from peft import prepare_model_for_kbit_training

        # The trainer switches checkpointing itself (non-reentrant), as for plain LoRA.
        policy.model = prepare_model_for_kbit_training(
            policy.model, use_gradient_checkpointing=False
        )
    if is_peft(policy.model):
        for name, p in policy.model.named_parameters():
            p.requires_grad_("lora_" in name)
        return
    if base_dir is not None:
        policy.lora_base = Path(base_dir).resolve()
        policy.lora_base_version = policy.model_version
    peft_cfg = LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        policy.model = get_peft_model(policy.model, peft_cfg)
    except ValueError as exc:  # peft: "Target modules ... not found in the base model"
        raise ValueError(f"train.lora.target_modules: {exc}") from None


def write_base_pointer(policy, out: str | os.PathLike) -> None:
    """The adapter's pointer files (before the checkpoint is hashed)."""
    base = getattr(policy, "lora_base", None)
    if base is None or not is_peft(policy.model):
        return
    out = Path(out).resolve()
    (out / BASE_FILE).write_text(os.path.relpath(base, out) + "\n")
    (out / BASE_VERSION_FILE).write_text(policy.lora_base_version + "\n")
    quantize = getattr(policy, "lora_quantize", "none")
    if quantize != "none":  # plain LoRA checkpoints keep their bytes (and versions)
        (out / QUANT_FILE).write_text(json.dumps(quant_settings(quantize), indent=2) + "\n")


def base_dir_of(path: Path) -> Path:
    """The base checkpoint an adapter directory points at (resolved)."""
    pointer = path / BASE_FILE
    if not pointer.exists():
        raise PolicyError(f"{path}: adapter checkpoint without {BASE_FILE} (which base?)")
    return (path / pointer.read_text().strip()).resolve()


def attach_adapter(base_model, base_version: str, path: Path, base_dir: Path):
    """base_model with the adapter at path applied (frozen); refuses another base."""
    from peft import PeftModel

    want = (path / BASE_VERSION_FILE).read_text().strip()
    if base_version != want:
        raise PolicyError(
            f"{path}: adapter trained on base {want[:12]} but {base_dir} is "
            f"{base_version[:12]}; refusing to apply it to another base"
        )
    return PeftModel.from_pretrained(base_model, path)


def is_quantized(model) -> bool:
    """True for a model (or a peft model on a base) loaded quantized by bitsandbytes."""
    return bool(getattr(model, "is_quantized", False))


def quant_settings(quantize: str) -> dict:
    """The recorded bitsandbytes settings of a quantize mode (lora_quantization.json)."""
    if quantize == "4bit":
        return {"quantize": "4bit", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"}
    if quantize == "8bit":
        return {"quantize": "8bit", "load_in_8bit": True}
    raise ValueError(f"train.lora.quantize: {quantize!r} is not one of {QUANTIZE}")


def recorded_quantize(path: Path) -> str:
    """The quantize mode an adapter checkpoint was trained with ("none" without a record)."""
    f = path / QUANT_FILE
    if not f.exists():
        return "none"
    try:
        record = json.loads(f.read_text())
        mode = record["quantize"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PolicyError(f"{f}: unreadable quantization record ({exc!r})") from None
    if mode not in QUANTIZE[1:]:
        raise PolicyError(f"{f}: quantize {mode!r} is not one of {QUANTIZE[1:]}")
    if record != quant_settings(mode):  # never load it quantized otherwise than trained
        raise PolicyError(
            f"{f}: recorded settings {record} differ from this codeloop's {mode} "
            f"({quant_settings(mode)}); load it with the codeloop that trained it"
        )
    return mode


def load_kwargs(quantize: str) -> dict:
    """from_pretrained's extra arguments for a quantize mode ({} for none)."""
    if quantize == "none":
        return {}
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise PolicyError(
            f"train.lora.quantize: {quantize} needs bitsandbytes (pip install 'codeloop[qlora]')"
        ) from None
    import torch
    from transformers import BitsAndBytesConfig

    settings = {k: v for k, v in quant_settings(quantize).items() if k != "quantize"}
    if "bnb_4bit_compute_dtype" in settings:
        settings["bnb_4bit_compute_dtype"] = getattr(torch, settings["bnb_4bit_compute_dtype"])
    return {"quantization_config": BitsAndBytesConfig(**settings)}


def training_quantize(policy_dir: str | os.PathLike, cfg) -> str | None:
    """The quantize mode train loads policy_dir with (cfg: train.lora); None = as recorded.

    An adapter is never continued on a base quantized otherwise than it was trained on:
    its samples came from that base, so switching would train another policy.
    """
    if not cfg.r:
        return None
    path = Path(policy_dir)
    if is_adapter_dir(path) and recorded_quantize(path) != cfg.quantize:
        raise ValueError(
            f"train.lora.quantize is {cfg.quantize} but {path} is an adapter trained on a "
            f"{recorded_quantize(path)} base; keep the mode, or promote merged "
            "(train.lora.merge_on_promote) before switching"
        )
    return cfg.quantize


def keep_cpu_layout(model) -> None:
    """Stop bitsandbytes repacking 4-bit weights for its AVX512-BF16 CPU inference kernel.

    Why: a Linear4bit in eval mode repacks its weight on the first no-grad CPU forward, and
    (bitsandbytes 0.50) a forward with gradients on a repacked weight then fails (in-place
    add on a leaf); the repacked kernel's log-probs also differ from the training path's
    (visibly, per token, on the tiny Qwen2), so sampler and trainer would
    disagree. One layout for both keeps GRPO's ratio at 1 before the update. No effect on GPU.
    """
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
