"""Episodes: how they end, what they count, what they leave, and batched steps."""

from __future__ import annotations

import os

import pytest

from codeloop.agent.env import AgentEnv
from codeloop.config import AgentConfig, SandboxConfig
from codeloop.sandbox import SandboxError, make_executor
from codeloop.schema import Task
from tests._repo_fixture import GOLD_EDIT, open_agent_env

GOLD = {"tool": "edit", "args": {"path": GOLD_EDIT[0], "old": GOLD_EDIT[1], "new": GOLD_EDIT[2]}}
RUN = {"tool": "run_tests", "args": {}}


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    env, ex, task = open_agent_env(tmp_path_factory.mktemp("env"), max_steps=6,
                                   invalid_call_limit=3)
    yield env, task
    ex.close()


def test_submit_ends_the_episode_and_later_calls_count_nothing(agent):
    env, task = agent
    ep = env.reset(task)
    ep.step({"tool": "submit", "args": {}})
    obs = ep.step({"tool": "list_files", "args": {}})
    assert (ep.done, ep.terminal_reason, obs.error_kind) == (True, "submitted", "episode_over")
    assert ep.counters.tool_calls == 1
    ep.close()


def test_too_many_invalid_calls_end_the_episode(agent):
    env, task = agent
    ep = env.reset(task)
    for _ in range(3):
        ep.step("not a call")
    assert ep.done and ep.terminal_reason == "invalid_action_limit"
    ep.close()


def test_the_step_budget_ends_the_episode(agent):
    env, task = agent
    ep = env.reset(task)
    for _ in range(6):
        ep.step({"tool": "list_files", "args": {}})
    assert ep.done and ep.terminal_reason == "max_steps"
    ep.close()


def test_visible_passes_are_counted_per_test_run(agent):
    env, task = agent
    ep = env.reset(task)
    ep.step(RUN)
    ep.step(GOLD)
    ep.step(RUN)
    assert ep.counters.visible_passed == [3, 4] and ep.counters.tests_run == 2
    ep.close()


def test_the_final_diff_is_the_gold_edit_and_no_test_edit(agent):
    env, task = agent
    ep = env.reset(task)
    ep.step(GOLD)
    ep.step({"tool": "write_file", "args": {"path": "tests/test_f2p.py", "content": "pass\n"}})
    assert ep.final_diff() == task.patch
    ep.close()


def test_actions_carry_tool_args_raw_and_observation(agent):
    env, task = agent
    ep = env.reset(task)
    ep.step(GOLD)
    (a,) = ep.actions
    assert (a.tool, a.action_type, a.observation.error_kind) == ("edit", "tool", "")
    assert '"old"' in a.args and '"edit"' in a.raw and a.duration_ms > 0
    ep.close()


def test_close_removes_the_workspace(agent):
    env, task = agent
    ep = env.reset(task)
    path = ep.workspace.path
    ep.close()
    assert not os.path.exists(path)


def test_a_batch_of_episodes_gets_each_its_own_answer(agent):
    env, task = agent
    eps = [env.reset(task) for _ in range(4)]
    env.step_many([(ep, GOLD) for ep in eps[:2]])
    obs = env.step_many([(ep, RUN) for ep in eps])
    assert [o.tests_passed for o in obs] == [4, 4, 3, 3]
    for ep in eps:
        ep.close()


def test_a_function_task_is_not_an_agent_episode(agent):
    env, _ = agent
    with pytest.raises(ValueError, match="is of kind 'function', not 'repo'"):
        env.reset(Task(task_id="f", source="x", prompt="p"))


def test_an_executor_without_workspaces_is_refused(tmp_path):
    with make_executor(SandboxConfig(workers=1)) as ex:
        with pytest.raises(SandboxError, match="workspaces"):
            AgentEnv(ex, AgentConfig(envs_dir=str(tmp_path)), str(tmp_path))


def _processes_of(uids: set[int]) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = open(f"/proc/{pid}/status").read()
        except OSError:
            continue
        if int(status.split("\nUid:\t", 1)[1].split()[0]) in uids:
            found.append(pid)
    return found


@pytest.mark.slow
def test_two_hundred_batched_steps_leave_no_process_fd_or_dir(tmp_path):
    env, ex, task = open_agent_env(tmp_path, workers=2, bash=True, max_steps=50)
    try:
        eps = [env.reset(task) for _ in range(40)]
        warm = {"tool": "search", "args": {"pattern": "return"}}  # starts both slots' zygotes
        assert not any(o.error_kind for o in env.step_many([(ep, warm) for ep in eps]))
        fds = len(os.listdir("/proc/self/fd"))
        turns = [{"tool": "read_file", "args": {"path": "calc/ops.py"}}, GOLD,
                 {"tool": "bash", "args": {"command": "(sleep 300 &); echo started"}}, RUN]
        for call in turns:
            assert not any(o.error_kind for o in env.step_many([(ep, call) for ep in eps]))
        for ep in eps:
            ep.close()
        assert _processes_of({u for u in ex.uids if u is not None}) == []
        assert os.listdir(ex.workspaces.path) == []
        assert len(os.listdir("/proc/self/fd")) == fds
    finally:
        ex.close()
