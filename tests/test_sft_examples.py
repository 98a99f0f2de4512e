"""SFT warm start with revise turns (codeloop.policy.sft + generator.wrong_solution)."""

from __future__ import annotations

import random

import pytest

from codeloop.config import SandboxConfig
from codeloop.data.generator import generate_tasks, wrong_solution
from codeloop.policy import prompts as P
from codeloop.policy.model import Policy, train_tokenizer
from codeloop.policy.sft import length_grouped_batches, sft_examples
from codeloop.rollout.function_env import feedback_for
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import ExecJob
from codeloop.sandbox.values import short_repr
from codeloop.schema import Task


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return generate_tasks(12, seed=4)


@pytest.fixture(scope="module")
def policy(tasks) -> Policy:
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = train_tokenizer(tasks, vocab_size=400)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=32, n_layer=1, n_head=2)
    return Policy(GPT2LMHeadModel(cfg), tok, name="tiny")


def test_a_wrong_solution_gets_exactly_the_feedback_the_rollout_would_show(tasks):
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=1))
    rng = random.Random(0)
    try:
        for task in tasks[:6]:
            code, test, value = wrong_solution(task, rng)
            res = ex.run(
                ExecJob(code=code, tests=list(task.visible_tests), entry_point=task.entry_point)
            )
            sig = P.signature(task)
            expected = P.feedback_text("failed", test, got=short_repr(value), prefix=sig)
            assert not res.passed
            assert feedback_for(res, sig) == expected
    finally:
        ex.close()


def test_wrong_solution_is_none_for_a_task_not_from_the_generator(tasks):
    foreign = Task(
        task_id="x/1", source="mbpp", prompt="p", entry_point="f",
        reference_solution="def f(a):\n    return sorted(a)[0]\n",
        visible_tests=["assert f([2, 1]) == 1"],
    )
    assert wrong_solution(foreign, random.Random(0)) is None


def test_revise_examples_train_on_the_reference_after_the_feedback(policy, tasks):
    plain = sft_examples(policy, tasks, 512)
    both = sft_examples(policy, tasks, 512, revise_fraction=1.0)
    revise = [(ids, m) for ids, m in both if (ids, m) not in plain]
    assert len(plain) == len(tasks) and len(revise) == len(tasks)
    for (ids, mask), task in zip(revise, tasks, strict=True):
        n = mask.index(1)
        assert mask == [0] * n + [1] * (len(ids) - n)
        sig = P.signature(task)
        context = policy.tokenizer.decode(ids[:n])
        assert context.startswith(P.task_prompt(task)) and context.endswith(P.REVISE + sig)
        assert ids[n:] == policy.encode(P.completion_text(task.reference_solution, sig))


def test_without_revise_fraction_every_example_is_a_first_turn(policy, tasks):
    for ids, _ in sft_examples(policy, tasks, 512):
        assert P.FEEDBACK not in policy.tokenizer.decode(ids)


def _padded(batches, lengths) -> int:
    return sum(max(lengths[i] for i in b) * len(b) for b in batches)


def test_an_sft_epoch_uses_every_example_once_in_batches_of_similar_length():
    rng = random.Random(0)
    lengths = [rng.choice((60, 100, 220)) + rng.randint(0, 9) for _ in range(500)]
    batches = length_grouped_batches(lengths, 16, random.Random(1))
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) <= 16 for b in batches)
    order = random.Random(1).sample(range(500), 500)
    unsorted = [order[i : i + 16] for i in range(0, 500, 16)]
    assert _padded(batches, lengths) < 0.8 * _padded(unsorted, lengths)


def test_length_grouped_batches_are_shuffled_not_sorted_across_the_epoch():
    lengths = list(range(400))
    batches = length_grouped_batches(lengths, 10, random.Random(2))
    firsts = [b[0] for b in batches]
    assert firsts != sorted(firsts)
    assert length_grouped_batches(lengths, 10, random.Random(2)) == batches
