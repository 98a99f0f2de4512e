"""GRPO math: advantages, clipping, KL and the four normalisations (codeloop.train.grpo)."""

from __future__ import annotations

import pytest
import torch

from codeloop.train.grpo import (
    group_advantages,
    group_advantages_by_key,
    grpo_loss,
    tied_groups,
    token_logps,
)


def _batch(b=4, t=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    logps = (-torch.rand(b, t, generator=g) * 3).requires_grad_(True)
    old = logps.detach() + 0.3 * torch.randn(b, t, generator=g)
    ref = logps.detach() + 0.3 * torch.randn(b, t, generator=g)
    mask = (torch.rand(b, t, generator=g) > 0.3).float()
    mask[:, 0] = 1.0
    adv = torch.randn(b, generator=g)
    return logps, old, ref, adv, mask


def test_group_advantages_are_standardised_within_each_group():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    adv = group_advantages(r, 4, "group")
    g0 = r[:4]
    expected = (g0 - g0.mean()) / (g0.std() + 1e-4)
    assert torch.allclose(adv[:4], expected)
    assert abs(float(adv[4:].sum())) < 1e-5


def test_batch_scaling_divides_by_the_whole_batch_std():
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    adv = group_advantages(r, 2, "batch")
    means = torch.tensor([0.5, 0.5, 2.0, 2.0])
    assert torch.allclose(adv, (r - means) / (r.std() + 1e-4))


def test_scale_none_keeps_raw_centred_rewards():
    r = torch.tensor([2.0, 0.0, 5.0, 1.0])
    assert torch.allclose(group_advantages(r, 2, "none"), torch.tensor([1.0, -1.0, 2.0, -2.0]))


def test_tied_groups_get_exactly_zero_advantage():
    r = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.2, 0.2])
    adv = group_advantages(r, 3, "group")
    assert torch.equal(adv[:3], torch.zeros(3))
    assert tied_groups(r, 3).tolist() == [True, False]


def test_groups_by_key_handle_unequal_sizes_and_count_ties():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 1.0])
    keys = ["a", "a", "b", "b", "c"]  # c is a group of one: no baseline
    adv, stats = group_advantages_by_key(r, keys, "group")
    assert adv[0] > 0 > adv[1]
    assert adv[2:].tolist() == [0.0, 0.0, 0.0]
    assert stats["n_groups"] == 3
    assert stats["frac_reward_zero_std"] == pytest.approx(2 / 3)


def test_group_size_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(ValueError, match="divide"):
        group_advantages(torch.zeros(5), 2)


def test_unknown_scale_names_the_allowed_values():
    with pytest.raises(ValueError, match="group, batch, none"):
        group_advantages(torch.zeros(4), 2, "rank")


def test_on_policy_grpo_loss_is_minus_the_mean_advantage():
    logps, _, _, adv, mask = _batch()
    loss, stats = grpo_loss(logps, None, None, adv, mask, loss_type="grpo")
    assert float(loss.detach()) == pytest.approx(-float(adv.mean()), abs=1e-6)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    assert stats["clip_ratio_region"] == 0.0


def test_masked_tokens_receive_no_gradient():
    logps, old, ref, adv, mask = _batch()
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        logps.grad = None
        loss, _ = grpo_loss(logps, old, ref, adv, mask, loss_type=loss_type, beta=0.1)
        loss.backward()
        assert torch.all(logps.grad[mask == 0] == 0), loss_type
        assert torch.any(logps.grad[mask == 1] != 0), loss_type


def test_zero_advantage_sequences_carry_no_policy_gradient():
    logps, old, _, adv, mask = _batch()
    adv[:2] = 0.0
    loss, _ = grpo_loss(logps, old, None, adv, mask, loss_type="bnpo")
    loss.backward()
    assert torch.all(logps.grad[:2] == 0)


def test_clipped_tokens_are_counted_by_side():
    logps = torch.zeros(2, 1, requires_grad=True)
    old = torch.tensor([[-1.0], [1.0]])  # ratios e and 1/e
    adv = torch.tensor([1.0, -1.0])
    _, stats = grpo_loss(logps, old, None, adv, torch.ones(2, 1))
    assert stats["clip_ratio_high"] == 0.5
    assert stats["clip_ratio_low"] == 0.5
    assert stats["clip_ratio_region"] == 1.0


def test_clipped_token_gets_no_gradient_when_the_ratio_left_the_trust_region():
    logps = torch.zeros(1, 1, requires_grad=True)
    loss, _ = grpo_loss(logps, torch.tensor([[-1.0]]), None, torch.tensor([1.0]), torch.ones(1, 1))
    loss.backward()
    assert float(logps.grad) == 0.0


def test_k3_kl_is_zero_at_the_reference_and_positive_away_from_it():
    logps, _, ref, adv, mask = _batch()
    _, same = grpo_loss(logps, None, logps.detach(), adv, mask, beta=0.1)
    _, away = grpo_loss(logps, None, ref, adv, mask, beta=0.1)
    assert same["kl"] == pytest.approx(0.0, abs=1e-7)
    assert away["kl"] > 0


def test_beta_without_reference_logps_is_refused():
    logps, _, _, adv, mask = _batch()
    with pytest.raises(ValueError, match="ref_logps"):
        grpo_loss(logps, None, None, adv, mask, beta=0.1)


def test_dapo_micro_batches_add_up_to_one_global_token_mean():
    logps, old, ref, adv, mask = _batch(b=6)
    whole, _ = grpo_loss(logps, old, ref, adv, mask, loss_type="dapo", beta=0.05)
    n = mask.sum()
    parts = [
        grpo_loss(
            logps[s], old[s], ref[s], adv[s], mask[s], loss_type="dapo", beta=0.05, num_items=n
        )[0]
        for s in (slice(0, 2), slice(2, 6))
    ]
    assert sum(parts).item() == pytest.approx(whole.item(), abs=1e-6)


def test_dr_grpo_divides_by_batch_times_max_completion_length():
    logps, old, _, adv, mask = _batch()
    a, _ = grpo_loss(logps, old, None, adv, mask, loss_type="dr_grpo", max_completion_length=12)
    b, _ = grpo_loss(logps, old, None, adv, mask, loss_type="dr_grpo", max_completion_length=6)
    assert a.item() * 2 == pytest.approx(b.item(), abs=1e-6)


def test_accumulation_divides_per_micro_batch_losses():
    logps, old, _, adv, mask = _batch()
    one, _ = grpo_loss(logps, old, None, adv, mask, loss_type="bnpo")
    acc, stats = grpo_loss(logps, old, None, adv, mask, loss_type="bnpo", accum_steps=4)
    assert acc.item() * 4 == pytest.approx(one.item(), abs=1e-6)
    assert stats["policy_loss"] == pytest.approx(one.item(), abs=1e-6)


def test_unknown_loss_type_names_the_allowed_values():
    logps, _, _, adv, mask = _batch()
    with pytest.raises(ValueError, match="grpo, bnpo, dr_grpo, dapo"):
        grpo_loss(logps, None, None, adv, mask, loss_type="ppo")


def test_token_logps_divide_logits_by_the_sampling_temperature():
    logits = torch.randn(2, 3, 5)
    targets = torch.randint(0, 5, (2, 3))
    lp, ent = token_logps(logits, targets, torch.tensor([1.0, 0.5]))
    manual = torch.log_softmax(logits[1] / 0.5, -1).gather(-1, targets[1].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(lp[1], manual)
    assert torch.all(ent >= 0)
