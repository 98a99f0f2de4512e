"""Rollout episodes with a real (tiny, memorising) policy and the real sandbox."""

from __future__ import annotations

import collections
import dataclasses
import types

import pytest

from codeloop.config import Params, PolicyInitConfig, RolloutConfig, SandboxConfig
from codeloop.data.generator import generate_tasks
from codeloop.io import read_trajectories, write_trajectories
from codeloop.policy import prompts as P
from codeloop.policy.model import build_embedded
from codeloop.policy.sft import run_sft
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.envs import run_episodes
from codeloop.rollout.stats import rollout_metrics
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import SandboxError

CFG = RolloutConfig(samples_per_task=3, max_steps=2, temperature=0.05, max_new_tokens=48)


@pytest.fixture(scope="module")
def task():
    t = generate_tasks(1, seed=3, max_depth=1)[0]
    # Half the tests hidden, as the clean stage would split them.
    return dataclasses.replace(
        t, visible_tests=t.visible_tests[:3], hidden_tests=t.visible_tests[3:]
    )


@pytest.fixture(scope="module")
def broken_task(task):
    """Same prompt (it shows two tests), but a third visible test the memorised answer fails."""
    wrong = task.visible_tests[2].rsplit("==", 1)[0] + "== 'not this'"
    tests = [*task.visible_tests[:2], wrong]
    return dataclasses.replace(task, task_id="t/broken", visible_tests=tests)


@pytest.fixture(scope="module")
def policy(task):
    """A tiny embedded policy that has memorised the reference answer of `task`."""
    tiny = PolicyInitConfig(vocab_size=400, n_layer=2, n_head=2, n_embd=64, n_positions=512)
    pol = build_embedded(Params(policy_init=tiny), [task])
    pol.model_version = "test-version"
    sft = types.SimpleNamespace(
        steps=60, batch_size=2, lr=1e-2, warmup_steps=5, max_len=512, seed=0
    )
    run_sft(pol, [task], sft)
    return pol


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=2))
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def trajs(policy, executor, task, broken_task):
    return run_episodes([task, broken_task], policy, executor, EpisodeContext(CFG, "ds-1", 4, 2.0))


def test_every_prompt_key_group_has_samples_per_task_rows(trajs):
    sizes = collections.Counter(t.prompt_key for t in trajs)
    assert len(sizes) == 2 and set(sizes.values()) == {CFG.samples_per_task}


def test_a_correct_first_answer_ends_the_episode_as_passed(trajs, task):
    ok = [t for t in trajs if t.task_id == task.task_id]
    assert all(t.terminal_reason == "all_tests_passed" and len(t.actions) == 1 for t in ok)


def test_a_failing_answer_gets_a_revise_turn_up_to_max_steps(trajs):
    bad = [t for t in trajs if t.task_id == "t/broken"]
    assert all([a.action_type for a in t.actions] == ["generate", "revise"] for t in bad)
    # The memorising model may answer the unseen revise context with nothing (no_code).
    assert all(t.terminal_reason in ("max_steps", "no_code") for t in bad)


def test_feedback_shows_the_failing_visible_test(trajs, policy, broken_task):
    t = next(t for t in trajs if t.task_id == "t/broken")
    fed = [tok for tok, m in zip(t.token_ids[len(policy.encode(t.prompt)) :], t.loss_mask[len(policy.encode(t.prompt)):], strict=True) if m == 0]
    assert broken_task.visible_tests[2] in policy.decode(fed)


def test_hidden_tests_never_reach_the_model(trajs, policy, broken_task):
    for t in trajs:
        text = policy.tokenizer.decode(t.token_ids)
        assert not any(h in text for h in broken_task.hidden_tests)


def test_token_fields_align_and_logprobs_are_zero_off_the_mask(trajs):
    for t in trajs:
        assert len(t.token_ids) == len(t.loss_mask) == len(t.sample_logprobs)
        assert all(lp == 0.0 for lp, m in zip(t.sample_logprobs, t.loss_mask, strict=True) if not m)
        assert all(lp <= 0.0 for lp in t.sample_logprobs)


def test_the_sequence_starts_with_the_prompt_tokens(trajs, policy):
    t = trajs[0]
    ids = policy.encode(t.prompt)
    assert t.token_ids[: len(ids)] == ids and set(t.loss_mask[: len(ids)]) == {0}


def test_metadata_is_filled_and_reward_fields_are_left_to_score(trajs):
    m = trajs[0].metadata
    assert m.model_version == "test-version" and m.dataset_version == "ds-1"
    assert m.prompt_template_version == P.PROMPT_TEMPLATE_VERSION
    assert (m.temperature, m.max_new_tokens, m.env_timeout) == (0.05, 48, 2.0)
    assert m.reward_fn_version == "" and trajs[0].iteration == 4


def test_actions_carry_observations_from_the_sandbox(trajs):
    obs = trajs[0].actions[0].observation
    assert obs.status == "passed" and obs.tests_total == 3 and obs.tests_passed == 3


def test_trajectory_ids_are_unique(trajs):
    assert len({t.trajectory_id for t in trajs}) == len(trajs)


def test_trajectories_round_trip_through_parquet(trajs, tmp_path):
    write_trajectories(tmp_path, trajs)
    back = read_trajectories(tmp_path)
    assert [t.to_row() for t in back] == [t.to_row() for t in trajs]


def test_metrics_report_the_visible_pass_rate(trajs):
    m = rollout_metrics(trajs, 1.0)
    assert m["visible_pass_rate"] == 0.5 and m["group_size_min"] == CFG.samples_per_task


class _BrokenExecutor:
    """An executor whose infrastructure is down (what a dead sandbox looks like)."""

    def run(self, job):
        raise SandboxError("zygote died")

    def run_many(self, jobs):
        raise SandboxError("zygote died")

    def close(self):
        pass


def test_sandbox_failure_marks_infra_error_and_keeps_the_group_whole(policy, task):
    out = run_episodes([task], policy, _BrokenExecutor(), EpisodeContext(CFG, "d", 0, 1.0))
    assert len(out) == CFG.samples_per_task
    assert all(t.terminal_reason == "infra_error" and "zygote died" in t.infra_error for t in out)
    assert not any(t.done for t in out)


def test_the_trainer_recomputes_the_sampler_logprobs_of_a_real_rollout(trajs, policy):
    import torch

    from codeloop.train.grpo import token_logps
    from codeloop.train.trainer import collate

    # Left-padded batched sampling vs the trainer's right-padded forward over the same
    # ids, including multi-turn rows with feedback in between: the ratio starts at 1.
    assert any(len(t.actions) > 1 for t in trajs)
    mb = collate(trajs, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logits = policy.model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits
    logps, _ = token_logps(logits[:, :-1], mb["targets"], mb["temperature"])
    diff = ((logps - mb["old_logps"]).abs() * mb["mask"]).max()
    assert float(diff) < 1e-3
