"""RFT (train.rft): fine-tuning on passing episodes before or instead of GRPO."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from codeloop.config import TrainConfig
from codeloop.policy.model import Policy
from codeloop.train.rft import last_generation, rft_examples
from codeloop.train.trainer import train_grpo
from tests._tiny_policy import BAD, FEEDBACK, GOOD, PROMPT, make_tiny_policy
from tests._tiny_policy import episode as _episode


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory) -> Path:
    return make_tiny_policy(tmp_path_factory.mktemp("policy"))


def _cfg(**kw) -> TrainConfig:
    base = {"steps": 1, "lr": 1e-3, "micro_batch_size": 4, "grad_accum": 1, "beta": 0.0}
    return TrainConfig(**{**base, **kw})


def _ep(policy, key, turns, passed: bool, tid: str):
    t = _episode(policy, key, turns, 1.0 if passed else 0.0, tid=tid)
    reason = "all_tests_passed" if passed else "max_steps"
    return replace(t, terminal_reason=reason, final_code=turns[-1][0])


def _batch(policy):
    return [
        _ep(policy, "a", [(GOOD, "")], True, "a-0"),
        _ep(policy, "a", [(GOOD, "")], True, "a-1"),  # same task and code: deduplicated
        _ep(policy, "a", [(BAD, "")], False, "a-2"),
        _ep(policy, "b", [(BAD, FEEDBACK), (GOOD, "")], True, "b-0"),
    ]


def _logp(policy: Policy, text: str) -> float:
    from tests._tiny_policy import logps

    ids = policy.encode(PROMPT + text)
    return sum(logps(policy, ids, 1.0)[len(policy.encode(PROMPT)) :])


def test_passing_episodes_are_deduplicated_per_task_and_code(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    assert len(rft_examples(_batch(policy), policy.max_context)) == 2


def test_the_target_of_a_revise_episode_is_its_last_generation_only(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    t = _batch(policy)[3]
    start, end = last_generation(t)
    assert t.token_ids[start:end] == policy.encode(GOOD)


def test_rft_instead_of_grpo_raises_the_passing_completion_and_skips_the_update(
    tiny_policy_dir, tmp_path
):
    before = Policy.load(tiny_policy_dir)
    cfg = _cfg(rft="instead", rft_steps=5, rft_lr=1e-2)
    m = train_grpo(tiny_policy_dir, _batch(before), cfg, tmp_path / "c")
    after = Policy.load(tmp_path / "c")
    assert (m["steps"], m["rft_examples"], m["rft_steps"]) == (0, 2, 5)
    assert _logp(after, GOOD) > _logp(before, GOOD)


def test_rft_reports_its_loss_falling(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    cfg = _cfg(rft="before", rft_steps=5, rft_lr=1e-2)
    m = train_grpo(tiny_policy_dir, _batch(policy), cfg, tmp_path / "c")
    assert m["rft_loss_last"] < m["rft_loss_first"]


def test_rft_before_grpo_still_runs_the_grpo_update(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    m = train_grpo(tiny_policy_dir, _batch(policy), _cfg(rft="before"), tmp_path / "c")
    assert (m["rft_mode"], m["steps"]) == ("before", 1)


def test_without_rft_the_summary_has_no_rft_metrics(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    m = train_grpo(tiny_policy_dir, _batch(policy), _cfg(rft="off"), tmp_path / "c")
    assert not any(k.startswith("rft_") for k in m)


def _agent_ep(policy, tid: str, diff: str, **components):
    t = _episode(policy, "r", [(BAD, FEEDBACK), (GOOD, "")], 1.0, tid=tid)
    return replace(t, terminal_reason="submitted", final_diff=diff, reward_components=components)


def test_a_resolved_agent_episode_trains_on_every_call_it_wrote(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    t = _agent_ep(policy, "r-0", "diff a", resolved=1.0)
    [(ids, mask)] = rft_examples([t], policy.max_context)
    assert ids == t.token_ids and mask == t.loss_mask
    assert sum(mask) > len(policy.encode(GOOD))  # both calls, not the last one only


def test_unresolved_or_hack_flagged_agent_episodes_are_not_fine_tuned_on(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    trajs = [_agent_ep(policy, "r-0", "diff a", resolved=0.0),
             _agent_ep(policy, "r-1", "diff b", resolved=1.0, hack_zeroed=1.0)]
    assert rft_examples(trajs, policy.max_context) == []


def test_resolved_agent_episodes_are_deduplicated_per_task_and_final_diff(tiny_policy_dir):
    policy = Policy.load(tiny_policy_dir)
    trajs = [_agent_ep(policy, f"r-{i}", d, resolved=1.0) for i, d in enumerate("aab")]
    assert len(rft_examples(trajs, policy.max_context)) == 2
