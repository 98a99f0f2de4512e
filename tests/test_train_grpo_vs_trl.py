"""codeloop.train.grpo against TRL's own GRPOTrainer code on random inputs (trl is a dev dependency).

TRL is driven, not re-implemented: a real GRPOTrainer on a tiny random GPT-2 computes
its loss with ``_compute_loss`` and its advantages with ``_generate_and_score_completions``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason="trl (dev dependency, pyproject [dev]) is not installed")

from codeloop.train.grpo import group_advantages, grpo_loss, token_logps  # noqa: E402
from tests._tiny_policy import make_tiny_policy  # noqa: E402

REWARDS = torch.tensor([0.1, 0.9, 0.3, 0.3, 1.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.25, 0.75])


def _reward(completions, **_):
    return REWARDS[: len(completions)].tolist()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return make_tiny_policy(tmp_path_factory.mktemp("tiny-trl"))


def _trainer(model_dir: Path, out: Path, **cfg):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(out), report_to="none", use_cpu=True, bf16=False, disable_tqdm=True,
        save_strategy="no", **cfg,
    )
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a", "b", "c"] * 4}),
        processing_class=AutoTokenizer.from_pretrained(model_dir, local_files_only=True),
    )
    trainer.model.eval()  # dropout off; "eval" mode also skips accumulation scaling
    return trainer


def _random_inputs(model, b=6, p=5, c=10, temperature=0.7, seed=0):
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prompt_ids = torch.randint(8, vocab, (b, p), generator=g)
    completion_ids = torch.randint(8, vocab, (b, c), generator=g)
    completion_mask = (torch.arange(c) < torch.randint(2, c + 1, (b, 1), generator=g)).long()
    tool_mask = torch.ones(b, c, dtype=torch.long)
    tool_mask[:, 2:4] = 0  # environment tokens inside the episode
    with torch.no_grad():
        ids = torch.cat([prompt_ids, completion_ids], 1)
        logits = model(
            input_ids=ids,
            attention_mask=torch.cat([torch.ones_like(prompt_ids), completion_mask], 1),
        ).logits
        logps, _ = token_logps(logits[:, p - 1 : -1], completion_ids, temperature)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.randn(b, generator=g),
        "old_per_token_logps": logps + 0.4 * torch.randn(b, c, generator=g),
        "ref_per_token_logps": logps + 0.3 * torch.randn(b, c, generator=g),
        "num_items_in_batch": (completion_mask * tool_mask).sum(),
    }


def _ours(model, inputs, loss_type, temperature, beta, eps_low, eps_high, kl_corr):
    p, c = inputs["prompt_ids"].size(1), inputs["completion_ids"].size(1)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    logits = model(input_ids=ids, attention_mask=att).logits[:, p - 1 : -1]
    logps, _ = token_logps(logits, inputs["completion_ids"], temperature)
    loss, _ = grpo_loss(
        logps, inputs["old_per_token_logps"], inputs["ref_per_token_logps"],
        inputs["advantages"], inputs["completion_mask"] * inputs["tool_mask"],
        loss_type=loss_type, epsilon_low=eps_low, epsilon_high=eps_high, beta=beta,
        max_completion_length=c, num_items=inputs["num_items_in_batch"],
        kl_ratio_correction=kl_corr,
    )
    return loss


@pytest.mark.parametrize(
    "loss_type,kl_corr",
    [("grpo", True), ("bnpo", True), ("dr_grpo", True), ("dapo", True), ("grpo", False)],
)
def test_loss_and_gradients_equal_trls_on_random_inputs(tiny_dir, tmp_path, loss_type, kl_corr):
    temp, beta, lo, hi = 0.7, 0.04, 0.2, 0.28
    trainer = _trainer(
        tiny_dir, tmp_path, loss_type=loss_type, beta=beta, epsilon=lo, epsilon_high=hi,
        temperature=temp, max_completion_length=10, per_device_train_batch_size=6,
        num_generations=6, use_bias_correction_kl=kl_corr,
    )
    model = trainer.model
    inputs = _random_inputs(model, temperature=temp, seed=len(loss_type) + kl_corr)
    model.zero_grad()
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ours = _ours(model, inputs, loss_type, temp, beta, lo, hi, kl_corr)
    ours.backward()
    assert abs(ours.item() - trl_loss.item()) <= 1e-5
    for a, b in zip(trl_grads, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_equal_trls(tiny_dir, tmp_path, scale):
    trainer = _trainer(
        tiny_dir, tmp_path, per_device_train_batch_size=12, num_generations=4,
        max_completion_length=3, scale_rewards=scale,
    )
    batch = [{"prompt": p} for p in ["a"] * 4 + ["b"] * 4 + ["c"] * 4]
    trl_adv = trainer._generate_and_score_completions(batch)["advantages"]
    assert torch.allclose(group_advantages(REWARDS, 4, scale), trl_adv, atol=1e-5)
