"""The procedural task generator: deterministic, distinct, self-consistent tasks."""

from __future__ import annotations

import collections

import pytest

from codeloop.data.generator import generate_tasks


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(300, seed=7, max_depth=3)


def test_same_seed_gives_identical_tasks():
    a = [t.to_row() for t in generate_tasks(40, seed=3, max_depth=3)]
    b = [t.to_row() for t in generate_tasks(40, seed=3, max_depth=3)]
    assert a == b


def test_different_seeds_give_different_tasks():
    a = {t.task_id for t in generate_tasks(40, seed=1)}
    b = {t.task_id for t in generate_tasks(40, seed=2)}
    assert len(a & b) < 5


def test_task_ids_are_unique_and_prefixed(tasks):
    ids = [t.task_id for t in tasks]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("synth/") for i in ids)


def test_every_reference_solution_passes_its_own_tests(tasks):
    for t in tasks:
        env: dict = {}
        exec(t.reference_solution, env)  # our own generated code, not model output
        for test in t.visible_tests:
            exec(test, env)


def test_each_task_has_five_to_eight_tests_all_visible(tasks):
    assert all(5 <= len(t.visible_tests) <= 8 and not t.hidden_tests for t in tasks)


def test_difficulty_is_the_number_of_composed_operations(tasks):
    for t in tasks:
        body = t.reference_solution.strip().splitlines()[1:-1]
        assert t.difficulty == len(body) == len(t.metadata["ops"])


def test_all_depths_up_to_max_depth_are_present(tasks):
    depths = collections.Counter(t.difficulty for t in tasks)
    assert set(depths) == {1, 2, 3}


def test_no_task_is_solved_by_returning_a_constant(tasks):
    for t in tasks:
        outs = {test.split(" == ", 1)[1] for test in t.visible_tests}
        assert len(outs) >= 3, t.task_id


def test_metadata_carries_license_and_provenance():
    t = generate_tasks(1, seed=5)[0]
    assert t.source == "synthetic"
    assert t.metadata["license"] == "CC0 (generated)"
    assert t.metadata["provenance"]["seed"] == 5


def test_prompt_names_the_entry_point(tasks):
    assert all(f"{t.entry_point}(" in t.prompt for t in tasks)


def test_impossible_request_raises_a_clear_error():
    with pytest.raises(ValueError, match="max_depth=1"):
        generate_tasks(5000, seed=0, max_depth=1)


def test_depth_mix_is_weighted_towards_easy_tasks(tasks):
    depths = collections.Counter(t.difficulty for t in tasks)
    assert depths[1] > depths[3] and depths[2] > depths[3]


def test_each_argument_type_has_one_name(tasks):
    names = collections.defaultdict(set)
    for t in tasks:
        arg = t.reference_solution.split("(", 1)[1].split(")", 1)[0]
        names[t.prompt.split(" that takes ", 1)[1].split(",", 1)[0]].add(arg)
    assert names and all(len(v) == 1 for v in names.values())


def test_each_step_of_the_prompt_is_one_line_of_the_solution(tasks):
    for t in tasks:
        steps = t.prompt.split(", and returns", 1)[0].split(", then ")
        assert len(steps) == t.difficulty
