"""Repository tasks in the real sealed sandbox: the clean stage's executability filter
(reference patch resolves, empty patch does not) and the scripted expert's edits played
on a real workspace resolve the task."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from codeloop.agent.envdirs import env_paths
from codeloop.agent.patches import apply_patch
from codeloop.agent.testrun import run_pytest
from codeloop.agent.workspace import BaseCache, Workspace, copy_tree
from codeloop.config import SandboxConfig, parse_params
from codeloop.data.curate import curate
from codeloop.data.repos.diffs import file_diff
from codeloop.data.repos.expert import expert_calls
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import generate_repo_tasks
from codeloop.io import read_json, read_tasks, write_tasks
from codeloop.sandbox import make_executor


def _params(sources):
    return parse_params(
        {
            "clean": {"sources": sources, "frozen": [], "verify_runs": 0, "repo_verify_runs": 1,
                      "repo_tasks": {"enabled": False}},  # the default's synthetic repos are off here
            "sandbox": {"backend": "local", "timeout_s": 30},
        }
    )


def test_every_generated_task_passes_the_executability_filter(tmp_path):
    report = curate(_params([{"kind": "synthetic_repo", "n": 8, "seed": 12}]), tmp_path / "out")
    assert report["kept_repo"] == 8 and report["dropped"] == 0 and report["balanced"]


def _garble_removed_line(patch: str) -> str:
    lines = patch.splitlines(keepends=True)
    i = next(i for i, x in enumerate(lines) if x.startswith("-") and not x.startswith("---"))
    lines[i] = "-nothing like this line\n"
    return "".join(lines)


@pytest.fixture(scope="module")
def tampered(tmp_path_factory):
    """A task directory with one good task and three broken ones, through clean."""
    tmp = tmp_path_factory.mktemp("tampered")
    tasks, trees = generate_repo_tasks(4, seed=13)
    good, a, b, c = tasks
    readme = trees[a.snapshot]["README.md"]
    bad = [
        replace(a, patch=file_diff("README.md", readme, readme + "More.\n")),  # fixes nothing
        replace(b, fail_to_pass=b.pass_to_pass[:1], pass_to_pass=b.fail_to_pass),  # F2P passes
        replace(c, patch=_garble_removed_line(c.patch)),  # does not apply
    ]
    d = tmp / "minted"
    for files in trees.values():
        store_files(files, d / "repos")
    write_tasks(d / "tasks.parquet", [good, *bad])
    report = curate(_params([{"kind": "repo", "path": str(d)}]), tmp / "out")
    return report, [good, *bad]


def test_a_reference_patch_that_fixes_nothing_is_dropped(tampered):
    report, tasks = tampered
    reasons = {d["task_id"]: d["reason"] for d in report["dropped_tasks"]}
    assert reasons[tasks[1].task_id] == "reference_failed"


def test_a_task_the_empty_patch_would_resolve_is_dropped(tampered):
    report, tasks = tampered
    reasons = {d["task_id"]: d["reason"] for d in report["dropped_tasks"]}
    assert reasons[tasks[2].task_id] == "fail_to_pass_passes_unfixed"


def test_a_reference_patch_that_does_not_apply_is_dropped(tampered):
    report, tasks = tampered
    reasons = {d["task_id"]: d["reason"] for d in report["dropped_tasks"]}
    assert reasons[tasks[3].task_id] == "reference_does_not_apply"


def test_only_the_sound_task_is_kept_and_the_books_balance(tampered):
    report, tasks = tampered
    assert report["kept_repo"] == 1 and report["balanced"] and report["dropped"] == 3


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("expert")
    tasks, trees = generate_repo_tasks(12, seed=14)
    for files in trees.values():
        store_files(files, root / "repos")
    (root / "envs").mkdir()
    ex = make_executor(SandboxConfig(backend="local", workers=2, timeout_s=30.0),
                       workspaces=True, envs_root=str(root / "envs"))
    cache = BaseCache(str(root / "repos"), str(root / "bases"))
    yield ex, tasks, root, cache
    ex.close()


def _edit(ws_path, call):
    """The edit tool's contract: ``old`` must occur exactly once."""
    p = Path(ws_path) / call["args"]["path"]
    text = p.read_text()
    assert text.count(call["args"]["old"]) == 1, call
    p.write_text(text.replace(call["args"]["old"], call["args"]["new"]))


