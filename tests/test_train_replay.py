"""Replay (train.replay): archived episodes of earlier nights in tonight's GRPO update."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from codeloop.config import ReplayConfig, TrainConfig
from codeloop.policy.model import Policy
from codeloop.train.archive_replay import candidates, draw, weight_stats, weights_for
from codeloop.train.trainer import train_grpo
from tests._tiny_policy import BAD, GOOD, make_tiny_policy
from tests._tiny_policy import episode as _episode


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory) -> Path:
    return make_tiny_policy(tmp_path_factory.mktemp("policy"))


def _cfg(**replay) -> TrainConfig:
    base = {
        "steps": 1,
        "lr": 1e-3,
        "micro_batch_size": 4,
        "grad_accum": 4,
        "beta": 0.0,
        "rft": "off",
    }
    return TrainConfig(**base, replay=ReplayConfig(**replay))


def _ep(policy, key, text, reward, it, tid, shift=0.0):
    """An episode of night ``it`` whose stored sampler log-probs are ours minus ``shift``."""
    t = _episode(policy, key, [(text, "")], reward, tid=tid)
    lps = [lp - shift if m else 0.0 for lp, m in zip(t.sample_logprobs, t.loss_mask, strict=True)]
    meta = replace(t.metadata, model_name=policy.name, reward_fn_version="v1")
    return replace(t, iteration=it, metadata=meta, sample_logprobs=lps, prompt_key=f"{key}@{it}")


def _night(policy, it, shift=0.0, prefix="n"):
    """One group of four on one task (2 pass, 2 fail): a live group."""
    texts = [(GOOD, 1.0), (GOOD, 1.0), (BAD, 0.0), (BAD, 0.0)]
    return [
        _ep(policy, f"{prefix}{it}", txt, r, it, f"{prefix}{it}-{k}", shift)
        for k, (txt, r) in enumerate(texts)
    ]


def _weights(model_dir: Path) -> dict:
    return {k: v.clone() for k, v in Policy.load(model_dir).model.state_dict().items()}


def test_replay_changes_the_update(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    tonight, archived = _night(policy, 5), _night(policy, 4, prefix="old")
    train_grpo(tiny_policy_dir, tonight, _cfg(), tmp_path / "plain", archived, 5)
    m = train_grpo(tiny_policy_dir, tonight, _cfg(fraction=0.5), tmp_path / "replay", archived, 5)
    plain, replayed = _weights(tmp_path / "plain"), _weights(tmp_path / "replay")
    assert m["replay_rows"] == 4
    assert any(not (plain[k] == replayed[k]).all() for k in plain)


def test_the_off_policy_share_is_the_fraction_of_the_update(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    tonight = _night(policy, 5) + _night(policy, 5, prefix="m")
    archived = _night(policy, 4, prefix="o") + _night(policy, 3, prefix="p")
    m = train_grpo(tiny_policy_dir, tonight, _cfg(fraction=0.2), tmp_path / "c", archived, 5)
    assert (m["replay_rows"], m["replay_share"]) == (2, 2 / 10)


def test_token_weights_are_the_start_policys_ratio_to_the_sampler(tiny_policy_dir, tmp_path):
    # The archived sampler gave every generated token 0.5 nats less than the policy
    # now does, so each token's weight is exp(0.5), under the clip of 2.
    policy = Policy.load(tiny_policy_dir)
    archived = _night(policy, 4, shift=0.5, prefix="o")
    cfg = _cfg(fraction=0.5, clip=2.0)
    m = train_grpo(tiny_policy_dir, _night(policy, 5), cfg, tmp_path / "c", archived, 5)
    assert m["replay_weight_mean"] == pytest.approx(math.exp(0.5), rel=1e-4)
    assert m["replay_clipped_share"] == 0.0


def test_weights_above_the_clip_are_truncated_and_counted(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    archived = _night(policy, 4, shift=1.0, prefix="o")  # exp(1) = 2.72 > clip 2
    cfg = _cfg(fraction=0.5, clip=2.0)
    m = train_grpo(tiny_policy_dir, _night(policy, 5), cfg, tmp_path / "c", archived, 5)
    assert (m["replay_weight_max"], m["replay_clipped_share"]) == (2.0, 1.0)
    assert m["replay_weight_raw_max"] == pytest.approx(math.e, rel=1e-4)


def test_sequence_weights_are_the_product_over_the_generated_tokens():
    from codeloop.schema import Trajectory

    t = Trajectory("t", "k", "k", "p", token_ids=[1, 2, 3, 4], loss_mask=[0, 1, 1, 0],
                   sample_logprobs=[0.0, -1.0, -2.0, 0.0])
    start = [0.0, -0.5, -1.9, -3.0]  # log-ratios 0.5 and 0.1 on the generated tokens
    full, raw = weights_for(t, start, "sequence", clip=10.0)
    assert raw == pytest.approx([math.exp(0.6)] * 2)
    assert full == pytest.approx([1.0, math.exp(0.6), math.exp(0.6), 1.0])
    full, _ = weights_for(t, start, "token", clip=1.5)
    assert full == pytest.approx([1.0, 1.5, math.exp(0.1), 1.0])


def test_ess_of_weights_one_and_two_is_nine_fifths():
    s = weight_stats([1.0, 2.0], [1.0, 2.0], ReplayConfig(clip=2.0))
    assert (s["replay_ess"], s["replay_ess_fraction"]) == pytest.approx((1.8, 0.9))


def _reasons(policy, rows, iteration=5, max_age=2):
    cfg = ReplayConfig(fraction=0.5, max_age=max_age)
    pool, excluded = candidates(rows, iteration, cfg, policy.name, len(policy.tokenizer), 256)
    return {t.iteration for t, _ in pool}, excluded


def test_rows_older_than_max_age_are_excluded(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    rows = [r for it in (1, 2, 3, 4) for r in _night(policy, it)]
    kept, excluded = _reasons(policy, rows, iteration=5, max_age=2)
    assert (kept, excluded["older_than_max_age"]) == ({3, 4}, 8)


def test_rows_of_tonight_or_a_later_night_are_never_replayed(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    rows = [r for it in (4, 5, 6) for r in _night(policy, it)]
    kept, excluded = _reasons(policy, rows, iteration=5)
    assert (kept, excluded["not_earlier"]) == ({4}, 8)


def test_rows_another_model_sampled_are_excluded(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    other = [
        replace(t, metadata=replace(t.metadata, model_name="Qwen/x")) for t in _night(policy, 4)
    ]
    kept, excluded = _reasons(policy, other + _night(policy, 3))
    assert (kept, excluded["other_model"]) == ({3}, 4)


def test_a_stripped_row_keeps_its_reward_in_the_baseline_but_never_trains(tiny_policy_dir):
    from codeloop.data.archive import strip

    policy = Policy.load(tiny_policy_dir)
    # Two passing rows with tokens and two stripped failing ones: the group is live only
    # because the stripped rewards count in its baseline.
    rows = _night(policy, 4)
    rows = rows[:2] + [strip(t) for t in rows[2:]]
    pool, excluded = candidates(rows, 5, ReplayConfig(fraction=0.5), policy.name, 10**6, 256)
    assert [a for _, a in pool] == pytest.approx([0.866, 0.866], abs=1e-3)
    assert excluded["no_tokens"] == 2


def test_a_tied_archived_group_is_not_replayed(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    rows = [replace(t, reward=1.0) for t in _night(policy, 4)]
    pool, excluded = candidates(rows, 5, ReplayConfig(fraction=0.5), policy.name, 10**6, 256)
    assert (pool, excluded["tied_group"]) == ([], 4)


def test_the_draw_is_seeded():
    pool = [(type("T", (), {"trajectory_id": str(i)})(), 1.0) for i in range(20)]
    a = [t.trajectory_id for t, _ in draw(pool, 10, 0.3, seed=1)]
    assert a == [t.trajectory_id for t, _ in draw(list(reversed(pool)), 10, 0.3, seed=1)]
    assert len(a) == 4  # floor(0.3 / 0.7 x 10)


def test_a_replay_weight_scales_its_tokens_loss():
    import torch

    from codeloop.train.grpo import grpo_loss

    logps = torch.tensor([[-1.0, -2.0], [-1.5, -0.5]])
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2)
    w = torch.tensor([[1.0, 1.0], [0.5, 0.5]])  # the second row is replayed at weight 0.5
    # On-policy at step 0: ratio 1, per-token loss -A; grpo = mean over rows of row means.
    loss, _ = grpo_loss(logps, None, None, adv, mask, weights=w)
    assert float(loss) == pytest.approx((-1.0 + 0.5 * 1.0) / 2)
