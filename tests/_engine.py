"""The vLLM engine for tests: a skip (or, in CI, a failure) where it is not installed.

``bash scripts/setup.sh --vllm`` installs it into .venv-vllm; .ci/run does, and sets
CODELOOP_REQUIRE_ENGINE=1 so an engine test never skips there. A helper, not a test module.
"""

from __future__ import annotations

import os

import pytest

from codeloop.policy.vllm_engine import engine_missing


def require_engine() -> None:
    """Skip (fail under CODELOOP_REQUIRE_ENGINE=1) when the engine is not installed."""
    why = engine_missing()
    if not why:
        return
    msg = f"vLLM engine not installed ({why}): bash scripts/setup.sh --vllm"
    if os.environ.get("CODELOOP_REQUIRE_ENGINE") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def task_world(root, agent):
    """Three function tasks and two synthetic repository tasks with their snapshots, env
    dirs, a sandbox executor with workspaces and an agent env on it: what the engine
    tests sample. The caller closes ``ex``."""
    from types import SimpleNamespace

    from codeloop.agent.env import AgentEnv
    from codeloop.agent.executor import copy_task_envs
    from codeloop.config import SandboxConfig
    from codeloop.data.generator import generate_tasks
    from codeloop.data.repos.store import store_files
    from codeloop.data.repos.synth import generate_repo_tasks
    from codeloop.sandbox import make_executor

    fn_tasks = generate_tasks(3, seed=3, max_depth=1)
    repo_tasks, trees = generate_repo_tasks(2, seed=5, max_modules=2, tasks_per_repo=1)
    repos = root / "repos"
    for files in trees.values():
        store_files(files, repos)
    envs = copy_task_envs(repo_tasks, str(root / "clean_envs"), str(root / "envs"))
    ex = make_executor(SandboxConfig(workers=2, timeout_s=30.0), workspaces=True, envs_root=envs)
    return SimpleNamespace(fn_tasks=fn_tasks, repo_tasks=repo_tasks, repos=str(repos), ex=ex,
                           env=AgentEnv(ex, agent, str(repos)))