def test_the_experts_episode_resolves_tasks_in_a_real_workspace(sandbox):
    ex, tasks, root, cache = sandbox
    for t in tasks[:6]:
        paths = env_paths(t, str(root / "envs"))
        ws = Workspace.create(t, cache, ex.workspaces.new_workspace)
        try:
            for call in expert_calls(t, root / "repos"):
                if call["tool"] == "edit":
                    _edit(ws.path, call)
                elif call["tool"] == "search":  # the pattern finds the function to fix
                    cause = t.metadata["mutation"]["path"]
                    assert re.search(call["args"]["pattern"], (Path(ws.path) / cause).read_text())
                elif call["tool"] == "read_file":  # it reads a file the workspace has
                    assert (Path(ws.path) / call["args"]["path"]).is_file(), call
            visible = run_pytest(ex, ws, t.visible_tests, paths, 30)
            assert visible.collected_ok and set(visible.outcomes.values()) == {"passed"}
            # judged as the score stage will: the final diff on a fresh full base, hidden
            # tests restored
            fresh = ex.workspaces.new_workspace()
            copy_tree(str(root / "repos" / t.snapshot), fresh)
            apply_patch(fresh, t.bug_patch)
            apply_patch(fresh, ws.diff())
            judged = run_pytest(ex, fresh, [*t.fail_to_pass, *t.pass_to_pass, *t.hidden_tests],
                                paths, 30)
            assert set(judged.outcomes.values()) == {"passed"}, t.task_id
        finally:
            ws.destroy()


def test_without_the_experts_edit_the_task_stays_unresolved(sandbox):
    ex, tasks, root, cache = sandbox
    t = tasks[0]
    ws = Workspace.create(t, cache, ex.workspaces.new_workspace)
    try:
        report = run_pytest(ex, ws, t.visible_tests, env_paths(t, str(root / "envs")), 30)
        assert {n for n, s in report.outcomes.items() if s != "passed"} == set(t.fail_to_pass)
        assert ws.diff() == ""
    finally:
        ws.destroy()


def test_the_clean_output_tasks_load_with_their_snapshots(tmp_path):
    curate(_params([{"kind": "synthetic_repo", "n": 3, "seed": 15}]), tmp_path / "out")
    for t in read_tasks(tmp_path / "out" / "tasks.parquet"):
        assert (tmp_path / "out" / "repos" / t.snapshot).is_dir()


def test_the_clean_stage_with_the_switch_on_writes_repo_tasks_beside_function_tasks(tmp_path):
    from codeloop.paths import Paths
    from codeloop.stages import clean

    params = parse_params({
        "clean": {"sources": [{"kind": "synthetic", "n": 6, "seed": 0}], "frozen": [],
                  "verify_runs": 1, "heldout_fraction": 0.0,
                  "repo_tasks": {"enabled": True, "n": 4, "heldout_n": 2}},
        "sandbox": {"backend": "local", "timeout_s": 30},
    })
    paths = Paths(tmp_path)
    report = clean.run(params, paths)
    tasks = read_tasks(paths.clean_tasks)
    assert sorted({t.kind for t in tasks}) == ["function", "repo"] and report["kept_repo"] == 4
    assert report["frozen"]["heldout_repo"] == 2 and report["balanced"]
    used = {t.snapshot for t in tasks if t.kind == "repo"}
    used |= {t.snapshot for t in read_tasks(paths.frozen_dir / "heldout_repo.parquet")}
    assert {p.name for p in (paths.clean_dir / "repos").iterdir()} == used
    metrics = read_json(paths.metrics("clean"))  # the stage's wall time, verification's share
    assert 0 < metrics["repo_verify_seconds"] < metrics["seconds"]


@pytest.mark.docker
def test_the_executability_filter_gives_the_same_verdicts_on_the_docker_backend(tmp_path):
    from codeloop.data.repos.curate_repos import RepoVerifier
    from codeloop.sandbox.docker_backend import skip_without_docker_engine

    skip_without_docker_engine()
    tasks, trees = generate_repo_tasks(3, seed=16)
    for files in trees.values():
        store_files(files, tmp_path / "clean" / "repos")
    swapped = replace(tasks[0], task_id="swapped", fail_to_pass=tasks[0].pass_to_pass[:1],
                      pass_to_pass=tasks[0].fail_to_pass)
    params = parse_params({"clean": {"repo_verify_runs": 1},
                           "sandbox": {"backend": "docker", "timeout_s": 30}})
    verifier = RepoVerifier(params, tmp_path / "clean" / "repos")
    try:
        kept, dropped = verifier.verify([*tasks, swapped])
    finally:
        verifier.close()
    assert [t.task_id for t in kept] == [t.task_id for t in tasks]
    assert [(d["task_id"], d["reason"]) for d in dropped] == [
        ("swapped", "fail_to_pass_passes_unfixed")
    ]
