"""Host side of command jobs: the workspace root an executor hands out, and the batch.

An executor built with ``workspaces=True`` owns one ``WorkspaceRoot``: a host dir (mode
0711 or 0311: enterable, not listable), and optionally a dir of test environments bound
read-only at ``/envs``. Each agent episode gets ``ws_root/<128-bit random token>/`` (mode
0700); a command names its cwd on the host and runs at the matching path inside the seal:
``/ws/...`` with its own workspace bound at /ws (local), or ``/ws/<token>/...`` (docker);
see codeloop.sandbox.command. No host path name reaches the sandbox.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile

from codeloop.sandbox.base import CmdJob, CmdResult, SandboxError
from codeloop.sandbox.judge import wall_cap

WS_MOUNT, ENVS_MOUNT = "/ws", "/envs"
WS_HIDDEN = "/.ws-hidden"  # as in command.py (zygote source, not importable from here)
WS_ALL = WS_HIDDEN + "/all"
NOFILE = 256  # pytest and a shell open more files than a judged function


def fast_tmp() -> str | None:
    """/dev/shm where it is a writable tmpfs, else the default temp dir (None). Workspaces are
    small and made and removed per episode: on this VM's ext4 /tmp one mkdir + rmdir costs
    ~3.5 ms under load, on tmpfs ~0.01 ms."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class WorkspaceRoot:
    """The host dir of an executor's workspaces (and where its env dirs appear inside).
    ``owner``: the uid the sandboxed commands run as when the host must hand files over
    itself (docker: 65534); None when the zygote does it (local) or nothing has to."""

    def __init__(
        self,
        envs_root: str | None = None,
        owner: int | None = None,
        parent: str | None = None,
        bind_per_job: bool = False,
    ) -> None:
        self.bind_per_job = bind_per_job
        # parent: where workspaces live (a sized tmpfs or a quota'd fs caps their disk use)
        parent = parent or fast_tmp()
        self.path = os.path.realpath(tempfile.mkdtemp(prefix="codeloop-ws-", dir=parent))
        # enterable, not listable: as root jobs are "other" (0711); without root a job is
        # the dir's owner, so the owner's read bit goes too (0311; see command.py for the
        # limit of that: an owner can chmod)
        os.chmod(self.path, 0o711 if os.geteuid() == 0 else 0o311)
        self.envs_root = os.path.realpath(envs_root) if envs_root else None
        if self.envs_root and not os.path.isdir(self.envs_root):
            raise SandboxError(f"envs root {self.envs_root} is not a directory")
        self.owner = owner

    def binds(self) -> list[list]:
        """``[host, inside, writable]`` for the sandbox's private root (or the container)."""
        out = [[self.path, WS_ALL if self.bind_per_job else WS_MOUNT, True]]
        if self.envs_root:
            out.append([self.envs_root, ENVS_MOUNT, False])
        return out

    def seal_opts(self) -> dict:
        """The zygote's seal options: binds; with ``bind_per_job`` the root of all
        workspaces sits under a mode-000 dir and each job gets only its own at /ws."""
        opts: dict = {"binds": self.binds()}
        if self.bind_per_job:
            opts.update(dirs=[[WS_HIDDEN, 0], [WS_MOUNT, 0o755]], seccomp_per_job=True)
        return opts

    def new_workspace(self) -> str:
        """A fresh, empty workspace dir; its name is an unguessable token."""
        path = os.path.join(self.path, secrets.token_hex(16))
        os.mkdir(path, 0o700)
        return path

    def inside(self, host_path: str) -> tuple[str, str]:
        """(the command's cwd as it sees it, its workspace as the zygote names it) of a host
        path in a workspace."""
        rel = os.path.relpath(os.path.realpath(host_path), self.path)
        if rel == "." or rel.startswith(".."):
            raise SandboxError(f"{host_path} is not inside a workspace of {self.path}")
        token, _, below = rel.partition("/")
        if self.bind_per_job:
            return (f"{WS_MOUNT}/{below}" if below else WS_MOUNT), f"{WS_ALL}/{token}"
        return f"{WS_MOUNT}/{rel}", f"{WS_MOUNT}/{token}"

    def env_inside(self, host_dir: str) -> str:
        """Where an env dir under ``envs_root`` appears in the sandbox."""
        real = os.path.realpath(host_dir)
        if not self.envs_root or not (real + "/").startswith(self.envs_root + "/"):
            raise SandboxError(f"env dir {host_dir} is not under the executor's envs root")
        return ENVS_MOUNT + real[len(self.envs_root) :]

    def hand_over(self, ws_inside: str, back: bool = False) -> None:
        """Make a workspace writable for ``owner`` before a command, or (``back``) ours
        again after it (host side; never follows a link)."""
        if self.owner is None or (back and os.geteuid() != 0):
            return
        top = os.path.join(self.path, os.path.basename(ws_inside))
        paths = [top]
        for root, dirs, files in os.walk(top):
            paths += [os.path.join(root, n) for n in dirs + files]
        if back:  # whatever mode the command gave it: its token is no key for others
            os.chmod(top, 0o700)
        for p in paths:
            if os.geteuid() == 0:
                os.lchown(p, *((0, 0) if back else (self.owner, self.owner)))
            elif not os.path.islink(p):  # not root: world-writable, under a 0711 parent
                os.chmod(p, 0o777 if os.path.isdir(p) else 0o666)

    def close(self) -> None:
        """Remove every workspace, also what a command made unreadable (chmod 000)."""

        def fix(func, path, exc):  # noqa: ARG001 - shutil's onerror signature
            os.chmod(os.path.dirname(path), 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
                shutil.rmtree(path, onerror=fix)
            elif os.path.lexists(path):
                os.unlink(path)

        if os.path.isdir(self.path):
            os.chmod(self.path, 0o700)
            shutil.rmtree(self.path, onerror=fix)


def cmd_request(job: CmdJob, ws: WorkspaceRoot, timeout_s: float, memory_mb: int) -> dict:
    """The zygote's frame for one command (see codeloop.sandbox.command)."""
    cwd, ws_inside = ws.inside(job.cwd_host)
    timeout = job.timeout_s or timeout_s
    cmd = {"argv": list(job.argv), "cwd": cwd, "ws": ws_inside, "env": dict(job.env),
           "bind": ws.bind_per_job}  # fmt: skip
    return {"cmd": cmd, "timeout": timeout, "wall_cap": wall_cap(timeout),
            "memory_mb": job.memory_mb or memory_mb, "out_cap": job.output_cap,
            "result_cap": job.result_cap, "nofile": NOFILE}  # fmt: skip


def cmd_result(resp: dict) -> CmdResult:
    """The zygote's answer as a CmdResult (what the command did, never a verdict)."""
    if resp.get("timed_out") or resp.get("cpu_rlimit"):
        status = "timeout"
    elif resp.get("over"):
        status = "output_limit"
    elif resp.get("oom_killed"):
        status = "memory_limit"
    elif resp.get("signal") is not None:
        status = "killed"
    else:
        status = "exited"
    return CmdResult(exit_code=resp.get("exit"), signal=resp.get("signal"),
                     timed_out=status == "timeout", stdout=resp.get("stdout", ""),
                     stderr=resp.get("stderr", ""), duration_ms=resp.get("wall_ms", 0.0),
                     status=status, results=resp.get("results", ""))  # fmt: skip


def run_commands(executor, jobs: list[CmdJob], grace_s: float) -> list[CmdResult]:
    """Run ``jobs`` over the executor's slots; results in input order. A fault of ours
    raises SandboxError (a command is not re-run: it may have changed its workspace)."""
    ws = getattr(executor, "workspaces", None)
    if ws is None:
        raise SandboxError("this executor has no workspaces: make_executor(cfg, workspaces=True)")
    if executor._closed:
        raise SandboxError("executor is closed")
    cfg = executor.cfg
    requests = [cmd_request(j, ws, cfg.timeout_s, cfg.memory_mb) for j in jobs]

    def one(req: dict) -> CmdResult:
        ws.hand_over(req["cmd"]["ws"])
        try:
            return cmd_result(executor._attempt(req, req["wall_cap"] + grace_s))
        finally:
            ws.hand_over(req["cmd"]["ws"], back=True)

    return list(executor._threads.map(one, requests))
