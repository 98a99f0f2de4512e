"""Evaluation draws the same random numbers every night, so the gate's per-task pairs
differ by policy, not by dice; and it hands the gate per-task [passed, samples]."""

from __future__ import annotations

import pytest

from codeloop.config import EvaluateConfig, Params, PolicyInitConfig, SandboxConfig
from codeloop.data.generator import generate_tasks
from codeloop.evaluate.metrics import evaluate_sets
from codeloop.policy.model import build_embedded
from codeloop.sandbox import make_executor

CFG = EvaluateConfig(samples_per_task=2, temperature=1.5, max_new_tokens=12)


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(4, seed=11, max_depth=1)


@pytest.fixture(scope="module")
def policy(tasks):
    """An untrained tiny policy: at temperature 1.5 every seed writes something else."""
    tiny = PolicyInitConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, n_positions=256)
    return build_embedded(Params(policy_init=tiny), tasks)


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=2))
    yield ex
    ex.close()


def _sampled(policy, tasks, executor, iteration):
    """What the policy wrote for each prompt when evaluated on night ``iteration``."""
    seen: list[str] = []
    real = policy.generate

    def recording(*args, **kw):
        out = real(*args, **kw)
        seen.extend(g.text for row in out for g in row)
        return out

    policy.generate = recording
    try:
        result = evaluate_sets(policy, {"h": tasks}, executor, CFG, iteration=iteration)
    finally:
        del policy.generate
    return seen, result


def test_two_nights_evaluate_a_policy_with_the_same_samples(policy, tasks, executor):
    night3, _ = _sampled(policy, tasks, executor, 3)
    night9, _ = _sampled(policy, tasks, executor, 9)
    assert len(night3) == 2 * len(tasks)
    assert len(set(night3)) > 1  # the samples differ from each other: seeds matter
    assert night3 == night9


def test_evaluation_hands_the_gate_passed_and_sample_counts_per_task(policy, tasks, executor):
    _, result = _sampled(policy, tasks, executor, 1)
    counts = result["task_counts"]["h"]
    assert set(counts) == {t.task_id for t in tasks}
    for tid, (passed, n) in counts.items():
        assert n == 2 and 0 <= passed <= n
        assert result["pass_rates"]["h"][tid] == passed / n
