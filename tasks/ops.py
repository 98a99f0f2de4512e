"""Prefect tasks of the nightly operations: the DVC remote check, dvc pull / push and one
stage's `dvc repro`, their output streamed into the run log, transient failures retried
(``CODELOOP_DVC_RETRY_DELAY_S`` seconds apart for the remote's tasks, default 5)."""

from __future__ import annotations

import os

from prefect import task

from tasks.artifacts import ARTIFACT_KEYS  # noqa: F401  (the nightly's artifact keys, for callers)


class TransientError(RuntimeError):
    """A failure worth retrying (remote unreachable, lock briefly held); nothing else is."""


# Output fragments that mark a failure as transient rather than a bug in a stage.
_TRANSIENT_MARKERS = (
    "Connection refused",
    "Connection reset",
    "Temporary failure in name resolution",
    "timed out",
    "Unable to acquire lock",
    "Resource temporarily unavailable",
)


def _transient_only(task, task_run, state) -> bool:
    try:
        state.result()
    except TransientError:
        return True
    except Exception:
        return False
    return False


def with_retry_delay(remote_task):
    """The task with ``CODELOOP_DVC_RETRY_DELAY_S`` (read now) between its retries."""
    return remote_task.with_options(
        retry_delay_seconds=float(os.environ.get("CODELOOP_DVC_RETRY_DELAY_S", "5"))
    )


def run_logged(cmd: list[str], cwd: str, what: str) -> str:
    """Run a command, streaming each output line into the Prefect run log (the UI)."""
    import subprocess

    from prefect.logging import get_run_logger

    from codeloop.ops.vcs import vcs_env

    log = get_run_logger()
    log.info("$ %s", " ".join(cmd))
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=vcs_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        log.info("%s", line.rstrip())
    rc = proc.wait()
    out = "".join(lines)
    if rc != 0:
        tail = "".join(lines[-30:])
        if any(m in out for m in _TRANSIENT_MARKERS):
            raise TransientError(f"{what} failed transiently (exit {rc}):\n{tail}")
        raise RuntimeError(f"{what} failed (exit {rc}):\n{tail}")
    return out


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=_transient_only)
def check_remote(repo: str) -> str:
    """Fail before anything runs when the default DVC remote is missing or does not
    answer (codeloop.ops.remote); the error names the remote and its URL."""
    from prefect.logging import get_run_logger

    from codeloop.ops.remote import RemoteError
    from codeloop.ops.remote import check_remote as probe

    try:
        remote = probe(repo)
    except RemoteError as exc:
        if exc.transient:
            raise TransientError(str(exc)) from exc
        raise
    get_run_logger().info("DVC remote %s answers", remote)
    return str(remote)


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=_transient_only)
def dvc_pull(repo: str) -> None:
    from codeloop.ops.vcs import dvc_cmd

    try:
        run_logged(dvc_cmd("pull", "--allow-missing"), repo, "dvc pull")
    except RuntimeError as exc:  # a pull failure is the remote's, not the code's
        raise TransientError(str(exc)) from exc


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=_transient_only)
def dvc_push(repo: str) -> None:
    from codeloop.ops.vcs import dvc_cmd

    try:
        run_logged(dvc_cmd("push"), repo, "dvc push")
    except RuntimeError as exc:
        raise TransientError(str(exc)) from exc


@task(retries=1, retry_delay_seconds=2, retry_condition_fn=_transient_only)
def repro_stage(repo: str, stage: str) -> str:
    """`dvc repro --single-item <stage>`: one stage, its logs in this task's log."""
    from codeloop.ops.vcs import dvc_cmd

    return run_logged(dvc_cmd("repro", "--single-item", stage), repo, f"stage {stage}")
