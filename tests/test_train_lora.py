"""LoRA via peft in the GRPO trainer, on a tiny random Qwen2 with a chat tokenizer:
only adapter weights move, the KL reference is the adapter-disabled base, checkpoints
hold the adapter, and a promoted (copied or merged) adapter reloads and samples."""

from __future__ import annotations

import shutil

import pytest
import torch

from codeloop.config import LoraConfig, TrainConfig
from codeloop.ops.promote import merge_lora_checkpoint
from codeloop.policy.lora import BASE_VERSION_FILE
from codeloop.policy.model import Policy, PolicyError
from codeloop.policy.tiny import save_tiny
from codeloop.train.trainer import GRPOUpdater, collate, forward_logps, prepare_batch, train_grpo
from tests._tiny_policy import group

CFG = TrainConfig(
    steps=2, lr=1e-2, beta=0.05, micro_batch_size=4, grad_accum=1,
    keep_optimizer_state=False, lora=LoraConfig(r=4, alpha=8.0),
)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    raw = save_tiny(tmp_path_factory.mktemp("raw"), "qwen2")
    out = tmp_path_factory.mktemp("models") / "init"
    Policy.load(raw).save(out)  # a codeloop checkpoint (model_version.txt) like models/init
    return out


@pytest.fixture(scope="module")
def trained(base_dir):
    policy = Policy.load(base_dir)
    trajs = group(policy) + group(policy, key="k2")
    items, _ = prepare_batch(trajs, CFG, policy.max_context)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    updater = GRPOUpdater(policy, CFG)
    history = updater.fit(items)
    return updater, before, trajs, history


@pytest.fixture(scope="module")
def candidate(base_dir, trained):
    _, _, trajs, _ = trained
    out = base_dir.parent / "candidate"
    summary = train_grpo(base_dir, trajs, CFG, out)
    return out, summary


def test_lora_training_changes_only_adapter_weights(trained):
    updater, before, _, _ = trained
    after = {n.replace("base_model.model.", "").replace(".base_layer", ""): p
             for n, p in updater.peft.named_parameters() if "lora_" not in n}
    assert all(torch.equal(after[n], before[n]) for n in before)
    lora_b = [p for n, p in updater.peft.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)


def test_the_kl_reference_is_the_adapter_disabled_base(base_dir, trained):
    updater, _, trajs, _ = trained
    mb = collate(trajs[:4], updater.pad_id)
    base = Policy.load(base_dir).model
    with torch.no_grad():
        want, _ = forward_logps(base, mb)
        trained_logps, _ = forward_logps(updater.peft, mb)
    assert torch.allclose(updater.ref_logps(mb), want, atol=1e-5)
    assert not torch.allclose(trained_logps, want, atol=1e-3)  # the adapter did move


def test_the_trainer_logs_peak_memory(trained):
    _, _, _, history = trained
    assert all(row["peak_mem_mb"] > 0 for row in history)


def test_a_lora_checkpoint_stores_the_adapter_not_the_full_model(candidate):
    out, summary = candidate
    assert summary["lora"] and (out / "adapter_model.safetensors").exists()
    assert not (out / "model.safetensors").exists()


def test_a_promoted_lora_checkpoint_reloads_and_samples(base_dir, candidate):
    out, summary = candidate
    promoted = base_dir.parent / "iter-0001"
    shutil.copytree(out, promoted)
    policy = Policy.load(promoted)
    assert policy.model_version == summary["model_version"]
    [[gen]] = policy.generate([policy.encode("def f(x):")], max_new_tokens=5, seed=0)
    assert len(gen.token_ids) > 0


def test_merging_keeps_the_adapted_policys_logits(base_dir, candidate, tmp_path):
    out, _ = candidate
    merge_lora_checkpoint(out, tmp_path / "merged")
    ids = torch.tensor([Policy.load(base_dir).encode("def f(x):\n    return x")])
    with torch.no_grad():
        adapted = Policy.load(out).model(input_ids=ids).logits
        merged = Policy.load(tmp_path / "merged").model(input_ids=ids).logits
    assert (tmp_path / "merged" / "model.safetensors").exists()
    assert torch.allclose(adapted, merged, atol=1e-4)


def test_an_adapter_pointing_at_another_base_is_refused(candidate, tmp_path):
    out, _ = candidate
    moved = out.parent / "tampered"
    shutil.copytree(out, moved)
    (moved / BASE_VERSION_FILE).write_text("0" * 64 + "\n")
    with pytest.raises(PolicyError, match="another base"):
        Policy.load(moved)


def test_gradient_checkpointing_gives_the_same_step(base_dir):
    rows = []
    for ckpt in (False, True):
        policy = Policy.load(base_dir)
        cfg = CFG.model_copy(update={"gradient_checkpointing": ckpt, "steps": 1})
        items, _ = prepare_batch(group(policy), cfg, policy.max_context)
        torch.manual_seed(0)
        rows.append(GRPOUpdater(policy, cfg).fit(items)[0])
    assert rows[1]["loss"] == pytest.approx(rows[0]["loss"], abs=1e-6)
    assert rows[1]["grad_norm"] == pytest.approx(rows[0]["grad_norm"], rel=1e-4)


def test_a_bf16_autocast_step_runs_and_stays_finite(base_dir):
    policy = Policy.load(base_dir)
    cfg = CFG.model_copy(update={"bf16": True, "steps": 1})
    items, _ = prepare_batch(group(policy), cfg, policy.max_context)
    row = GRPOUpdater(policy, cfg).fit(items)[0]
    assert torch.isfinite(torch.tensor([row["loss"], row["grad_norm"]])).all()


def test_a_lora_iteration_resumes_its_adapters_optimizer_state(base_dir, candidate, tmp_path):
    out, _ = candidate
    policy = Policy.load(out)
    cfg = CFG.model_copy(update={"keep_optimizer_state": True, "steps": 1})
    first = train_grpo(out, group(policy), cfg, tmp_path / "next")
    second = train_grpo(tmp_path / "next", group(policy), cfg, tmp_path / "after")
    assert not first["optimizer_resumed"] and second["optimizer_resumed"]
