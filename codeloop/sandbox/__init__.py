"""codeloop's sandbox: judge model-written code against tests with trusted verdicts.

``make_executor(SandboxConfig())`` gives the configured backend (``local`` zygote by
default, ``docker``, or plain ``subprocess``). See ``local`` for what is and is not
isolated, ``isolation`` for the probed record every executor carries (``executor.isolation``)
and ``sandbox.require``, and ``judge`` / ``split`` for how verdicts are kept out of the
child's reach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codeloop.sandbox.base import (
    STATUSES,
    CmdJob,
    CmdResult,
    ExecJob,
    ExecResult,
    Executor,
    SandboxError,
    TestResult,
)

if TYPE_CHECKING:  # imported where needed: `codeloop exec` starts zygotes before pydantic
    from codeloop.config import SandboxConfig
    from codeloop.sandbox.local import Prestart

__all__ = [
    "STATUSES",
    "CmdJob",
    "CmdResult",
    "ExecJob",
    "ExecResult",
    "Executor",
    "SandboxError",
    "TestResult",
    "make_executor",
    "require_met",
]


def make_executor(
    cfg: SandboxConfig | None = None,
    workspaces: bool = False,
    envs_root: str | None = None,
    ws_parent: str | None = None,
    warm: bool = False,
    prestart: Prestart | None = None,
    workspace_bytes: int | None = None,
    env_dir: str | None = None,
) -> Executor:
    """Build the executor ``cfg.backend`` names; call ``close()`` when done.
    ``workspaces``: it can also run commands in agent workspaces (``run_commands``; local
    and docker only), with ``envs_root`` (test environment dirs) visible read-only;
    ``ws_parent``: the host dir the workspaces go in (default: /dev/shm, else the temp dir);
    ``warm``: start every slot's zygote now, side by side (local and docker), not on first use;
    ``prestart``: zygotes a ``local.Prestart`` started early, adopted by a local executor
    they fit (any other backend or config ends them); ``workspace_bytes``: each workspace
    is a tmpfs of that size of its own (a write past it fails with ENOSPC; root only:
    ``executor.workspaces.quota_enforced`` says whether it is), None: no quota;
    ``env_dir``: the one environment the executor's commands run in: docker runs its
    containers from that env's image (codeloop.sandbox.env_images), local reads it from
    the envs root mounted read-only (where it must lie)."""
    if cfg is None:
        from codeloop.config import SandboxConfig

        cfg = SandboxConfig()
    if prestart is not None and (cfg.backend != "local" or workspaces):
        prestart.close()
        prestart = None
    if cfg.backend == "subprocess":
        if workspaces:
            raise SandboxError("the subprocess backend has no workspaces: use local or docker")
        from codeloop.sandbox.subprocess_backend import SubprocessExecutor

        return SubprocessExecutor(cfg)
    if cfg.backend == "docker":
        from codeloop.sandbox.docker_backend import DockerExecutor

        return DockerExecutor(
            cfg, workspaces, envs_root, ws_parent, warm=warm, workspace_bytes=workspace_bytes,
            env_dir=env_dir,
        )
    from codeloop.sandbox.local import LocalExecutor

    return LocalExecutor(
        cfg,
        workspaces,
        envs_root,
        ws_parent,
        warm=warm,
        prestart=prestart,
        workspace_bytes=workspace_bytes,
    )


def require_met(executor: Executor, cfg: SandboxConfig) -> None:
    """Raise SandboxError naming what is missing when the executor's probed isolation lacks
    anything in ``cfg.require`` (every backend; the local and docker ones already refuse to
    start so, the subprocess one is exempt until this is asked)."""
    from codeloop.sandbox.isolation import refusal

    if getattr(executor, "isolation", None) is None:
        executor.start()
    missing = executor.isolation.missing(cfg.require)
    if missing:
        raise SandboxError(refusal(cfg.backend, executor.isolation, missing))
