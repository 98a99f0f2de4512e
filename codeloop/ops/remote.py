"""The default DVC remote, and a cheap check that it answers before a night starts.

Why: the nightly run pushes after it promotes, so an unreachable remote used to fail
the night only after the promotion (which is then undone). Checking first costs one
listing of the remote's root and fails the night before any stage runs, with an error
naming the remote and its URL.

The check runs ``python -m codeloop.ops.remote <repo>`` in a subprocess, so a remote
that hangs is cut off by a timeout. The subprocess opens the repo with DVC's own API
(every config level, credentials from ``.dvc/config.local`` or the environment) and
lists the remote path, or its nearest existing parent (a remote nothing was pushed to
yet has no path of its own; an S3 bucket that does not exist has none at all).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from codeloop.ops.vcs import vcs_env

# Exit codes of the probe: the remote is misconfigured (retrying won't help), or it
# did not answer (a connection error: worth retrying).
MISCONFIGURED, UNREACHABLE = 3, 4


@dataclass(frozen=True)
class Remote:
    name: str
    url: str
    endpoint: str = ""

    def __str__(self) -> str:
        at = f" at {self.endpoint}" if self.endpoint else ""
        return f"'{self.name}' ({self.url}{at})"


class RemoteError(RuntimeError):
    """The default DVC remote is missing, misconfigured or does not answer."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


def check_remote(repo: str | Path, timeout_s: float = 60.0) -> Remote:
    """The repo's default DVC remote, once it has answered a listing; RemoteError otherwise
    (``transient`` when it did not answer, rather than being misconfigured)."""
    cmd = [sys.executable, "-m", "codeloop.ops.remote", str(Path(repo).resolve())]
    try:
        proc = subprocess.run(
            cmd, cwd=repo, env=vcs_env(), capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        remote = _parse(exc.stdout)
        raise RemoteError(
            f"DVC remote {remote or '(default)'} did not answer within {timeout_s:g} s",
            transient=True,
        ) from None
    remote = _parse(proc.stdout)
    if proc.returncode == 0 and remote is not None:
        return remote
    detail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    if remote is None:
        raise RemoteError(f"no usable default DVC remote in {repo}: {detail[0]}")
    verb = "is unreachable" if proc.returncode == UNREACHABLE else "is misconfigured"
    raise RemoteError(
        f"DVC remote {remote} {verb}: {detail[0]}", transient=proc.returncode == UNREACHABLE
    )


def _parse(stdout: str | bytes | None) -> Remote | None:
    """The probe's first output line: the remote it is about to list."""
    text = stdout.decode() if isinstance(stdout, bytes) else stdout or ""
    first = text.splitlines()[:1]
    return Remote(**json.loads(first[0])) if first else None


def list_nearest(fs, path: str) -> str:
    """List ``path`` or its nearest existing parent; returns the path listed. Connection
    errors propagate; FileNotFoundError when no parent exists either."""
    while True:
        try:
            fs.ls(path, detail=False)
            return path
        except FileNotFoundError:
            parent = fs.parent(path)
            if not parent or parent == path:
                raise
            path = parent


def probe(repo: str) -> int:
    """Print the default remote as one JSON line, then list it; the exit code says how
    that went (0, MISCONFIGURED or UNREACHABLE)."""
    from dvc.config import NoRemoteError
    from dvc.repo import Repo

    try:
        with Repo(repo) as dvc_repo:
            remote = dvc_repo.cloud.get_remote()
            conf = dvc_repo.config["remote"][remote.name]
            info = {
                "name": remote.name,
                "url": conf["url"],
                "endpoint": conf.get("endpointurl", ""),
            }
            print(json.dumps(info), flush=True)
            list_nearest(remote.fs, remote.path)
    except NoRemoteError as exc:
        print(str(exc).replace("\n", " "), file=sys.stderr)
        return MISCONFIGURED
    except (FileNotFoundError, PermissionError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return MISCONFIGURED
    except Exception as exc:  # a connection error, a timeout, a server error
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return UNREACHABLE
    return 0


if __name__ == "__main__":
    sys.exit(probe(sys.argv[1]))
