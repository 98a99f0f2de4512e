"""The ``local`` backend (default): pre-forked zygotes, one per worker, each sealed.

Each zygote is ``unshare [--map-root-user] --pid --fork --kill-child --net --ipc --uts
--mount --mount-proc --propagation slave /usr/bin/python3 -I -S -c <zygote>``: PID 1 of its
own PID namespace, with a network namespace holding only loopback, private IPC/UTS, and a
mount namespace of its own (slave copies of the host's mounts: nothing mounted there
reaches the host; every mount of its private root but the workspace root's is private). As root it is real root there; as an ordinary user (``--map-root-user``) it is
uid 0 of a new user namespace that maps only the invoking user. Once, before any job, the
zygote builds a private root and pivots into it (seal.py) and locks itself down; per job it
forks a child that joins the job's memory cgroup (memcg.py, where one can be made), drops
to the slot's leased uid (root only: pool.lease_uid), clears every capability set, gets
rlimits, a scrubbed env, a fresh work dir, stdin /dev/null and capped pipes. After the job the zygote SIGKILLs every process in its namespace (kill(-1) as PID 1)
and empties its private /tmp and /dev/shm. Where this cannot be set up the backend refuses to
start (SandboxError: use ``sandbox.backend: docker``); it never runs weaker. What each zygote
really got is probed at its start into ``executor.isolation`` (isolation.py) and checked
against ``sandbox.require``.

Isolated, as root and as an ordinary user alike:
- Filesystem view: a tmpfs root (read-only) with read-only binds of the interpreter's own
  dirs (its binary's dir, e.g. /usr/bin; its stdlib; the dirs its shared libraries come
  from; /usr/lib64 for the ELF loader), ``sandbox.ro_binds``, /dev/{null,zero,urandom,random},
  /proc of its own PID namespace, and writable tmpfs /tmp (256 MiB, the work dirs) and
  /dev/shm (64 MiB). An executor made with ``workspaces=True`` adds the test env dirs at
  /envs (read-only) and, per command, that command's own agent workspace at /ws
  (writable; the root of all workspaces is unreachable to jobs: codeloop.sandbox.command;
  with ``workspace_bytes``, as root, a tmpfs of that size of its own: cmdjobs).
  Such a zygote installs the seccomp filter in each child instead of in itself. No /etc, /home, /root, /work, /srv, /opt, /var, no repo, no venv, no
  ../shared, not the host's /tmp. The root, the binds and /proc cannot be remounted.
- Capabilities: none in any set, the bounding set empty, so exec gains none either; as root
  also securebits NOROOT (locked). no_new_privs is set (setuid binaries do not elevate).
- Syscalls: a seccomp filter (seccomp.py) answers EPERM to mount, umount2, pivot_root,
  chroot, unshare, setns, clone with CLONE_NEW*, ptrace, process_vm_*, bpf, keyctl/add_key/
  request_key, perf_event_open, io_uring, open_by_handle_at, module/kexec loading, clock and
  host-name settings and a few more (x86_64 and aarch64 tables; x32 and foreign ABIs kill).
- Processes: the job sees and signals only its own PID namespace (the zygote is PID 1 and
  non-dumpable); everything it leaves is killed. Network: loopback only. IPC, UTS: private.
- Identity: as root, model code runs as a uid leased host-wide per slot (62000+), never as
  root; as an ordinary user it is uid 0 of its user namespace without any capability, which
  the host sees as the invoking user (one uid is all an unprivileged namespace can map).

NOT isolated (know this before trusting a verdict):
- The kernel is shared: a kernel exploit through an allowed syscall escapes. An escaped
  ordinary-user job would act as the invoking user (its files are reachable then).
- CPU time is charged per job (all its processes, sampled every 50 ms) and capped per
  process by RLIMIT_CPU. Memory is capped per process (RLIMIT_AS over the zygote's use) and,
  where this host lets us make a memory cgroup (cgroup v2 or v1, writable: root, or a
  delegated one; ``isolation.job_memory_cgroup`` says whether it is), for all of a job's
  processes together: one cgroup limited to the budget (over what a child may copy of the
  zygote), its OOM kill the job's memory_limit. Without one (an ordinary user, as a rule)
  a job may hold up to 64 processes x the budget. What a command leaves in its workspace
  stays host RAM after the job, charged to no later job (bounded by the workspace's size).
- Disk: 16 MiB per file (RLIMIT_FSIZE), the 256 MiB /tmp tmpfs (host RAM; charged to the
  job's cgroup while it runs) and, per workspace, a tmpfs of ``workspace_bytes`` where the
  host can mount one (root: ``workspaces.quota_enforced``); without root a workspace is a
  plain dir as large as the file system it is on allows (``agent.workspace_dir``, e.g. a
  sized tmpfs). A run killed before its ``close`` and its interpreter's exit leaves its
  workspace mounts behind (and empty cgroups).
- Processes: RLIMIT_NPROC 64 (per leased uid as root; per user namespace on kernels
  >= 5.14 as an ordinary user, per host user before).
- The job can read what the binds hold (the interpreter's dirs are system files) and its
  own PID namespace's /proc (the zygote's command line: our harness source and options,
  which name host paths such as the repo's, never test data).
- Timing and other side channels of a shared machine.

What the machine needs: Linux with seccomp filters, util-linux ``unshare``, Debian's
``/usr/bin/python3``, and either root or unprivileged user namespaces
(``kernel.unprivileged_userns_clone=1`` where it exists, ``user.max_user_namespaces`` > 0,
no AppArmor restriction on unprivileged namespaces). Inside a container without those, use
``sandbox.backend: docker`` from the host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from typing import TYPE_CHECKING

from codeloop.sandbox.base import SandboxError
from codeloop.sandbox.cgroups import JobCgroups
from codeloop.sandbox.cmdjobs import WorkspaceRoot
from codeloop.sandbox.pool import PoolExecutor, Zygote, child_python, lease_uid, zygote_opts

if TYPE_CHECKING:  # (see pool.py: not imported before a Prestart)
    from codeloop.config import SandboxConfig

WORK_ROOT = "/tmp/codeloop-work"  # inside the private root's own /tmp

_NS_FLAGS = [
    "--pid",
    "--fork",
    "--kill-child",
    "--net",
    "--ipc",
    "--uts",
    "--mount",
    "--mount-proc",
    # the new mount namespace's copies are slaves of the host's mounts (util-linux's default
    # is private): the workspace root's bind keeps receiving the host's later mounts (seal.py)
    "--propagation",
    "slave",
]


def _unshare_command() -> list[str]:
    """The ``unshare`` command line a zygote starts under (as root, or mapping our user)."""
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    return [unshare, *([] if os.geteuid() == 0 else ["--map-root-user"]), *_NS_FLAGS]


@lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...]:
    """The ``unshare`` command line this kernel accepts, or () where it refuses it."""
    cmd = _unshare_command()
    try:
        probe = subprocess.run([*cmd, child_python(), "-I", "-S", "-c", "pass"],
                               capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(cmd) if probe.returncode == 0 else ()


def _unshare_problem() -> str:
    """Why no namespaced zygote can start here ('' when one can)."""
    if namespace_prefix():
        return ""
    how = (
        "root" if os.geteuid() == 0 else "an unprivileged user namespace (unshare --map-root-user)"
    )
    return (
        f"the local sandbox needs {how} with PID, network, IPC, UTS and mount namespaces, and "
        "this machine refused `unshare` (a container without CAP_SYS_ADMIN, or "
        "kernel.unprivileged_userns_clone / user.max_user_namespaces = 0)"
    )


def _opts(uid: int | None, ro_binds: list[str], seal_extra: dict, cgroup: dict) -> dict:
    """A local zygote's options (every slot's, also a prestarted one's); ``cgroup``: where
    it makes its job cgroups (cgroups.JobCgroups.zygote_opts)."""
    return zygote_opts(uid, WORK_ROOT, root=True, ro_binds=ro_binds, seal_extra=seal_extra,
                       private_scratch=True, cgroup=cgroup)


class Prestart:
    """The zygotes of a local executor without ro_binds or workspaces, started before its
    config is known: ``codeloop exec`` starts them before it imports the config's models
    (pydantic, on one core while the other one idles). They are the same zygotes,
    leased uids and seal checks included: ``LocalExecutor(cfg, prestart=...)`` adopts them
    when its own would be identical and checks each against ``cfg.require`` as it does its
    own; otherwise, or if never adopted, ``close`` ends them and frees their uids (and
    removes their memory cgroups, which the adopting executor takes over otherwise)."""

    def __init__(self, workers: int) -> None:
        self.workers, self.uids, self._locks = workers, [None] * workers, []
        if os.geteuid() == 0:  # as PoolExecutor leases them
            for slot in range(workers):
                self.uids[slot], fd = lease_uid()
                self._locks.append(fd)
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="prestart")
        prefix = _unshare_command()
        self.cgroups: JobCgroups | None = JobCgroups()
        self._zygotes: dict[int, Future] = {
            slot: self._threads.submit(
                Zygote, prefix, _opts(self.uids[slot], [], {}, self.cgroups.zygote_opts(slot))
            )
            for slot in range(workers)
        }

    def fits(self, cfg: SandboxConfig, workspaces: bool) -> bool:
        """Whether ``cfg``'s local executor would start exactly these zygotes."""
        workers = cfg.workers or os.cpu_count() or 1
        return not workspaces and not cfg.ro_binds and workers == self.workers

    def adopt(self) -> tuple[list[int | None], list[int], JobCgroups]:
        """The uids, their lock fds and the memory cgroups, handed to the adopting executor
        (no longer ours)."""
        leased, self._locks = (list(self.uids), self._locks), []
        cgroups, self.cgroups = self.cgroups, None
        return (*leased, cgroups)

    def take(self, slot: int) -> Zygote | None:
        """The slot's zygote (once; SandboxError if it failed to start), else None."""
        started = self._zygotes.pop(slot, None)
        return None if started is None else started.result()

    def close(self) -> None:
        """End every zygote not taken and free the uids not handed over."""
        for started in self._zygotes.values():
            try:
                started.result().close()
            except Exception:  # noqa: BLE001 - one that failed to start has nothing to end
                pass
        self._zygotes = {}
        self._threads.shutdown(wait=True)
        for fd in self._locks:
            os.close(fd)
        self._locks = []
        if self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None


