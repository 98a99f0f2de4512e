"""The scripted expert: its calls are valid tools in a sensible order, and its edits fix
the task under real pytest (the environment run is in test_repos_expert_env.py)."""

from __future__ import annotations

import pytest

from codeloop.data.repos.expert import expert_calls
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import HIDDEN_FILE, generate_repo_tasks
from codeloop.schema import TOOLS
from tests._repo_pytest import git_apply, pytest_outcomes, write_tree


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    tasks, trees = generate_repo_tasks(30, seed=11)
    repos = tmp_path_factory.mktemp("repos")
    for files in trees.values():
        store_files(files, repos)
    return tasks, trees, repos


def test_calls_use_only_the_agents_tools_and_end_in_submit(stored):
    tasks, _, repos = stored
    for t in tasks:
        calls = expert_calls(t, repos)
        assert all(c["tool"] in TOOLS and isinstance(c["args"], dict) for c in calls)
        assert [c["tool"] for c in calls[:2]] == ["run_tests", "read_file"]
        assert [c["tool"] for c in calls[-2:]] == ["run_tests", "submit"]


def test_it_searches_only_when_the_cause_is_in_another_module(stored):
    tasks, _, repos = stored
    crossed = [t for t in tasks if t.metadata["cross_module"]]
    assert crossed and len(crossed) < len(tasks)
    for t in tasks:
        tools = [c["tool"] for c in expert_calls(t, repos)]
        assert ("search" in tools) == t.metadata["cross_module"], t.task_id


def test_every_edited_file_was_read_before_its_edit(stored):
    tasks, _, repos = stored
    for t in tasks:
        read: set[str] = set()
        for c in expert_calls(t, repos):
            if c["tool"] == "read_file":
                read.add(c["args"]["path"])
            if c["tool"] == "edit":
                assert c["args"]["path"] in read, t.task_id


def _play_edits(root, calls):
    """Apply edit calls as the edit tool defines them: exact, unique match of old."""
    for c in calls:
        if c["tool"] == "edit":
            p = root / c["args"]["path"]
            text = p.read_text()
            assert text.count(c["args"]["old"]) == 1, c
            p.write_text(text.replace(c["args"]["old"], c["args"]["new"]))


@pytest.mark.parametrize("with_repos", [True, False])
def test_its_edits_resolve_the_task_under_real_pytest(stored, tmp_path, with_repos):
    tasks, trees, repos = stored
    for k, t in enumerate(tasks[:6]):
        root = write_tree(tmp_path / f"r{k}", trees[t.snapshot])
        git_apply(root, t.bug_patch)
        (root / HIDDEN_FILE).unlink()  # the workspace has no hidden tests
        _play_edits(root, expert_calls(t, repos if with_repos else None))
        outcomes = pytest_outcomes(root)
        assert set(t.fail_to_pass) | set(t.pass_to_pass) <= set(outcomes)
        assert set(outcomes.values()) == {"passed"}, t.task_id


def test_edits_read_from_the_snapshot_are_no_longer_than_the_hunk(stored):
    tasks, _, repos = stored
    for t in tasks:
        small = [c for c in expert_calls(t, repos) if c["tool"] == "edit"]
        whole = [c for c in expert_calls(t) if c["tool"] == "edit"]
        assert all(
            len(a["args"]["old"]) <= len(b["args"]["old"])
            for a, b in zip(small, whole, strict=True)
        )
