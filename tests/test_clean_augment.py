"""Test augmentation of function tasks, on the real sandbox: new inputs, reference values,
set cover over mutants, placement, determinism and the tests_version stamp."""

from __future__ import annotations

import pytest

from codeloop.config.data import AugmentConfig
from codeloop.data.augment import NO_AUGMENT, augment_tasks
from codeloop.data.augment import tests_version as version_of_tests
from codeloop.data.holdout import split_tests
from codeloop.data.testinputs import calls_of, candidate_inputs
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import ExecJob
from codeloop.schema import Task

SQ = Task(
    task_id="t/sq",
    source="mbpp",
    prompt="Square of the sum of the even numbers.",
    entry_point="sq",
    reference_solution=(
        "def sq(xs):\n    total = 0\n    for x in xs:\n        if x % 2 == 0:\n"
        "            total += x\n    return total * total\n"
    ),
    # (total + total) == (total * total) at 2 and at 0: these tests let that mutant live
    visible_tests=["assert sq([2]) == 4"],
    hidden_tests=["assert sq([]) == 0"],
)
NEG = Task(
    task_id="t/neg",
    source="mbpp",
    prompt="Half of a non-negative number.",
    entry_point="half",
    reference_solution=(
        "def half(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x // 2\n"
    ),
    visible_tests=["assert half(8) == 4"],
    hidden_tests=["assert half(3) == 1"],
)
FLAKY = Task(
    task_id="t/flaky",
    source="mbpp",
    prompt="A number plus noise.",
    entry_point="noisy",
    reference_solution="import time\n\ndef noisy(x):\n    return x + time.perf_counter_ns()\n",
    visible_tests=["assert noisy(1) > 0"],
    hidden_tests=["assert noisy(2) > 0"],
)


@pytest.fixture(scope="module")
def executor():
    from codeloop.config import SandboxConfig

    ex = make_executor(SandboxConfig(workers=2, timeout_s=5.0))
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def augmented(executor):
    return augment_tasks([SQ, NEG, FLAKY], executor, AugmentConfig(), runs=2)


def _added(t: Task) -> list[str]:
    vis, hid = t.metadata["augmented_visible"], t.metadata["augmented_hidden"]
    return (
        t.visible_tests[len(t.visible_tests) - vis :] + t.hidden_tests[len(t.hidden_tests) - hid :]
    )


def test_calls_of_reads_literal_arguments_of_the_entry_point_only():
    assert calls_of("assert f(1, [2]) == g(3)", "f") == [(1, [2])]
    assert calls_of("assert f(x) == 1", "f") == []  # not a literal


def test_candidate_inputs_keep_the_types_and_never_repeat_a_seen_input():
    import random

    cands = candidate_inputs([([1, 2],)], random.Random(0), n_random=5)
    assert ([1, 2],) not in cands and ([],) in cands and ([2, 1],) in cands
    assert all(isinstance(a[0], list) for a in cands)


def test_every_added_test_passes_on_the_reference(executor, augmented):
    tasks, _ = augmented
    for t in tasks[:2]:
        res = executor.run(
            ExecJob(code=t.reference_solution, tests=t.all_tests(), entry_point=t.entry_point)
        )
        assert res.passed and len(_added(t)) >= 1, t.task_id


def test_added_tests_kill_a_mutant_the_task_s_own_tests_let_live(augmented):
    tasks, rows = augmented
    sq = rows[0]
    assert sq["mutation_score_after"] > sq["mutation_score_before"]
    assert len(tasks[0].all_tests()) == sq["tests_after"] > sq["tests_before"] == 2


def test_an_input_that_makes_the_reference_raise_is_dropped(augmented):
    tasks, _ = augmented
    added = _added(tasks[1])
    assert added and not any("half(-" in s for s in added)


def test_a_reference_that_answers_differently_across_runs_adds_no_test(augmented):
    tasks, rows = augmented
    assert rows[2]["accepted"] == 0 and _added(tasks[2]) == []


def test_augmentation_is_deterministic(executor, augmented):
    again, _ = augment_tasks([SQ, NEG], executor, AugmentConfig(), runs=2)
    assert [t.all_tests() for t in again] == [t.all_tests() for t in augmented[0][:2]]


def test_added_tests_go_hidden_and_only_the_configured_share_visible(executor):
    none_visible, _ = augment_tasks([SQ], executor, AugmentConfig(visible_share=0.0), runs=2)
    all_visible, _ = augment_tasks([SQ], executor, AugmentConfig(visible_share=1.0), runs=2)
    assert none_visible[0].visible_tests == SQ.visible_tests
    assert all_visible[0].hidden_tests == SQ.hidden_tests
    assert len(all_visible[0].visible_tests) > len(SQ.visible_tests)


