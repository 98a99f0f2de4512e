"""Differential hidden tests of synthetic repositories: every function called directly on
mutated inputs against the pristine tree's outputs, hidden from the agent, run by the judge."""

from __future__ import annotations

import random
import time

import pytest

from codeloop.agent.judge import judge_many
from codeloop.agent.workspace import materialize_base
from codeloop.config import SandboxConfig
from codeloop.data.repos.differential import (
    DIFF_FILE,
    MAX_OUTPUT_REPR,
    PER_FUNCTION,
    RANGE_CAP,
    cap_ranges,
    capped_range,
    reference_cases,
)
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import HIDDEN_FILE, generate_repo, generate_repo_tasks
from codeloop.sandbox import make_executor


@pytest.fixture(scope="module")
def generated():
    return generate_repo_tasks(24, seed=7)


def _diff_nodes(task) -> list[str]:
    return [n for n in task.hidden_tests if n.startswith(DIFF_FILE + "::")]


def test_every_function_of_a_repo_is_called_directly_a_few_times():
    repo = generate_repo("7:0", 3, 3)
    counts: dict[str, int] = {}
    for _, name, _, _ in repo.diff_tests:
        counts[name] = counts.get(name, 0) + 1
    assert set(counts) == {f.name for f in repo.fns}
    assert set(counts.values()) <= set(range(1, PER_FUNCTION + 1))
    text = repo.files[DIFF_FILE]
    for f in repo.fns:
        assert f"from {repo.package}.{repo.modules[f.module]} import {f.name}\n" in text


def test_the_inputs_go_beyond_the_chain_tests_small_positive_draws(generated):
    _, trees = generated
    text = "\n".join(files[DIFF_FILE] for files in trees.values())
    assert "([])" in text and "(-" in text and "1000000000" in text


def test_the_same_seed_writes_the_same_differential_file_and_another_seed_another():
    assert (
        generate_repo("3:1", 3, 3).files[DIFF_FILE] == generate_repo("3:1", 3, 3).files[DIFF_FILE]
    )
    assert (
        generate_repo("3:1", 3, 3).files[DIFF_FILE] != generate_repo("3:2", 3, 3).files[DIFF_FILE]
    )


def test_an_input_the_pristine_function_raises_on_is_not_written():
    def only_three(x):
        if x != 3:
            raise ValueError(x)
        return 3

    cases = reference_cases({"f": only_three}, "f", [(3,)], random.Random(0))
    assert cases == [((3,), 3)]


def test_an_input_with_a_huge_expected_value_is_not_written():
    def wide(x):
        return 0 if x == 5 else list(range(500))

    cases = reference_cases({"f": wide}, "f", [(5,)], random.Random(0))
    assert cases == [((5,), 0)]
    assert len(repr(list(range(500)))) > MAX_OUTPUT_REPR


def test_an_input_that_needs_a_huge_range_raises_at_once_and_is_not_written():
    ns = cap_ranges({})
    exec("def upto(x):\n    return sum(1 for _ in range(1, x))\n", ns)  # noqa: S102 - our code
    start = time.monotonic()
    cases = reference_cases(ns, "upto", [(5,), (7,)], random.Random(0))
    assert time.monotonic() - start < 5
    assert cases and all(abs(args[0]) <= RANGE_CAP for args, _ in cases)


def test_a_huge_bound_is_refused_even_where_the_range_is_empty():
    # range(3, -10**9) is empty, but a swap_args bug builds range(-10**9, 3) in the judge;
    # this upto takes only such bounds, so without the cap a test of -10**9 would be kept
    ns = cap_ranges({})
    src = f"def upto(x):\n    if x >= -{RANGE_CAP}:\n        raise ValueError(x)\n"
    exec(src + "    return list(range(3, x))\n", ns)  # noqa: S102 - our code
    assert reference_cases(ns, "upto", [(5,)], random.Random(0)) == []
    with pytest.raises(OverflowError):
        capped_range(3, -(10**9))


def test_each_task_lists_the_differential_tests_of_its_bugs_function_and_callers(generated):
    tasks, _ = generated
    for t in tasks:
        names = {n.split("::")[1].rsplit("_", 1)[0][len("test_") :] for n in _diff_nodes(t)}
        assert t.metadata["mutation"]["function"] in names
        assert len(names) == t.metadata["distance"] + 1  # the function and the callers above


def test_some_bug_fails_differential_tests_that_the_chains_hidden_tests_miss(generated):
    tasks, _ = generated
    missed = [
        t
        for t in tasks
        if not any(n.startswith(HIDDEN_FILE) for n in t.metadata["hidden_fail_to_pass"])
        and any(n.startswith(DIFF_FILE) for n in t.metadata["hidden_fail_to_pass"])
    ]
    assert missed


def test_the_differential_file_is_never_in_the_agents_workspace(generated, tmp_path):
    tasks, trees = generated
    repos = tmp_path / "repos"
    for files in trees.values():
        store_files(files, repos)
    for i, t in enumerate(tasks):
        ws = tmp_path / f"ws{i}"
        materialize_base(t, str(repos), str(ws))
        shown = {str(p.relative_to(ws)) for p in ws.rglob("*") if p.is_file()}
        assert shown == set(trees[t.snapshot]) - {HIDDEN_FILE, DIFF_FILE}, t.task_id


@pytest.fixture(scope="module")
def judged(generated, tmp_path_factory):
    """The judge's verdicts on the reference patch and the empty one of the tasks whose
    bug only differential tests catch among the hidden ones, plus one more task."""
    tasks, trees = generated
    tmp = tmp_path_factory.mktemp("judge")
    for files in trees.values():
        store_files(files, tmp / "repos")
    chosen = [
        t
        for t in tasks
        if not any(n.startswith(HIDDEN_FILE) for n in t.metadata["hidden_fail_to_pass"])
    ][:2] + tasks[:1]
    (tmp / "envs").mkdir()
    ex = make_executor(
        SandboxConfig(workers=2, timeout_s=30.0), workspaces=True, envs_root=str(tmp / "envs")
    )
    try:
        items = [(t, p) for t in chosen for p in (t.patch, "")]
        return items, judge_many(items, str(tmp / "repos"), ex)
    finally:
        ex.close()


def test_the_judge_runs_the_differential_tests_and_the_reference_passes_them(judged):
    for (t, patch), v in zip(*judged, strict=True):
        if patch:
            ran = {n: v.outcomes.get(n) for n in _diff_nodes(t)}
            assert ran and set(ran.values()) == {"passed"}, (t.task_id, ran)
            assert v.resolved and v.hidden_passed == v.hidden_total == len(t.hidden_tests)


def test_the_judge_fails_the_buggy_trees_differential_tests_it_was_told_of(judged):
    for (t, patch), v in zip(*judged, strict=True):
        if not patch:
            want = [n for n in t.metadata["hidden_fail_to_pass"] if n.startswith(DIFF_FILE)]
            assert want and {v.outcomes.get(n) for n in want} == {"failed"}, t.task_id
            assert not v.resolved
