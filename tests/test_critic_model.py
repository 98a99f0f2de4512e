"""The learned critic: trained on sandbox labels, reranks, samples, saves, scores (v2-critic)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from codeloop.config import SandboxConfig
from codeloop.data.generator import generate_tasks
from codeloop.rewards import score_trajectories
from codeloop.rewards.critic import Critic, mutants, train_critic
from codeloop.sandbox import ExecJob, make_executor
from tests._rewards_fixtures import ADD_TASK, GOOD, traj


@pytest.fixture(scope="module")
def labelled():
    """60 synthetic tasks, reference + mutants each, labelled by the real sandbox."""
    rng = random.Random(0)
    tasks = generate_tasks(60, seed=7)
    cands = []
    for t in tasks:
        cs = [t.reference_solution, *mutants(t.reference_solution)]
        rng.shuffle(cs)
        cands.append(cs)
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=2))
    try:
        res = iter(
            ex.run_many(
                [
                    ExecJob(code=c, tests=t.visible_tests, entry_point=t.entry_point)
                    for t, cs in zip(tasks, cands, strict=True)
                    for c in cs
                ]
            )
        )
    finally:
        ex.close()
    labels = [[float(next(res).passed) for _ in cs] for cs in cands]
    return tasks, cands, labels


@pytest.fixture(scope="module")
def critic(labelled):
    tasks, cands, labels = labelled
    return Critic.fit(
        [
            (t, c, y)
            for t, cs, ys in zip(tasks[:40], cands[:40], labels[:40], strict=True)
            for c, y in zip(cs, ys, strict=True)
        ]
    )


def test_critic_top_choice_passes_more_often_than_a_random_pick(labelled, critic):
    tasks, cands, labels = labelled
    top1 = [
        ys[critic.rerank(t, cs)[0]]
        for t, cs, ys in zip(tasks[40:], cands[40:], labels[40:], strict=True)
    ]
    random_pick = [np.mean(ys) for ys in labels[40:]]
    assert np.mean(top1) > np.mean(random_pick) + 0.25


def test_rerank_returns_a_permutation_of_the_candidates(labelled, critic):
    tasks, cands, _ = labelled
    assert sorted(critic.rerank(tasks[50], cands[50])) == list(range(len(cands[50])))


def test_critic_guided_sampling_is_reproducible_with_a_seed(labelled, critic):
    tasks, cands, _ = labelled
    draw = [
        critic.sample(tasks[45], cands[45], temperature=0.2, rng=np.random.default_rng(3))
        for _ in range(2)
    ]
    assert draw[0] == draw[1]


def test_a_saved_critic_predicts_the_same_after_loading(labelled, critic, tmp_path):
    tasks, cands, _ = labelled
    critic.save(tmp_path / "critic")
    again = Critic.load(tmp_path / "critic")
    assert again.predict(tasks[41], cands[41][0]) == pytest.approx(
        critic.predict(tasks[41], cands[41][0])
    )


def test_loading_a_missing_critic_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        Critic.load(tmp_path / "nothing-here")


def test_train_critic_skips_infra_error_rows():
    good = traj(GOOD, tid="a")
    good.reward_components = {"binary_pass": 1.0}
    broken = traj(GOOD, tid="b")
    broken.infra_error = "sandbox lost"
    with pytest.raises(ValueError, match="no scored"):
        train_critic([broken], {ADD_TASK.task_id: ADD_TASK})
    tasks = {ADD_TASK.task_id: ADD_TASK}
    with_broken, alone = train_critic([good, broken], tasks), train_critic([good], tasks)
    # The infra-error row carries no label: the critic is the one fitted on the good row only.
    for code in (GOOD, "def add_three(x):\n    return x - 3"):
        assert with_broken.predict(ADD_TASK, code) == alone.predict(ADD_TASK, code)


def test_v2_critic_adds_the_critic_as_a_dense_component(critic):
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=1))
    try:
        [t] = score_trajectories(
            [traj(GOOD)], {ADD_TASK.task_id: ADD_TASK}, "v2-critic", ex, critic=critic
        )
    finally:
        ex.close()
    assert 0.0 < t.reward_components["critic"] < 1.0
    assert t.reward == pytest.approx(0.85 + 0.1 * t.reward_components["critic"], abs=1e-6)
