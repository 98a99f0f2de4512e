"""Host side of command jobs: the workspace root an executor hands out, and the batch.

An executor built with ``workspaces=True`` owns one ``WorkspaceRoot``: a host dir (mode
0711 or 0311: enterable, not listable), and optionally a dir of test environments bound
read-only at ``/envs``. Each agent episode gets ``ws_root/<128-bit random token>/`` (mode
0700); a command names its cwd on the host and runs at the matching path inside the seal:
``/ws/...`` with its own workspace bound at /ws (local), or ``/ws/<token>/...`` (docker);
see codeloop.sandbox.command. No host path name reaches the sandbox.

With ``quota_bytes`` each workspace is a tmpfs of that size of its own, mounted by the host
on the workspace's dir (so a write past it fails with ENOSPC inside the sandbox, while the
host reads and writes the tree as any dir) and unmounted when it is removed
(``release_workspace``, which codeloop.agent.workspace.remove_tree calls) or at ``close``.
For every zygote to see these mounts, also those made after it started, the workspace root
is first bound on itself and made a shared mount; each zygote's (recursive) bind of it is a
slave (seal.py), so it receives them and nothing it mounts goes back. Mounting needs root: without it (or
where mount is refused) ``quota_enforced`` is False, ``quota_problem`` says why, and
workspaces are plain dirs, bounded only by the file system they are on (``ws_parent``, e.g.
a sized tmpfs an admin mounted) and RLIMIT_FSIZE per file.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import tempfile
import threading
import weakref

from codeloop.sandbox.base import CmdJob, CmdResult, SandboxError
from codeloop.sandbox.trees import chown_tree, remove_tree, visit_tree
from codeloop.sandbox.verdicts import wall_cap

WS_MOUNT, ENVS_MOUNT = "/ws", "/envs"
IMAGE_ENVS = "/opt/codeloop-env"  # where an environment's own image holds its env dir
WS_HIDDEN = "/.ws-hidden"  # as in command.py (zygote source, not importable from here)
WS_ALL = WS_HIDDEN + "/all"
NOFILE = 256  # pytest and a shell open more files than a judged function
MS_NOSUID, MS_NODEV, MS_BIND, MS_PRIVATE, MS_SHARED = 2, 4, 4096, 1 << 18, 1 << 20
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)
_MOUNTED: dict[str, WorkspaceRoot] = {}  # workspace dir -> the root that mounted its tmpfs
_MOUNTED_LOCK = threading.Lock()


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    args = [x.encode() if x else None for x in (src, target, fstype, data)]
    if _libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags), args[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or src or ''} on {target}: {os.strerror(err)}")


def _unmount(target: str) -> None:
    """Detach the mount at ``target`` (lazily: a holder of it keeps it until it lets go);
    nothing when none is there (EINVAL)."""
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err != errno.EINVAL:
            raise OSError(err, f"umount {target}: {os.strerror(err)}")


def release_workspace(path: str) -> None:
    """Unmount a workspace's tmpfs (its files go with it), leaving its empty dir; nothing
    for a workspace that has none (no quota) or any other path."""
    with _MOUNTED_LOCK:
        root = _MOUNTED.pop(os.path.abspath(path), None)
    if root is not None:
        root._release(os.path.abspath(path))


def _unmount_all(mounts: set[str], root: str) -> None:
    """At exit, for a workspace root never closed: its workspaces' tmpfs and its own bind
    (a mount outlives the process that made it; the dirs stay, as ever for such a root)."""
    for path in [*mounts, root]:
        with _MOUNTED_LOCK:
            _MOUNTED.pop(path, None)
        try:
            _unmount(path)
        except OSError:
            pass


def fast_tmp() -> str | None:
    """/dev/shm where it is a writable tmpfs, else the default temp dir (None). Workspaces are
    small and made and removed per episode: on an ext4 /tmp a mkdir + rmdir pays for the
    journal, under load much more than on a tmpfs."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class WorkspaceRoot:
    """The host dir of an executor's workspaces (and where its env dirs appear inside).
    ``owner``: the uid the sandboxed commands run as when the host must hand files over
    itself (docker: 65534); None when the zygote does it (local) or nothing has to.
    ``quota_bytes``: the size of each workspace's own tmpfs (None: no tmpfs, no quota);
    ``quota_enforced`` says whether it is one (root only: see the module doc)."""

    def __init__(
        self,
        envs_root: str | None = None,
        owner: int | None = None,
        parent: str | None = None,
        bind_per_job: bool = False,
        quota_bytes: int | None = None,
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
        # env dirs baked into the sandbox's image (host path -> path inside): these are
        # read from the image, not from the /envs volume (codeloop.sandbox.env_images)
        self.baked: dict[str, str] = {}
        # bake(host env dir): its path in an image of its own, or None (then /envs); set by
        # an executor that runs each environment in its own image (docker)
        self.bake = None
        self.quota_bytes, self.quota_problem = quota_bytes, ""
        self._mounts: set[str] = set()
        self._shared = False  # the root bound on itself as a shared mount
        if quota_bytes:
            self._share_root()

    @property
    def quota_enforced(self) -> bool:
        """Whether each new workspace is a tmpfs of ``quota_bytes`` (a write past it: ENOSPC)."""
        return bool(self.quota_bytes) and self._shared

    def _share_root(self) -> None:
        """Bind the root on itself as a shared mount of its own (private first: never a peer
        of the mount it sits on), so each zygote's slave bind of it receives the workspaces'
        tmpfs mounts made later."""
        if os.geteuid() != 0:
            self.quota_problem = (
                "not root: workspaces are plain dirs, their size bounded only by the file "
                "system they are on (agent.workspace_dir, e.g. a sized tmpfs) and 16 MiB a file"
            )
            return
        try:
            _mount(self.path, self.path, None, MS_BIND)
        except OSError as e:
            self.quota_problem = f"cannot mount here, workspaces are plain dirs: {e}"
            return
        try:
            _mount(None, self.path, None, MS_PRIVATE)
            _mount(None, self.path, None, MS_SHARED)
        except OSError as e:
            _unmount(self.path)
            self.quota_problem = f"cannot make the workspace root a shared mount: {e}"
            return
        self._shared = True
        self._at_exit = weakref.finalize(self, _unmount_all, self._mounts, self.path)

    def _release(self, path: str) -> None:
        self._mounts.discard(path)
        _unmount(path)

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
        if self.quota_enforced:
            # one inode per page of the quota: empty files cost the host memory too
            size = f"size={self.quota_bytes},nr_inodes={max(1024, self.quota_bytes // 4096)}"
            try:
                _mount("codeloop-ws", path, "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=0700")
            except OSError as e:
                os.rmdir(path)
                raise SandboxError(f"cannot mount the workspace's tmpfs: {e}") from e
            with _MOUNTED_LOCK:
                _MOUNTED[path] = self
                self._mounts.add(path)
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
        """Where an env dir under ``envs_root`` (or baked into the image) appears in the
        sandbox."""
        real = os.path.realpath(host_dir)
        if real in self.baked:
            return self.baked[real]
        inside = self.bake(real) if self.bake is not None else None
        if inside:
            return inside
        if not self.envs_root or not (real + "/").startswith(self.envs_root + "/"):
            raise SandboxError(f"env dir {host_dir} is not under the executor's envs root")
        return ENVS_MOUNT + real[len(self.envs_root) :]

    def hand_over(self, ws_inside: str, back: bool = False) -> None:
        """Make a workspace writable for ``owner`` before a command, or (``back``) ours
        again after it (host side; never follows a link). Earlier commands shaped the
        tree, whatever its depth and path lengths: trees.py walks it by dir fds."""
        if self.owner is None or (back and os.geteuid() != 0):
            return
        top = os.path.join(self.path, os.path.basename(ws_inside))
        if os.geteuid() == 0:
            uid = 0 if back else self.owner
            os.lchown(top, uid, uid)  # the top first: once it is root's 0700 no job gets in
            if back:  # whatever mode the command gave it: its token is no key for others
                os.chmod(top, 0o700)
            chown_tree(top, uid, uid)
        else:  # not root: world-writable, under a 0711 parent
            os.chmod(top, 0o777)
            visit_tree(top, _world_writable)

    def hand_over_problem(self, ws_inside: str, back: bool = False) -> str:
        """hand_over, '' when done; else why not (the command's ``ws_error``)."""
        try:
            self.hand_over(ws_inside, back)
        except OSError as e:
            return f"cannot hand the workspace {'back' if back else 'over'}: {e}"
        return ""

    def close(self) -> None:
        """Remove every workspace, also what a command made unreadable (chmod 000)."""
        for path in list(self._mounts):  # workspaces not removed yet: their tmpfs goes
            release_workspace(path)
        if self._shared:  # the root's bind on itself; the same dir shows below it
            self._shared = False
            self._at_exit.detach()
            _unmount(self.path)
        if os.path.isdir(self.path):
            os.chmod(self.path, 0o700)
            remove_tree(self.path)


def _world_writable(dir_fd: int, entry: os.DirEntry) -> None:
    """A non-link entry of a workspace handed over without root: anyone may write it."""
    if not entry.is_symlink():
        mode = 0o777 if entry.is_dir(follow_symlinks=False) else 0o666
        os.chmod(entry.name, mode, dir_fd=dir_fd, follow_symlinks=False)


def image_env(env_inside: list[str]) -> str:
    """The env dir (as the sandbox names it) among a command's env dirs that lives in an
    image of its own, '' when none does: what ``CmdJob.image_env`` routes by."""
    return next((p for p in env_inside if p.startswith(IMAGE_ENVS + "/")), "")


def cmd_request(job: CmdJob, ws: WorkspaceRoot, timeout_s: float, memory_mb: int) -> dict:
    """The zygote's frame for one command (see codeloop.sandbox.command)."""
    cwd, ws_inside = ws.inside(job.cwd_host)
    timeout = job.timeout_s or timeout_s
    cmd = {"argv": list(job.argv), "cwd": cwd, "ws": ws_inside, "env": dict(job.env),
           "bind": ws.bind_per_job}
    return {"cmd": cmd, "timeout": timeout, "wall_cap": wall_cap(timeout),
            "memory_mb": job.memory_mb or memory_mb, "out_cap": job.output_cap,
            "result_cap": job.result_cap, "nofile": NOFILE}


def cmd_result(resp: dict) -> CmdResult:
    """The zygote's answer as a CmdResult (what the command did, never a verdict). A
    workspace that could not be handed over or back (``ws_error``) is its status, the
    reason appended to its stderr."""
    stderr, ws_error = resp.get("stderr", ""), resp.get("ws_error", "")
    if ws_error:
        status = "workspace_error"
        stderr += ("\n" if stderr else "") + f"[sandbox] {ws_error}"
    elif resp.get("timed_out") or resp.get("cpu_rlimit"):
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
                     stderr=stderr, duration_ms=resp.get("wall_ms", 0.0),
                     status=status, results=resp.get("results", ""))


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
    # a command of an environment with an image of its own runs on that image's pool
    route = getattr(executor, "env_pool", None)
    pools = [route(j.image_env) if route and j.image_env else executor for j in jobs]

    def one(req: dict, pool) -> CmdResult:
        name = req["cmd"]["ws"]
        problem = ws.hand_over_problem(name)
        try:  # a workspace not handed over: the command does not run, that is its result
            resp = {"ws_error": problem} if problem else pool._attempt(
                req, req["wall_cap"] + grace_s)
        finally:
            back = ws.hand_over_problem(name, back=True)
        problems = [p for p in (resp.get("ws_error", ""), back) if p]
        return cmd_result({**resp, "ws_error": "; ".join(problems)})

    return list(executor._threads.map(one, requests, pools))
