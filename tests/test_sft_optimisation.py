"""run_sft's optimisation loop: the cosine's floor (sft.lr_floor) and weight averaging (sft.ema)."""

from __future__ import annotations

import types

import pytest
import torch

from codeloop.config import ConfigError, PolicyInitConfig, parse_params
from codeloop.data.generator import generate_tasks
from codeloop.policy.model import build_embedded
from codeloop.policy.sft import WeightEMA, lr_schedule, run_sft

TINY = PolicyInitConfig(vocab_size=400, n_layer=1, n_head=2, n_embd=32, n_positions=256)


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(16, seed=5, max_depth=2)


def _cfg(**kw):
    base = dict(steps=8, batch_size=4, lr=1e-2, warmup_steps=2, max_len=256, seed=0,
                revise_fraction=0.0)
    return types.SimpleNamespace(**{**base, **kw})


def _policy(tasks):
    return build_embedded(parse_params({"policy_init": TINY.model_dump()}), tasks)


def _weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_a_config_without_lr_floor_decays_to_a_tenth_as_before():
    lr_at = lr_schedule(_cfg(steps=100, warmup_steps=10))
    assert lr_at(100) == pytest.approx(0.1)


def test_lr_floor_zero_decays_the_learning_rate_to_zero():
    lr_at = lr_schedule(_cfg(steps=100, warmup_steps=10, lr_floor=0.0))
    assert lr_at(100) == pytest.approx(0.0, abs=1e-12)


def test_sft_ema_ends_on_the_average_the_on_step_hook_sees(tasks):
    # bench/sft_stability.py reads a run's EMA through on_step: it must be sft.ema's result.
    plain = _policy(tasks)
    shadow = WeightEMA(plain.model, 0.8)
    run_sft(plain, tasks, _cfg(), on_step=lambda step, model, loss: shadow.update(model))
    averaged = _policy(tasks)
    stats = run_sft(averaged, tasks, _cfg(ema=0.8))
    assert stats["ema"] == 0.8
    for got, want in zip(_weights(averaged.model), shadow.shadow, strict=True):
        torch.testing.assert_close(got, want)


def test_sft_ema_changes_the_final_weights(tasks):
    last, averaged = _policy(tasks), _policy(tasks)
    run_sft(last, tasks, _cfg())
    run_sft(averaged, tasks, _cfg(ema=0.8))
    diffs = [(a - b).abs().max().item() for a, b in zip(_weights(last.model), _weights(averaged.model), strict=True)]
    assert max(diffs) > 1e-4


def test_an_ema_decay_of_one_is_refused_with_its_key_named():
    with pytest.raises(ConfigError, match="sft.ema"):
        parse_params({"sft": {"ema": 1.0}})
