"""QLoRA (train.lora.quantize) for real on CPU, through bitsandbytes' CPU backend, on a
tiny random Qwen2 with a chat tokenizer: the base loads as NF4 4-bit, only the fp32
adapters move, the KL reference is the adapter-disabled quantized base, the checkpoint
records the quantization, and reloading it quantizes the base the same way and samples."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sys

import pytest
import torch

from codeloop.config import LoraConfig, TrainConfig
from codeloop.ops.promote import merge_lora_checkpoint
from codeloop.policy.lora import QUANT_FILE, enable_lora, training_quantize
from codeloop.policy.model import Policy, PolicyError
from codeloop.policy.tiny import save_tiny
from codeloop.train.trainer import GRPOUpdater, collate, forward_logps, prepare_batch, train_grpo
from tests._tiny_policy import group

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes (codeloop[qlora]) not installed")

QLORA = LoraConfig(r=4, alpha=8.0, quantize="4bit")
CFG = TrainConfig(
    steps=2, lr=1e-2, beta=0.05, micro_batch_size=4, grad_accum=1,
    keep_optimizer_state=False, lora=QLORA,
)


def _linear4bit(model) -> list:
    return [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    raw = save_tiny(tmp_path_factory.mktemp("raw"), "qwen2")
    out = tmp_path_factory.mktemp("models") / "init"
    Policy.load(raw).save(out)  # a full-precision codeloop checkpoint, like models/init
    return out


@pytest.fixture(scope="module")
def trajs(base_dir):
    policy = Policy.load(base_dir)
    return group(policy) + group(policy, key="k2")


@pytest.fixture(scope="module")
def trained(base_dir, trajs):
    policy = Policy.load(base_dir, quantize="4bit")
    items, _ = prepare_batch(trajs, CFG, policy.max_context)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    updater = GRPOUpdater(policy, CFG)
    updater.fit(items)
    return updater, before


@pytest.fixture(scope="module")
def candidate(base_dir, trajs):
    out = base_dir.parent / "candidate"
    summary = train_grpo(base_dir, trajs, CFG, out)
    return out, summary


def test_the_base_loads_as_nf4_with_double_quant_and_bf16_compute(base_dir):
    layers = _linear4bit(Policy.load(base_dir, quantize="4bit").model)
    assert layers
    state = layers[0].weight.quant_state
    assert state.quant_type == "nf4" and state.nested  # nested = double quantisation
    assert all(m.compute_dtype == torch.bfloat16 for m in layers)


def test_qlora_training_changes_only_the_fp32_adapter_weights(trained):
    updater, before = trained
    after = {n.replace("base_model.model.", "").replace(".base_layer", ""): p
             for n, p in updater.peft.named_parameters() if "lora_" not in n}
    assert all(torch.equal(after[n], before[n]) for n in before)
    lora = [p for n, p in updater.peft.named_parameters() if "lora_" in n]
    assert lora and all(p.dtype == torch.float32 and p.requires_grad for p in lora)
    assert any(p.abs().sum() > 0 for n, p in updater.peft.named_parameters() if "lora_B" in n)


def test_the_qlora_kl_reference_is_the_adapter_disabled_quantized_base(base_dir, trained, trajs):
    updater, _ = trained
    mb = collate(trajs[:4], updater.pad_id)
    base = Policy.load(base_dir, quantize="4bit").model
    with torch.no_grad():
        want, _ = forward_logps(base, mb)
        trained_logps, _ = forward_logps(updater.peft, mb)
    assert updater.ref is None  # no second copy of the model
    assert torch.allclose(updater.ref_logps(mb), want, atol=1e-5)
    assert not torch.allclose(trained_logps, want, atol=1e-3)  # the adapter did move


def test_a_qlora_checkpoint_stores_the_adapter_and_its_quantization(candidate):
    out, summary = candidate
    assert summary["lora"] and (out / "adapter_model.safetensors").exists()
    assert not (out / "model.safetensors").exists()
    record = json.loads((out / QUANT_FILE).read_text())
    assert record == {"quantize": "4bit", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                      "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"}


def test_a_reloaded_qlora_checkpoint_quantizes_its_base_and_samples(candidate):
    out, summary = candidate
    policy = Policy.load(out)  # as rollout and evaluate load it: no quantize argument
    assert _linear4bit(policy.model) and policy.model_version == summary["model_version"]
    [[gen]] = policy.generate([policy.encode("def f(x):")], max_new_tokens=5, seed=0)
    assert len(gen.token_ids) > 0 and all(torch.isfinite(torch.tensor(gen.logprobs)))


def test_rollout_samples_the_policy_the_trainer_saved(base_dir, trajs, tmp_path):
    cfg = CFG.model_copy(update={"steps": 1})
    policy = Policy.load(base_dir, quantize="4bit")
    enable_lora(policy, cfg.lora, base_dir=base_dir)  # as train_grpo does
    updater = GRPOUpdater(policy, cfg)
    updater.fit(prepare_batch(trajs, cfg, policy.max_context)[0])
    policy.save(tmp_path / "saved")
    mb = collate(trajs[:4], updater.pad_id)
    with torch.no_grad():
        trained_logps, _ = forward_logps(updater.peft, mb)
        reloaded, _ = forward_logps(Policy.load(tmp_path / "saved").model, mb)
    assert torch.allclose(reloaded, trained_logps, atol=1e-5)


def test_continuing_a_qlora_adapter_at_another_precision_is_refused(candidate, trajs, tmp_path):
    out, _ = candidate
    cfg = CFG.model_copy(update={"lora": QLORA.model_copy(update={"quantize": "none"})})
    with pytest.raises(ValueError, match="adapter trained on a 4bit base"):
        train_grpo(out, trajs, cfg, tmp_path / "next")


def test_merging_a_qlora_checkpoint_writes_a_full_precision_model(base_dir, candidate, tmp_path):
    out, _ = candidate
    merge_lora_checkpoint(out, tmp_path / "merged")
    ids = torch.tensor([Policy.load(base_dir).encode("def f(x):\n    return x")])
    with torch.no_grad():
        adapted = Policy.load(out, quantize="none").model(input_ids=ids).logits
        merged_policy = Policy.load(tmp_path / "merged")
        merged = merged_policy.model(input_ids=ids).logits
    assert not (tmp_path / "merged" / QUANT_FILE).exists()
    assert not _linear4bit(merged_policy.model)
    assert torch.allclose(adapted, merged, atol=1e-4)


def test_an_8bit_base_trains_its_adapter_and_reloads_8bit(base_dir, trajs, tmp_path):
    cfg = CFG.model_copy(update={"steps": 1, "lora": QLORA.model_copy(update={"quantize": "8bit"})})
    summary = train_grpo(base_dir, trajs, cfg, tmp_path / "c8")
    policy = Policy.load(tmp_path / "c8")
    assert summary["lora"] and math.isfinite(summary["loss"])
    assert any(isinstance(m, bnb.nn.Linear8bitLt) for m in policy.model.modules())


def test_a_full_precision_policy_under_a_quantize_config_is_refused(base_dir):
    with pytest.raises(ValueError, match="loaded in full precision"):
        GRPOUpdater(Policy.load(base_dir), CFG)


def test_quantize_without_adapters_is_a_config_error():
    with pytest.raises(ValueError, match="needs r > 0"):
        LoraConfig(r=0, quantize="4bit")


def test_quantize_without_bitsandbytes_names_the_extra_to_install(base_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # import bitsandbytes -> ImportError
    with pytest.raises(PolicyError, match=r"codeloop\[qlora\]"):
        Policy.load(base_dir, quantize="4bit")


def test_sampler_and_trainer_log_probs_agree_on_a_quantized_base(base_dir):
    policy = Policy.load(base_dir, quantize="4bit")
    prompt = policy.encode("def f(x):")
    [[gen]] = policy.generate([prompt], max_new_tokens=12, seed=0)
    enable_lora(policy, CFG.lora)  # the trainer's view: adapters at zero, gradients on
    traj = dataclasses.replace(
        group(policy)[0],
        token_ids=prompt + gen.token_ids,
        loss_mask=[0] * len(prompt) + [1] * len(gen.token_ids),
        sample_logprobs=[0.0] * len(prompt) + gen.logprobs,
    )
    mb = collate([traj], 0)
    logps, _ = forward_logps(policy.model, mb)
    got = logps[0][mb["mask"][0].bool()]
    assert torch.allclose(got, torch.tensor(gen.logprobs), atol=1e-4)


def test_a_checkpoint_recorded_with_other_quantization_settings_is_refused(candidate):
    out, _ = candidate
    moved = out.parent / "tampered"  # beside it: the relative base pointer still resolves
    shutil.copytree(out, moved)
    record = json.loads((moved / QUANT_FILE).read_text())
    (moved / QUANT_FILE).write_text(json.dumps({**record, "bnb_4bit_quant_type": "fp4"}))
    with pytest.raises(PolicyError, match="differ from this codeloop"):
        Policy.load(moved)


def _first_night_gap(base_dir, quantize) -> float:
    """Largest |sampler - trainer| log-prob over a rollout of the full-precision init
    loaded with ``quantize``, the trainer scoring it on the base train loads (4-bit)."""
    from codeloop.config import RolloutConfig, RunnerConfig, SandboxConfig
    from codeloop.data.generator import generate_tasks
    from codeloop.rollout.context import EpisodeContext
    from codeloop.rollout.scaleout import PolicySource, fan_out_rollout

    rollout = RolloutConfig(samples_per_task=2, max_steps=1, max_new_tokens=12, batch_size=8)
    trajs = fan_out_rollout(
        generate_tasks(2, seed=5, max_depth=1), PolicySource(str(base_dir), quantize=quantize),
        EpisodeContext.of(rollout, SandboxConfig(), "t"), sandbox=SandboxConfig(),
        runner=RunnerConfig(),
    )
    trainer = Policy.load(base_dir, training_quantize(base_dir, CFG.lora))
    enable_lora(trainer, CFG.lora)  # the trainer's view: adapters at zero
    mb = collate(trajs, trainer.tokenizer.pad_token_id)
    with torch.no_grad():
        logps, _ = forward_logps(trainer.model, mb)
    on = mb["mask"].bool()
    return (logps[on] - mb["old_logps"][on]).abs().max().item()


def test_the_first_nights_rollout_samples_the_4bit_base_the_trainer_scores(base_dir):
    # base_dir is full precision, like models/init: rollout loads it as train will.
    assert _first_night_gap(base_dir, training_quantize(base_dir, CFG.lora)) < 1e-4
