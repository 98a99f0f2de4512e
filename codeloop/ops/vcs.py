"""git and dvc as the pipeline calls them, and the workspace they act on.

Every call runs with this interpreter's dvc and its bin dir first on PATH (dvc.yaml
commands say `python -m flows.x`), so a stage runs with the environment that started it.
The workspace lock keeps two nightly runs out of one checkout (DVC's rwlock forbids two
`dvc repro` at once); require_clean refuses to act on uncommitted changes.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_PATH = Path(".dvc/tmp/codeloop-nightly.lock")


class WorkspaceError(RuntimeError):
    """The workspace is not in a state we may change (busy, dirty, unknown target)."""


def vcs_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DVC_NO_ANALYTICS", "1")
    # dvc.yaml commands say `python -m flows.x`: make that the interpreter running us.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def git(repo: str | os.PathLike, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=vcs_env())
    if check and proc.returncode != 0:
        raise WorkspaceError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def dvc_cmd(*args: str) -> list[str]:
    """The argv of a dvc command run with this interpreter's dvc."""
    return [sys.executable, "-m", "dvc", *args]


def dvc(repo: str | os.PathLike, *args: str) -> str:
    proc = subprocess.run(dvc_cmd(*args), cwd=repo, capture_output=True, text=True, env=vcs_env())
    if proc.returncode != 0:
        raise WorkspaceError(f"dvc {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


@contextmanager
def workspace_lock(repo: str | os.PathLike) -> Iterator[Path]:
    """Exclusive, non-blocking lock: two nightly runs never share a workspace."""
    path = Path(repo) / LOCK_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            raise WorkspaceError(
                f"{path}: another run holds this workspace (pid {fh.read().strip() or '?'})"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield path
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def dirty_files(repo: str | os.PathLike) -> list[str]:
    """Tracked files with uncommitted changes (untracked files do not count)."""
    out = git(repo, "status", "--porcelain", "--untracked-files=no")
    return [line[3:] for line in out.splitlines() if line.strip()]


def require_clean(repo: str | os.PathLike, what: str) -> None:
    dirty = dirty_files(repo)
    if dirty:
        raise WorkspaceError(
            f"{what} refused: uncommitted changes in {', '.join(dirty[:10])}"
            + (" ..." if len(dirty) > 10 else "")
            + "; commit or discard them first"
        )


DVC_RWLOCK = Path(".dvc/tmp/rwlock")


def _running(pid: int) -> bool:
    """True for a live process; a zombie (a killed run's child nobody reaped) is not."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def clear_stale_dvc_locks(repo: str | os.PathLike) -> list[int]:
    """Drop the entries of DVC's stage read/write lock (.dvc/tmp/rwlock) whose processes
    are gone; returns their pids. DVC only drops a dead pid's entry itself, and a SIGKILLed
    run's dvc children can linger as zombies, which would block every later repro."""
    import json

    path = Path(repo) / DVC_RWLOCK
    if not path.exists():
        return []
    data = json.loads(path.read_text() or "{}")
    stale: set[int] = set()

    def live(info: dict) -> bool:
        alive = _running(int(info["pid"]))
        if not alive:
            stale.add(int(info["pid"]))
        return alive

    for mode in ("read", "write"):
        entries = data.get(mode) or {}
        for target, infos in list(entries.items()):
            kept = [i for i in (infos if isinstance(infos, list) else [infos]) if live(i)]
            if not kept:
                del entries[target]
            elif isinstance(infos, list):
                entries[target] = kept
    if stale:
        path.write_text(json.dumps(data))
    return sorted(stale)
