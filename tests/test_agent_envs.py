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
