"""LoRA adapters via peft: train, save, load and merge a base + adapter policy.

An adapter checkpoint holds only the adapter (``adapter_config.json``,
``adapter_model.safetensors``), the tokenizer and two pointer files: ``lora_base.txt``
(the base checkpoint's path *relative to the adapter directory*, so a promoted copy in
models/iter-NNNN still finds models/init) and ``lora_base_version.txt`` (the base's
model_version, checked on load: an adapter on another base is refused, never silently
applied). `codeloop.policy.model.Policy.load` loads base + adapter transparently (with
`base_dir_of` and `attach_adapter` here), so rollout and evaluate need nothing special;
`codeloop.policy.model.merge_lora_checkpoint` writes the merged full model (promotion
with ``train.lora.merge_on_promote``). This module never imports the model module (it
imports this one), so the policy package has no import cycle.

The KL reference of a LoRA run is the base with the adapter disabled
(``PeftModel.disable_adapter``), as TRL does: no second copy of the model in memory.
"""

from __future__ import annotations

import os
from pathlib import Path

from codeloop.policy.sampling import PolicyError

ADAPTER_CONFIG = "adapter_config.json"
BASE_FILE = "lora_base.txt"
BASE_VERSION_FILE = "lora_base_version.txt"


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