def test_hidden_added_tests_never_reach_the_prompt(augmented):
    from codeloop.policy.prompts import task_prompt

    t = augmented[0][0]
    hidden_added = t.hidden_tests[len(t.hidden_tests) - t.metadata["augmented_hidden"] :]
    prompt = task_prompt(t, max_tests=len(t.all_tests()))
    assert hidden_added and not any(s in prompt for s in hidden_added)


def test_tasks_with_setup_code_are_left_alone_with_the_reason(executor):
    t = Task(
        task_id="t/setup",
        source="mbpp",
        prompt="p",
        entry_point="f",
        reference_solution="def f(x):\n    return x\n",
        setup_code="import math",
        visible_tests=["assert f(1) == 1"],
        hidden_tests=["assert f(2) == 2"],
    )
    (out,), (row,) = augment_tasks([t], executor, AugmentConfig(), runs=2)
    assert row["skipped"] == "setup_code" and out.all_tests() == t.all_tests()


def test_the_tests_version_changes_with_the_config_and_is_none_when_disabled():
    assert version_of_tests(AugmentConfig()) != version_of_tests(AugmentConfig(max_tests=3))
    assert version_of_tests(AugmentConfig(enabled=False)) == NO_AUGMENT


def test_split_then_augment_keeps_the_task_s_own_split(executor):
    t = split_tests(SQ, 0.5, 1)
    (out,), _ = augment_tasks([t], executor, AugmentConfig(), runs=2)
    assert out.visible_tests[: len(t.visible_tests)] == t.visible_tests
    assert out.hidden_tests[: len(t.hidden_tests)] == t.hidden_tests


def test_a_model_test_joins_the_hidden_tests_only_if_the_reference_passes_and_a_mutant_fails(
    executor,
):
    offered = {
        SQ.task_id: [
            "assert sq([2, 4]) == 36",  # right, and total + total gives 12: a mutant fails it
            "assert sq([2]) == 5",  # wrong: the reference fails it
            "assert 1 + 1 == 2",  # the reference passes, so does every mutant: it pins nothing
        ]
    }
    (out,), (row,) = augment_tasks(
        [SQ], executor, AugmentConfig(max_tests=0, min_tests=0), runs=2, model_tests=offered
    )
    assert out.hidden_tests == [*SQ.hidden_tests, "assert sq([2, 4]) == 36"]
    assert out.visible_tests == SQ.visible_tests
    assert (row["model_tests_offered"], row["model_tests_kept"]) == (3, 1)


def test_bad_rows_of_a_model_tests_file_are_quarantined_naming_row_and_field(tmp_path):
    from codeloop.data.augment import load_model_tests

    path = tmp_path / "model_tests.jsonl"
    path.write_text(
        '{"task_id": "t/sq", "tests": ["assert sq([2]) == 4"]}\n'
        '{"task_id": "t/sq", "tests": "assert"}\n{broken\n'
    )
    tests, bad = load_model_tests(str(path))
    assert tests == {"t/sq": ["assert sq([2]) == 4"]}
    assert [(q["row"], q["field"]) for q in bad] == [(2, "tests"), (3, "")]
    assert all(q["file"] == str(path) for q in bad)


def test_model_tests_collects_the_distinct_asserts_of_tdd_episodes_only(tmp_path):
    from codeloop.cli import main
    from codeloop.commands.model_tests import collect
    from codeloop.io import write_trajectories
    from tests._rewards_fixtures import traj

    tdd = [traj("def sq(xs):\n    return 0\n", tid=f"t{i}", task=SQ) for i in range(3)]
    for t, tests in zip(
        tdd,
        [
            "assert sq([2]) == 4\nx = 1",
            "assert sq([2]) == 4\nassert sq([]) == 0",
            "assert sq([3]) == 0",
        ],
        strict=True,
    ):
        t.model_tests, t.metadata.episode_mode = tests, "tdd"
    tdd[2].metadata.episode_mode = ""  # a self_debug row's text is not a test
    assert collect(tdd) == [
        {"task_id": SQ.task_id, "tests": ["assert sq([2]) == 4", "assert sq([]) == 0"]}
    ]
    write_trajectories(tmp_path / "trajs", tdd)
    out = tmp_path / "model_tests.jsonl"
    assert main(["model-tests", "--trajectories", str(tmp_path / "trajs"), "--out", str(out)]) == 0
    assert out.read_text().count("\n") == 1
