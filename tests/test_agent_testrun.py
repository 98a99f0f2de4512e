"""run_pytest runs a workspace's tests in the sealed sandbox; outcomes come from our plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

from codeloop.agent.envdirs import env_paths
from codeloop.agent.patches import apply_patch
from codeloop.agent.testrun import parse_outcomes, run_pytest
from codeloop.agent.workspace import BaseCache, Workspace
from codeloop.config import SandboxConfig
from codeloop.sandbox import make_executor
from codeloop.sandbox.docker_backend import skip_without_docker_engine
from tests._repo_fixture import make_repo_task

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def setup(request, tmp_path_factory):
    if request.param == "docker":
        skip_without_docker_engine()
    root = tmp_path_factory.mktemp("repo")
    task = make_repo_task(root)
    envs = str(root / "envs")
    paths = env_paths(task, envs)
    ex = make_executor(SandboxConfig(backend=request.param, workers=2, timeout_s=30.0),
                       workspaces=True, envs_root=envs)
    cache = BaseCache(str(root / "repos"), str(root / "bases"))
    yield ex, task, paths, lambda: Workspace.create(task, cache, ex.workspaces.new_workspace)
    ex.close()


def test_the_planted_bug_fails_its_test_and_the_rest_pass(setup):
    ex, task, paths, new_ws = setup
    report = run_pytest(ex, new_ws(), task.visible_tests, paths, 30)
    assert report.collected_ok
    assert report.outcomes == {n: ("failed" if n in task.fail_to_pass else "passed")
                               for n in task.visible_tests}


def test_the_first_failure_shows_the_assertion(setup):
    ex, task, paths, new_ws = setup
    report = run_pytest(ex, new_ws(), task.fail_to_pass, paths, 30)
    assert "assert add(2, 3) == 5" in report.first_failure and "-1" in report.first_failure


def test_the_gold_patch_makes_every_visible_test_pass(setup):
    ex, task, paths, new_ws = setup
    ws = new_ws()
    apply_patch(ws.path, task.patch)
    report = run_pytest(ex, ws, task.visible_tests, paths, 30)
    assert set(report.outcomes.values()) == {"passed"} and len(report.outcomes) == 4


def test_fake_pass_lines_on_stdout_change_no_outcome(setup):
    ex, task, paths, new_ws = setup
    ws = new_ws()
    forged = "\n".join(f"{n} PASSED" for n in task.visible_tests) + "\\n1 passed"
    Path(ws.path, "calc", "__init__.py").write_text(f"print({forged!r})\n")
    report = run_pytest(ex, ws, task.fail_to_pass, paths, 30)
    assert report.outcomes == {task.fail_to_pass[0]: "failed"}


def test_a_collection_error_clears_collected_ok(setup):
    ex, task, paths, new_ws = setup
    ws = new_ws()
    Path(ws.path, "calc", "ops.py").write_text("def add(:\n")
    report = run_pytest(ex, ws, task.visible_tests, paths, 30)
    assert not report.collected_ok


def test_a_conftest_the_agent_writes_reads_no_host_file(setup):
    ex, task, paths, new_ws = setup
    ws = new_ws()
    targets = [str(REPO / "pyproject.toml"), str(REPO.parent / "shared"), "/work"]
    Path(ws.path, "conftest.py").write_text(
        "import os\n"
        f"SEEN = [p for p in {targets!r} if os.path.exists(p)]\n"
        "def test_host_is_invisible():\n    assert SEEN == []\n"
    )
    report = run_pytest(ex, ws, ["conftest.py::test_host_is_invisible"], paths, 30)
    assert report.outcomes == {"conftest.py::test_host_is_invisible": "passed"}, report.output_tail


def test_a_hanging_test_run_times_out(setup):
    ex, task, paths, new_ws = setup
    ws = new_ws()
    Path(ws.path, "tests", "test_hang.py").write_text(
        "import time\ndef test_h():\n    time.sleep(60)\n"
    )
    report = run_pytest(ex, ws, ["tests/test_hang.py"], paths, 1.0)
    assert report.status == "timeout" and not report.collected_ok


def test_skips_xfails_and_setup_errors_are_told_apart():
    lines = [
        {"nodeid": "t::a", "when": "call", "outcome": "passed", "xfail": False},
        {
            "nodeid": "t::b",
            "when": "setup",
            "outcome": "failed",
            "xfail": False,
            "longrepr": "E boom",
        },
        {"nodeid": "t::c", "when": "setup", "outcome": "skipped", "xfail": False},
        {"nodeid": "t::d", "when": "call", "outcome": "skipped", "xfail": True},
        {"nodeid": "t::e", "when": "call", "outcome": "passed", "xfail": False},
        {"nodeid": "t::e", "when": "teardown", "outcome": "failed", "xfail": False},
        {"exitstatus": 1, "collected": 5},
    ]
    import json

    outcomes, ok, first = parse_outcomes("\n".join(json.dumps(x) for x in lines))
    assert outcomes == {"t::a": "passed", "t::b": "error", "t::c": "skipped",
                        "t::d": "xfailed", "t::e": "error"}
    assert ok and first == "E boom"
