"""The sandbox executor every stage that runs episodes or judges opens: one set-up for all.

Function tasks need a plain executor. Repository tasks also need workspaces (each a tmpfs
of ``agent.workspace_bytes`` where the host can mount one) and an envs root mounted at
/envs: pytest and our plugin env dirs built there from the running venv, and each task's
own environment dir copied in once from the clean stage's env dirs. On the docker backend
an executor whose repository tasks share one environment runs from that environment's own
image (codeloop.sandbox.env_images).
"""

from __future__ import annotations

import os
import shutil
import threading

from codeloop.agent.envdirs import plugin_env, pytest_env
from codeloop.config import AgentConfig, SandboxConfig
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import Executor
from codeloop.sandbox.env_trust import DIGEST_KEY, check_digest, check_name, tree_digest
from codeloop.schema import Task, by_kind


def needs_workspaces(tasks: list[Task]) -> bool:
    """True when some task is a repository task (its episodes and verdicts need workspaces)."""
    return bool(by_kind(tasks)["repo"])


def open_executor(
    sandbox: SandboxConfig,
    agent: AgentConfig,
    tasks: list[Task],
    *,
    envs_dir: str = "",
    clean_envs: str = "",
    workspaces: bool = False,
) -> Executor:
    """The executor for ``tasks``: workspaces and an envs root only when a task needs them
    (or ``workspaces``: a caller that will hand it repository tasks later).

    envs_dir: where the envs root is built ('' = ``agent.envs_dir``); clean_envs: the
    clean stage's env dirs the tasks' own environments are copied from.
    """
    if not (workspaces or needs_workspaces(tasks)):
        return make_executor(sandbox)
    envs = os.path.abspath(envs_dir or agent.envs_dir)
    copy_task_envs(tasks, clean_envs, envs)
    pytest_env(envs)
    plugin_env(envs)
    return make_executor(sandbox, workspaces=True, envs_root=envs,
                         ws_parent=agent.workspace_dir or None,
                         workspace_bytes=agent.workspace_bytes,
                         env_dir=one_env(tasks, envs))


def one_env(tasks: list[Task], envs: str) -> str | None:
    """The env dir every repository task here shares (the docker backend then runs its
    containers from that env's image), else None: tasks of several environments share
    the sandbox image, each reading its own env dir from the read-only /envs volume."""
    names = {t.environment for t in by_kind(tasks)["repo"]}
    return os.path.join(envs, names.pop()) if len(names) == 1 and "" not in names else None


def copy_task_envs(tasks: list[Task], clean_envs: str, envs: str) -> str:
    """Copy each repository task's own environment dir from ``clean_envs`` into ``envs``
    once (FileNotFoundError naming the task when it is missing) and check it, copied now
    or found there, against the content digest its task was verified with (EnvTrustError
    when the name is not one plain dir name, the dir holds a link, or its content changed
    since); returns ``envs``."""
    os.makedirs(envs, exist_ok=True)
    os.chmod(envs, 0o755)
    checked: dict[str, str] = {}  # environment -> its dir's digest
    for t in by_kind(tasks)["repo"]:
        if not t.environment:
            continue
        who = f"task {t.task_id}"
        dest = os.path.join(envs, check_name(t.environment, who))
        if t.environment not in checked:
            if not os.path.lexists(dest):
                _copy_env_dir(os.path.join(clean_envs, t.environment), dest, who)
            checked[t.environment] = tree_digest(dest)
        expected = t.metadata.get(DIGEST_KEY, "")
        if expected and expected != checked[t.environment]:
            check_digest(dest, expected, who)  # raises, naming the dir
    return envs


def _copy_env_dir(src: str, dest: str, who: str) -> None:
    """``src`` copied to ``dest`` whole or not at all; links are copied as links (never
    followed: the digest check then refuses them)."""
    if not os.path.isdir(src):
        raise FileNotFoundError(f"{who}: environment {src} does not exist")
    tmp = dest + f".tmp{os.getpid()}.{threading.get_ident()}"
    shutil.copytree(src, tmp, symlinks=True)
    try:
        os.rename(tmp, dest)  # whole or absent: a killed copy never passes for a built env
    except OSError:
        if not os.path.isdir(dest):
            raise
        shutil.rmtree(tmp)  # another thread or process copied it first: theirs stands
