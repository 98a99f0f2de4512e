"""Synthetic repositories: small packages with one planted bug, checked with real pytest."""

from __future__ import annotations

import re

import pytest

from codeloop.data.repos.differential import DIFF_FILE
from codeloop.data.repos.diffs import apply_file_diff, file_diff, split_files
from codeloop.data.repos.mutate import OPERATORS
from codeloop.data.repos.synth import HIDDEN_FILE, REPAIRABLE, generate_repo_tasks
from tests._repo_pytest import git_apply, pytest_outcomes, write_tree


@pytest.fixture(scope="module")
def generated():
    return generate_repo_tasks(24, seed=7)


def test_the_same_seed_gives_the_same_tasks_and_trees():
    a, ta = generate_repo_tasks(8, seed=3)
    b, tb = generate_repo_tasks(8, seed=3)
    assert [t.to_row() for t in a] == [t.to_row() for t in b] and ta == tb


def test_two_seeds_share_no_repository():
    _, a = generate_repo_tasks(12, seed=0)
    _, b = generate_repo_tasks(12, seed=1)
    assert not set(a) & set(b)


def test_many_tasks_share_one_pristine_snapshot(generated):
    tasks, trees = generated
    assert len(trees) < len(tasks)
    assert {t.snapshot for t in tasks} == set(trees)


def test_repos_have_two_to_six_modules_of_a_few_short_lines(generated):
    _, trees = generated
    for files in trees.values():
        mods = [p for p in files if p.endswith(".py") and not p.startswith("tests/")
                and not p.endswith("__init__.py")]
        assert 2 <= len(mods) <= 6
        assert "README.md" in files and any(p.startswith("tests/test_") for p in files)
        for p in mods:
            lines = files[p].splitlines()
            assert len(lines) <= 20 and max(map(len, lines)) <= 60, p


def test_pristine_tree_passes_every_test_under_real_pytest(generated, tmp_path):
    tasks, trees = generated
    files = trees[tasks[0].snapshot]
    outcomes = pytest_outcomes(write_tree(tmp_path / "r", files))
    assert outcomes and set(outcomes.values()) == {"passed"}
    # a task lists the differential tests of its bug's chain, not the other chains'
    listed = set(tasks[0].visible_tests) | set(tasks[0].hidden_tests)
    assert listed <= set(outcomes)
    assert all(n.startswith(DIFF_FILE) for n in set(outcomes) - listed)


@pytest.mark.parametrize("k", range(4))
def test_bug_patch_fails_exactly_fail_to_pass_and_patch_fixes_it(generated, tmp_path, k):
    tasks, trees = generated
    task = tasks[k * 5]
    root = write_tree(tmp_path / "r", trees[task.snapshot])
    git_apply(root, task.bug_patch)
    buggy = pytest_outcomes(root)
    failing = {n for n, s in buggy.items() if s != "passed"}
    assert failing == set(task.fail_to_pass) | set(task.metadata["hidden_fail_to_pass"])
    git_apply(root, task.patch)
    assert set(pytest_outcomes(root).values()) == {"passed"}


def test_every_task_has_a_visible_failing_test_and_passing_ones(generated):
    tasks, _ = generated
    for t in tasks:
        assert t.fail_to_pass and set(t.fail_to_pass) <= set(t.visible_tests)
        assert not set(t.pass_to_pass) & set(t.fail_to_pass)
        assert {h.split("::")[0] for h in t.hidden_tests} == {HIDDEN_FILE, DIFF_FILE}


def test_the_problem_statement_never_shows_the_changed_line(generated):
    tasks, _ = generated
    for t in tasks:
        changed = [x[1:].strip() for x in t.patch.splitlines() if x[:1] in "+-" and x[1:2] != x[:1]]
        for line in changed:
            assert line not in t.prompt, (t.task_id, line)


def test_the_statement_names_the_call_and_both_values(generated):
    t = generated[0][0]
    assert re.search(r">>> \w+\(.*\)\n.+\n\nExpected .+\.", t.prompt), t.prompt


def test_patches_are_git_style_and_inverse(generated):
    tasks, trees = generated
    for t in tasks:
        ((path, lines),) = split_files(t.bug_patch).items()
        assert t.bug_patch.startswith(f"diff --git a/{path} b/{path}\n")
        buggy = apply_file_diff(trees[t.snapshot][path], lines)
        assert apply_file_diff(buggy, split_files(t.patch)[path]) == trees[t.snapshot][path]


def test_difficulty_counts_calls_and_a_module_crossing(generated):
    tasks, _ = generated
    for t in tasks:
        m = t.metadata
        assert t.difficulty == m["distance"] + int(m["cross_module"])
    assert len({t.difficulty for t in tasks}) >= 3


def test_max_distance_zero_plants_bugs_only_in_tested_functions():
    tasks, _ = generate_repo_tasks(10, seed=2, max_distance=0)
    assert {t.metadata["distance"] for t in tasks} == {0}


def test_a_file_diff_of_equal_texts_is_empty():
    assert file_diff("a.py", "x\n", "x\n") == ""


def test_the_statement_names_the_file_of_the_failing_function_as_a_path(generated):
    for t in generated[0]:
        assert f"is defined in {t.metadata['symptom_path']}." in t.prompt, t.prompt


def test_no_package_name_is_shadowed_by_a_standard_library_module():
    import sys

    from codeloop.data.repos.synth import PACKAGES

    assert not set(PACKAGES) & set(sys.stdlib_module_names)


def test_an_operator_list_plants_only_bugs_of_those_operators():
    tasks, _ = generate_repo_tasks(30, seed=5, operators=REPAIRABLE)
    assert {t.metadata["mutation"]["operator"] for t in tasks} <= set(REPAIRABLE)
    assert len(tasks) == 30


def test_an_unknown_or_empty_operator_list_is_refused():
    for bad in (("arith", "typo"), ()):
        with pytest.raises(ValueError, match="operators"):
            generate_repo_tasks(3, seed=5, operators=bad)


def test_the_repairable_operators_are_known_mutation_operators():
    assert set(REPAIRABLE) < set(OPERATORS)
