"""Batched pytest runs (testrun.run_batched): several sessions share one interpreter and
pytest start-up in one sealed command, each in its own tree, reported apart; the clean
stage's verification gives the same verdicts batched as with one command per run."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from codeloop.agent.envdirs import plugin_env, pytest_env
from codeloop.agent.testrun import run_batched
from codeloop.config import SandboxConfig
from codeloop.data.repos.curate_repos import verify_repo_tasks
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import generate_repo_tasks
from codeloop.sandbox import make_executor

# every tree has a module of the same name with its own value: a run that saw another
# run's module (sys.modules or sys.path leaking between runs) would fail
TREES = {
    "one": (
        "X = 1\n",
        "import shared\n\n\ndef test_x():\n    print('out of one')\n    assert shared.X == 1\n",
    ),  # noqa: E501
    "two": (
        "X = 2\n",
        "import shared\n\n\ndef test_x():\n    print('out of two')\n    assert shared.X == 2\n",
    ),  # noqa: E501
    "bad": (
        "X = 3\n",
        "import shared\n\n\ndef test_x():\n    assert shared.X == 4\n\n\ndef test_y():\n    pass\n",
    ),  # noqa: E501
    "hang": ("X = 5\n", "import time\n\n\ndef test_sleeps():\n    time.sleep(120)\n"),
    "nocollect": ("X = 6\n", "import nonexistent_module\n"),
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    envs = tmp_path_factory.mktemp("envs")
    ex = make_executor(SandboxConfig(workers=2, timeout_s=30.0), workspaces=True,
                       envs_root=str(envs))
    yield ex, [pytest_env(str(envs)), plugin_env(str(envs))], str(envs)
    ex.close()


def _batch(ex, names):
    ws = ex.workspaces.new_workspace()
    for name in set(names):
        os.mkdir(os.path.join(ws, name))
        mod, test = TREES[name]
        with open(os.path.join(ws, name, "shared.py"), "w") as fh:
            fh.write(mod)
        with open(os.path.join(ws, name, "test_it.py"), "w") as fh:
            fh.write(test)
    return ws


@pytest.fixture(scope="module")
def reports(sandbox):
    ex, env, _ = sandbox
    names = ["one", "two", "bad", "hang", "nocollect", "one"]
    ws = _batch(ex, names)
    return run_batched(ex, [(ws, [(n, None) for n in names])], env, 4.0)[0]


def test_each_run_reports_its_own_trees_outcomes_in_order(reports):
    assert [r.outcomes for r in reports[:3]] == [
        {"test_it.py::test_x": "passed"},
        {"test_it.py::test_x": "passed"},
        {"test_it.py::test_x": "failed", "test_it.py::test_y": "passed"},
    ]
    assert reports[5].outcomes == {"test_it.py::test_x": "passed"}


def test_a_failing_run_carries_its_failure_and_exit_code(reports):
    bad = reports[2]
    assert bad.exit_code == 1 and bad.collected_ok and "assert 3 == 4" in bad.first_failure


def test_a_hanging_run_times_out_alone_and_the_next_runs_still_run(reports):
    assert reports[3].status == "timeout" and not reports[3].collected_ok
    assert reports[4].status == "exited" and reports[5].status == "exited"


def test_a_run_whose_tests_do_not_collect_says_so(reports):
    assert reports[4].status == "exited" and not reports[4].collected_ok


def test_each_runs_output_is_its_own(reports):
    assert "out of one" not in reports[1].output_tail
    assert "1 passed" in reports[1].output_tail and "1 failed" in reports[2].output_tail


def test_node_ids_select_the_tests_of_a_run(sandbox):
    ex, env, _ = sandbox
    ws = _batch(ex, ["bad"])
    got = run_batched(ex, [(ws, [("bad", ["test_it.py::test_y"])])], env, 10.0)[0]
    assert got[0].outcomes == {"test_it.py::test_y": "passed"}


def test_batched_verification_gives_the_verdicts_of_one_command_per_run(sandbox, tmp_path):
    ex, _, envs = sandbox
    tasks, trees = generate_repo_tasks(6, seed=21)
    for files in trees.values():
        store_files(files, tmp_path / "repos")
    tasks[1] = replace(
        tasks[1], fail_to_pass=tasks[1].pass_to_pass[:1], pass_to_pass=tasks[1].fail_to_pass
    )  # its F2P passes on the base
    tasks[4] = replace(tasks[4], patch="")  # the empty patch fixes nothing
    got = {}
    for batched in (False, True):
        kept, dropped = verify_repo_tasks(tasks, str(tmp_path / "repos"), ex, 1, envs, 30.0,
                                          batched=batched)
        got[batched] = ([t.task_id for t in kept], [(d["task_id"], d["reason"]) for d in dropped])
    assert got[True] == got[False]
    assert got[True][1] == [(tasks[1].task_id, "fail_to_pass_passes_unfixed"),
                            (tasks[4].task_id, "reference_failed")]