class LocalExecutor(PoolExecutor):
    """``backend: local``: warm zygotes, each sealed in its own namespaces and private root;
    fork per job, every process of a job in one memory cgroup where the host allows it
    (``cgroups``; ``isolation.job_memory_cgroup`` says whether it is). Refuses to start
    (SandboxError) where it cannot seal. ``workspace_bytes``: each workspace's own tmpfs
    size (cmdjobs.WorkspaceRoot's ``quota_bytes``; None: no quota)."""

    def __init__(
        self,
        cfg: SandboxConfig,
        workspaces: bool = False,
        envs_root: str | None = None,
        ws_parent: str | None = None,
        warm: bool = False,
        prestart: Prestart | None = None,
        workspace_bytes: int | None = None,
    ) -> None:
        if prestart is not None and not prestart.fits(cfg, workspaces):
            prestart.close()
            prestart = None
        for path in cfg.ro_binds:
            if not os.path.exists(path):
                raise SandboxError(f"sandbox.ro_binds: {path} does not exist")
        # no probe first (a whole `unshare python3` run before any zygote started):
        # a zygote that cannot start under it is the probe; only then is `unshare` asked why
        prefix = _unshare_command()
        # workspaces: agent commands (cmdjobs); the zygote hands each to the slot's uid
        # (its root is bound as a shared mount, for a quota, before any zygote starts)
        self.workspaces = None
        if workspaces:
            self.workspaces = WorkspaceRoot(
                envs_root, parent=ws_parent, bind_per_job=True, quota_bytes=workspace_bytes
            )
        seal_extra = self.workspaces.seal_opts() if self.workspaces else {}

        def spawn(slot: int) -> Zygote:
            early = prestart.take(slot) if prestart is not None else None
            if early is not None:
                return early
            cgroup = self.cgroups.zygote_opts(slot)
            return Zygote(prefix, _opts(self.uids[slot], cfg.ro_binds, seal_extra, cgroup))

        self._prestart, leased = prestart, None
        if prestart is not None:
            uids, locks, self.cgroups = prestart.adopt()
            leased = (uids, locks)
        else:
            self.cgroups = JobCgroups()
        super().__init__(cfg, spawn, backend="local", leased=leased)
        try:
            self.start(all_slots=warm)
        except SandboxError as exc:
            problem = _unshare_problem()
            if problem:
                raise SandboxError(f"{problem}; use sandbox.backend: docker") from exc
            raise

    def close(self) -> None:
        super().close()
        if self._prestart is not None:  # a prestarted zygote of a slot never used
            self._prestart.close()
        self.cgroups.close()  # after every zygote: their job cgroups hold no process now
