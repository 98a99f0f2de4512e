"""The GRPO trainer on a tiny real GPT-2 (codeloop.train.trainer)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from codeloop.config import TrainConfig
from codeloop.policy.model import VERSION_FILE, Policy, checkpoint_hash
from codeloop.train.trainer import (
    OPT_FILE,
    collate,
    prepare_batch,
    select_trajectories,
    train_grpo,
)
from tests._tiny_policy import BAD, FEEDBACK, GOOD, PROMPT, make_tiny_policy
from tests._tiny_policy import episode as _episode
from tests._tiny_policy import group as _group
from tests._tiny_policy import logps as _logps


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory) -> Path:
    return make_tiny_policy(tmp_path_factory.mktemp("tiny-policy"))


def _cfg(**kw) -> TrainConfig:
    # dapo: what these tests were written against (the shipped default is grpo).
    base = {"steps": 2, "lr": 1e-3, "micro_batch_size": 2, "grad_accum": 2, "beta": 0.02,
            "loss_type": "dapo"}
    return TrainConfig(**{**base, **kw})


def _seq_logp(policy: Policy, text: str) -> float:
    ids = policy.encode(PROMPT + text)
    n = len(policy.encode(PROMPT))
    return sum(_logps(policy, ids, 1.0)[n:])


def test_trainer_writes_a_candidate_whose_version_is_its_content_hash(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    out = tmp_path / "candidate"
    m = train_grpo(tiny_policy_dir, _group(policy), _cfg(), out)
    assert (out / VERSION_FILE).read_text().strip() == m["model_version"] == checkpoint_hash(out)
    assert m["model_version"] != m["policy_version"]


def test_trainer_logs_the_documented_metrics(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    m = train_grpo(tiny_policy_dir, _group(policy), _cfg(), tmp_path / "c")
    for key in (
        "loss", "kl", "entropy", "clip_ratio_low", "clip_ratio_high", "clip_ratio_region",
        "completion_length_mean", "reward_mean", "reward_std", "frac_reward_zero_std",
    ):
        assert key in m, key
    assert m["steps"] == len(m["history"]) == 2
    assert m["reward_mean"] == pytest.approx(0.5)


def test_sampler_logprobs_match_the_trainer_at_the_first_step(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    m = train_grpo(tiny_policy_dir, _group(policy, temperature=0.7), _cfg(), tmp_path / "c")
    # Temperature, shift and masking agree: the first ratio is 1 and nothing is clipped.
    assert m["ratio_mean_first_step"] == pytest.approx(1.0, abs=1e-4)
    assert m["history"][0]["clip_ratio_region"] == 0.0


def test_training_raises_the_likelihood_of_the_rewarded_completion(tiny_policy_dir, tmp_path):
    before = Policy.load(tiny_policy_dir)
    trajs = _group(before, "a") + _group(before, "b")
    out = tmp_path / "c"
    train_grpo(tiny_policy_dir, trajs, _cfg(steps=6, beta=0.0), out)
    after = Policy.load(out)
    gap_before = _seq_logp(before, GOOD) - _seq_logp(before, BAD)
    gap_after = _seq_logp(after, GOOD) - _seq_logp(after, BAD)
    assert gap_after > gap_before + 0.5


def test_one_update_raises_rewarded_and_lowers_penalised_completions(tiny_policy_dir, tmp_path):
    before = Policy.load(tiny_policy_dir)
    trajs = [
        _episode(before, "k", [(text, "")], reward, tid=f"k-{i}")
        for i, (text, reward) in enumerate([(GOOD, 1.0), (GOOD, 1.0), (BAD, 0.0), (BAD, 0.0)])
    ]
    out = tmp_path / "c"
    m = train_grpo(
        tiny_policy_dir, trajs, _cfg(steps=1, beta=0.0, grad_accum=1, micro_batch_size=4), out
    )
    after = Policy.load(out)
    assert m["steps"] == 1
    # Positive advantage (GOOD) gains log-likelihood, negative (BAD) loses it.
    assert _seq_logp(after, GOOD) > _seq_logp(before, GOOD)
    assert _seq_logp(after, BAD) < _seq_logp(before, BAD)


def test_a_grad_accum_beyond_the_batch_makes_each_step_one_exact_pass(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    trajs = _group(policy)
    m = train_grpo(tiny_policy_dir, trajs, _cfg(grad_accum=10, micro_batch_size=2), tmp_path / "c")
    every_loss_token = sum(sum(t.loss_mask[1:]) for t in trajs)
    assert [row["loss_tokens"] for row in m["history"]] == [every_loss_token] * 2


def test_infra_error_trajectories_are_excluded_and_counted(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    trajs = _group(policy)
    trajs[0] = replace(trajs[0], infra_error="sandbox crashed", reward=0.0)
    m = train_grpo(tiny_policy_dir, trajs, _cfg(), tmp_path / "c")
    assert m["excluded"] == {"infra_error": 1}
    assert m["n_used"] == 3


def test_tied_groups_are_counted_and_left_out_of_the_update(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    tied = [replace(t, reward=0.0) for t in _group(policy, "tied")]
    m = train_grpo(tiny_policy_dir, _group(policy, "live") + tied, _cfg(), tmp_path / "c")
    assert m["frac_reward_zero_std"] == 0.5
    assert m["n_in_update"] == 4


def test_a_member_on_its_group_mean_stays_in_the_update(tiny_policy_dir):
    # Rewards 0, .5, 1, .5: the two .5 members sit on the mean (advantage exactly 0) of a
    # live group; only whole tied groups may be dropped, or they lose their KL term.
    policy = Policy.load(tiny_policy_dir)
    live = [replace(t, reward=r) for t, r in zip(_group(policy), [0.0, 0.5, 1.0, 0.5], strict=True)]
    tied = [replace(t, reward=1.0) for t in _group(policy, "tied")]
    items, _ = prepare_batch(live + tied, _cfg(), policy.max_context)
    assert sorted(t.trajectory_id for t, _ in items) == ["k-0", "k-1", "k-2", "k-3"]


def test_an_all_tied_batch_leaves_the_policy_unchanged(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    tied = [replace(t, reward=1.0) for t in _group(policy)]
    m = train_grpo(tiny_policy_dir, tied, _cfg(), tmp_path / "c")
    assert m["steps"] == 0
    after = Policy.load(tmp_path / "c").model.state_dict()
    for name, tensor in policy.model.state_dict().items():
        assert torch.equal(after[name], tensor), name


def test_environment_feedback_tokens_carry_no_loss(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    t = _episode(policy, "k", [(BAD, FEEDBACK), (GOOD, "")], 1.0)
    mb = collate([t], pad_id=0)
    n_fb = len(policy.encode(FEEDBACK))
    start = len(policy.encode(PROMPT)) + len(policy.encode(BAD))
    # targets are shifted by one: feedback token j sits at column j-1
    assert mb["mask"][0, start - 1 : start - 1 + n_fb].sum() == 0
    assert mb["mask"][0].sum() == len(policy.encode(BAD)) + len(policy.encode(GOOD))


def test_a_corrupt_row_is_refused_naming_the_trajectory_and_field(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    t = _group(policy)[0]
    t = replace(t, trajectory_id="traj-42", sample_logprobs=t.sample_logprobs[:-1])
    with pytest.raises(ValueError, match="traj-42.*sample_logprobs"):
        select_trajectories([t], max_len=256)


def test_checkpoints_are_written_every_n_steps(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    out = tmp_path / "c"
    m = train_grpo(tiny_policy_dir, _group(policy), _cfg(steps=3, checkpoint_every=1), out)
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step-00001", "step-00002"]
    assert m["history"][0]["checkpoint"] == checkpoint_hash(out / "checkpoints" / "step-00001")


def test_a_foreign_output_directory_is_not_overwritten(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not overwriting"):
        train_grpo(tiny_policy_dir, _group(policy), _cfg(), tmp_path)


def test_the_candidate_carries_the_optimizer_state_and_the_next_iteration_resumes_it(
    tiny_policy_dir, tmp_path
):
    policy = Policy.load(tiny_policy_dir)
    first, second = tmp_path / "iter-1", tmp_path / "iter-2"
    m1 = train_grpo(tiny_policy_dir, _group(policy), _cfg(steps=2), first)
    m2 = train_grpo(first, _group(Policy.load(first)), _cfg(steps=3, lr=5e-4), second)
    assert not m1["optimizer_resumed"] and m2["optimizer_resumed"]
    state = torch.load(second / OPT_FILE, weights_only=True)
    assert {e["step"].item() for e in state["state"].values()} == {5.0}
    assert {g["lr"] for g in state["param_groups"]} == {5e-4}  # params.yaml, not the file
    assert checkpoint_hash(second) == m2["model_version"]  # the optimizer is not the model


def test_without_keep_optimizer_state_each_iteration_starts_a_fresh_adamw(
    tiny_policy_dir, tmp_path
):
    policy = Policy.load(tiny_policy_dir)
    first, second = tmp_path / "iter-1", tmp_path / "iter-2"
    train_grpo(tiny_policy_dir, _group(policy), _cfg(), first)
    m = train_grpo(first, _group(policy), _cfg(keep_optimizer_state=False), second)
    assert not m["optimizer_resumed"] and not (second / OPT_FILE).exists()


def test_an_optimizer_state_of_another_model_is_refused_naming_the_file(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    first = tmp_path / "iter-1"
    train_grpo(tiny_policy_dir, _group(policy), _cfg(), first)
    state = torch.load(first / OPT_FILE, weights_only=True)
    state["state"][0]["exp_avg"] = torch.zeros(3, 3)
    torch.save(state, first / OPT_FILE)
    with pytest.raises(ValueError, match=r"optimizer\.pt: optimizer state does not match"):
        train_grpo(first, _group(policy), _cfg(), tmp_path / "iter-2")


def test_an_unreadable_optimizer_file_is_refused_naming_it(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    first = tmp_path / "iter-1"
    train_grpo(tiny_policy_dir, _group(policy), _cfg(), first)
    (first / OPT_FILE).write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=r"optimizer\.pt: unreadable optimizer state"):
        train_grpo(first, _group(policy), _cfg(), tmp_path / "iter-2")
