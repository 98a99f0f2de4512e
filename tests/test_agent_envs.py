"""Test environment dirs: built once per content, reused, readable by the sandbox."""

from __future__ import annotations

import os

import pytest

from codeloop.agent.envdirs import env_paths, plugin_env, pytest_env
from codeloop.schema import Task


def test_building_twice_gives_the_same_dir(tmp_path):
    first = pytest_env.__wrapped__(str(tmp_path))
    assert pytest_env.__wrapped__(str(tmp_path)) == first
    assert [p for p in os.listdir(tmp_path) if p.startswith("pytest-")] == [os.path.basename(first)]


def test_the_pytest_env_holds_pytest_and_its_deps_compiled(tmp_path):
    env = pytest_env.__wrapped__(str(tmp_path))
    for name in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging"):
        assert os.path.exists(os.path.join(env, name)), name
    assert os.path.isdir(os.path.join(env, "_pytest", "__pycache__"))


def test_env_dirs_are_world_readable(tmp_path):
    env = plugin_env.__wrapped__(str(tmp_path))
    for top, _, files in os.walk(env):
        assert os.stat(top).st_mode & 0o005 == 0o005
        assert all(os.stat(os.path.join(top, f)).st_mode & 0o004 for f in files)


def test_a_task_names_its_own_env_dir_first(tmp_path):
    (tmp_path / "calc-deps").mkdir()
    task = Task(task_id="t", source="s", prompt="p", kind="repo", environment="calc-deps")
    paths = env_paths(task, str(tmp_path))
    assert paths[0] == str(tmp_path / "calc-deps") and len(paths) == 3


def test_a_missing_task_env_dir_is_an_error_naming_it(tmp_path):
    task = Task(task_id="t9", source="s", prompt="p", kind="repo", environment="nope")
    with pytest.raises(FileNotFoundError, match="t9.*nope"):
        env_paths(task, str(tmp_path))


def test_a_task_whose_env_was_built_for_another_python_gets_no_env_paths(tmp_path):
    from codeloop.agent.envdirs import InterpreterMismatch, sandbox_python

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "spec.json").write_text('{"python": "3.9", "requirements": []}')
    task = Task(task_id="t3", source="s", prompt="p", kind="repo", environment="old")
    with pytest.raises(InterpreterMismatch, match=f"t3.*needs python 3.9; sandbox has {sandbox_python()}"):
        env_paths(task, str(tmp_path))


def test_an_executor_is_given_the_env_its_repository_tasks_all_share(tmp_path):
    from codeloop.agent.executor import one_env

    def repo(i, env):
        return Task(task_id=f"r{i}", source="s", prompt="p", kind="repo", environment=env)

    fn = Task(task_id="f", source="s", prompt="p")
    assert one_env([repo(1, "e1"), repo(2, "e1"), fn], str(tmp_path)) == str(tmp_path / "e1")
    assert one_env([repo(1, "e1"), repo(2, "e2")], str(tmp_path)) is None
    assert one_env([repo(1, ""), repo(2, "e1")], str(tmp_path)) is None
    assert one_env([fn], str(tmp_path)) is None


@pytest.mark.parametrize("name", [".", "..", "../calc-deps", "/tmp"])
def test_an_environment_that_is_no_plain_dir_name_gets_no_env_paths(tmp_path, name):
    from codeloop.sandbox.env_trust import EnvTrustError

    (tmp_path / "envs" / "calc-deps").mkdir(parents=True)
    task = Task(task_id="t5", source="s", prompt="p", kind="repo", environment=name)
    with pytest.raises(EnvTrustError, match="t5: environment .* is not one plain dir name"):
        env_paths(task, str(tmp_path / "envs"))
