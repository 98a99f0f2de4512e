"""`codeloop env` plays scripted episodes; judged on a fresh copy with the task's tests
restored, the gold edit resolves the task and no edit, a test-file edit or a skip do not."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from codeloop.agent.patches import apply_patch
from codeloop.agent.testrun import run_pytest
from codeloop.agent.workspace import BaseCache, Workspace
from codeloop.cli import main
from codeloop.config import AgentConfig
from codeloop.io import write_tasks
from tests._repo_fixture import GOLD_EDIT, make_repo_task

GOLD = {"tool": "edit", "args": {"path": GOLD_EDIT[0], "old": GOLD_EDIT[1], "new": GOLD_EDIT[2]}}
SKIP = {"tool": "write_file", "args": {"path": "calc/__init__.py",
        "content": "import pytest\npytest.skip('no', allow_module_level=True)\n"}}
CHEAT = {"tool": "write_file", "args": {"path": "tests/test_f2p.py",
         "content": "def test_add_positive():\n    assert True\n"}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    task = make_repo_task(root)
    write_tasks(root / "tasks.parquet", [task])
    params = root / "params.yaml"
    params.write_text(
        f"sandbox: {{workers: 2, timeout_s: 30}}\nagent: {{envs_dir: {root / 'envs'}}}\n"
    )
    return root, task, params


def play(setup, calls, name):
    root, task, params = setup
    script, out = root / f"{name}.jsonl", root / f"{name}.json"
    script.write_text("".join(json.dumps(c) + "\n" for c in calls))
    rc = main(["env", "--tasks", str(root / "tasks.parquet"), "--task-id", task.task_id,
               "--script", str(script), "--out", str(out), "--repos", str(root / "repos"),
               "--params", str(params)])
    assert rc == 0
    return json.loads(out.read_text())


def resolved(setup, diff: str) -> bool:
    """The judge's rule in miniature: the diff on a fresh base, the task's tests restored
    (they are in the base), FAIL_TO_PASS + PASS_TO_PASS + hidden all pass."""
    from codeloop.agent.executor import open_executor
    from codeloop.config import SandboxConfig

    root, task, _ = setup
    cfg = AgentConfig(envs_dir=str(root / "envs"))
    ex = open_executor(SandboxConfig(workers=1, timeout_s=30), cfg, [], workspaces=True)
    try:
        ws = Workspace.create(task, BaseCache(str(root / "repos"), str(root / "jb")),
                              ex.workspaces.new_workspace)
        apply_patch(ws.path, diff)
        hidden = os.path.join(root, "pristine", "tests", "test_hidden.py")
        with open(hidden) as src, open(os.path.join(ws.path, "tests", "test_hidden.py"), "w") as d:
            d.write(src.read())
        from codeloop.agent.envdirs import env_paths

        ids = task.fail_to_pass + task.pass_to_pass + task.hidden_tests
        rep = run_pytest(ex, ws, ids, env_paths(task, cfg.envs_dir), 30)
        return all(rep.outcomes.get(n) == "passed" for n in ids)
    finally:
        ex.close()


def test_the_episode_file_holds_the_trajectory_row(setup):
    ep = play(setup, [{"tool": "read_file", "args": {"path": "calc/ops.py"}}, GOLD,
                      {"tool": "run_tests", "args": {}}, {"tool": "submit", "args": {}}], "row")
    t = ep["trajectory"]
    assert [a["tool"] for a in t["actions"]] == ["read_file", "edit", "run_tests", "submit"]
    assert t["terminal_reason"] == "submitted" and t["tests_run"] == 1 and t["tool_calls"] == 4
    assert "+    return a + b" in t["final_diff"] and ep["counters"]["visible_passed"] == [4]


def test_the_gold_edit_resolves_the_task(setup):
    ep = play(setup, [GOLD, {"tool": "submit", "args": {}}], "gold")
    assert resolved(setup, ep["trajectory"]["final_diff"])


def test_the_cli_judges_the_gold_episode_resolved(setup):
    ep = play(setup, [GOLD, {"tool": "submit", "args": {}}], "gold-verdict")
    v = ep["verdict"]
    assert v["resolved"] and v["f2p_passed"] == v["f2p_total"] > 0 and not v["hack_flags"]


@pytest.mark.parametrize("name,calls", [("none", []), ("cheat", [CHEAT]), ("skip", [SKIP])])
def test_the_cli_judges_no_edit_a_test_edit_and_a_skip_unresolved(setup, name, calls):
    ep = play(setup, [*calls, {"tool": "submit", "args": {}}], f"{name}-verdict")
    assert ep["verdict"]["resolved"] is False


def test_no_edit_does_not_resolve(setup):
    ep = play(setup, [{"tool": "submit", "args": {}}], "none")
    assert ep["trajectory"]["final_diff"] == "" and not resolved(setup, "")


def test_a_test_file_edit_does_not_resolve(setup):
    ep = play(
        setup, [CHEAT, {"tool": "run_tests", "args": {}}, {"tool": "submit", "args": {}}], "cheat"
    )
    assert ep["counters"]["visible_passed"] == [4]  # the agent's own view: all pass
    assert not resolved(setup, ep["trajectory"]["final_diff"])


def test_a_skip_insertion_does_not_resolve(setup):
    ep = play(setup, [SKIP, {"tool": "submit", "args": {}}], "skip")
    assert "pytest.skip" in ep["trajectory"]["final_diff"]
    assert not resolved(setup, ep["trajectory"]["final_diff"])


def test_interactive_mode_prints_each_observation(setup, monkeypatch, capsys):
    root, task, params = setup
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"tool": "list_files", "args": {}}\nbad\n'))
    rc = main(["env", "--tasks", str(root / "tasks.parquet"), "--task-id", task.task_id,
               "--interactive", "--repos", str(root / "repos"), "--params", str(params)])
    out = capsys.readouterr().out
    assert rc == 0 and "calc/ops.py" in out and "[parse_error]" in out


def test_an_unknown_task_id_is_exit_2(setup, capsys):
    root, _, params = setup
    rc = main(["env", "--tasks", str(root / "tasks.parquet"), "--task-id", "nope",
               "--interactive", "--params", str(params)])
    assert rc == 2 and "no task 'nope'" in capsys.readouterr().err
