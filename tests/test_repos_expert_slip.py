"""The expert's slips (codeloop.data.repos.expert, slip=True): one wrong edit before the
first right one, answered no_match with the true lines by the real environment, and the
demonstration is kept only when that is what happened (codeloop.rollout.demos)."""

from __future__ import annotations

import pytest

from codeloop.agent.env import AgentEnv
from codeloop.agent.executor import open_executor
from codeloop.config import AgentConfig, SandboxConfig
from codeloop.data.repos.expert import expert_calls, slipped
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import generate_repo_tasks
from codeloop.rollout.demos import expert_demos
from codeloop.schema import Task


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("expert-slip")
    tasks, trees = generate_repo_tasks(6, seed=43, operators=("arith", "compare", "swap_args"))
    for files in trees.values():
        store_files(files, root / "repos")
    cfg = AgentConfig(envs_dir=str(root / "envs"), max_steps=500)
    sandbox = SandboxConfig(backend="local", workers=2, timeout_s=30.0)
    ex = open_executor(sandbox, cfg, [], workspaces=True)
    env = AgentEnv(ex, cfg, str(root / "repos"), str(root / "bases"))
    yield tasks, root / "repos", env
    ex.close()


@pytest.fixture(scope="module")
def played(world):
    tasks, repos, env = world
    return expert_demos(tasks, env, lambda t: expert_calls(t, repos, slip=True))


def test_a_slip_comes_once_right_before_the_first_edit(world):
    tasks, repos, _ = world
    for t in tasks:
        calls = expert_calls(t, repos, slip=True)
        at = [i for i, c in enumerate(calls) if c.get("slip")]
        first_edit = next(
            i for i, c in enumerate(calls) if c["tool"] == "edit" and not c.get("slip")
        )
        assert at == [first_edit - 1], (t.task_id, calls)
        assert calls[at[0]]["args"]["old"] != calls[first_edit]["args"]["old"]


def test_without_slip_the_calls_are_as_before(world):
    tasks, repos, _ = world
    assert all(not any(c.get("slip") for c in expert_calls(t, repos)) for t in tasks)


def test_slipped_demos_are_kept_and_the_slip_met_no_match_with_the_true_line(played, world):
    demos, report = played
    assert report["demos"] == len(world[0]), report
    for _, steps in demos:
        k = next(i for i, (c, _) in enumerate(steps) if c.get("slip"))
        obs, right = steps[k][1], steps[k + 1][0]
        assert obs.error_kind == "no_match"
        assert right["args"]["old"].strip() in obs.output.split("closest lines are", 1)[1]
        assert steps[k + 1][1].error_kind == "" and steps[-1][0]["tool"] == "submit"


def test_a_slip_that_matches_the_file_rejects_the_demo(world):
    tasks, repos, env = world
    calls = expert_calls(tasks[0], repos)
    edit = next(c for c in calls if c["tool"] == "edit")
    at = calls.index(edit)
    bad = [*calls[:at], {**edit, "slip": True}, *calls[at:]]  # a "slip" that applies cleanly
    kept, report = expert_demos(tasks[:1], env, lambda t: bad)
    assert kept == [] and report["reasons"] == {"slip:matched": 1}


def test_the_slipped_share_follows_the_fraction():
    tasks = [Task(f"t{i}", "synthetic_repo", "p", kind="repo") for i in range(2000)]
    share = sum(slipped(t, 0.3) for t in tasks) / len(tasks)
    assert 0.27 < share < 0.33
    assert not any(slipped(t, 0.0) for t in tasks) and all(slipped(t, 1.0) for t in tasks)
