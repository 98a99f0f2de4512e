"""RFT from the archive (train.rft_source: archive): earlier nights' passing episodes too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from codeloop.config import TrainConfig
from codeloop.policy.model import Policy
from codeloop.train.trainer import train_grpo
from tests._tiny_policy import BAD, GOOD, make_tiny_policy
from tests._tiny_policy import episode as _episode

OTHER = "def f(x):\n    return 1 + x\n<|end|>"  # passes too: another (task, code) pair


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory) -> Path:
    return make_tiny_policy(tmp_path_factory.mktemp("policy"))


def _cfg(**kw) -> TrainConfig:
    base = {"steps": 1, "lr": 1e-3, "micro_batch_size": 4, "grad_accum": 1, "beta": 0.0}
    return TrainConfig(**{**base, "rft": "instead", "rft_steps": 1, **kw})


def _ep(policy, task, text, passed, it, tid, name=None):
    t = _episode(policy, task, [(text, "")], 1.0 if passed else 0.0, tid=tid)
    meta = replace(t.metadata, model_name=name or policy.name, reward_fn_version="v1")
    reason = "all_tests_passed" if passed else "max_steps"
    return replace(t, iteration=it, metadata=meta, terminal_reason=reason, final_code=text)


def _tonight(policy):
    return [_ep(policy, "a", GOOD, True, 5, "a5-0"), _ep(policy, "a", BAD, False, 5, "a5-1")]


def _rft(tiny_policy_dir, tmp_path, archived, **kw) -> dict:
    policy = Policy.load(tiny_policy_dir)
    return train_grpo(tiny_policy_dir, _tonight(policy), _cfg(**kw), tmp_path / "c", archived, 5)


def test_rft_from_the_archive_adds_earlier_nights_passing_episodes(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    archived = [_ep(policy, "b", GOOD, True, 3, "b3-0"), _ep(policy, "a", OTHER, True, 4, "a4")]
    m = _rft(tiny_policy_dir, tmp_path, archived, rft_source="archive")
    assert (m["rft_source"], m["rft_examples"]) == ("archive", 3)


def test_rft_from_tonight_ignores_the_archive(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    archived = [_ep(policy, "b", GOOD, True, 3, "b3-0")]
    assert _rft(tiny_policy_dir, tmp_path, archived, rft_source="current")["rft_examples"] == 1


def test_an_archived_episode_of_tonights_task_and_code_counts_once(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    archived = [_ep(policy, "a", GOOD, True, 4, "a4-0"), _ep(policy, "a", GOOD, True, 3, "a3")]
    assert _rft(tiny_policy_dir, tmp_path, archived, rft_source="archive")["rft_examples"] == 1


def test_archived_episodes_of_another_model_are_not_fine_tuned_on(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    archived = [_ep(policy, "b", GOOD, True, 3, "b3", name="Qwen/Qwen2.5-0.5B")]
    assert _rft(tiny_policy_dir, tmp_path, archived, rft_source="archive")["rft_examples"] == 1


def test_archived_rows_of_tonight_are_not_read_twice(tiny_policy_dir, tmp_path):
    policy = Policy.load(tiny_policy_dir)
    archived = [_ep(policy, "b", GOOD, True, 5, "b5")]  # the archive already holds night 5
    assert _rft(tiny_policy_dir, tmp_path, archived, rft_source="archive")["rft_examples"] == 1
