"""The ``local`` backend (default): pre-forked zygotes, one per worker, inside namespaces.

Each zygote is ``unshare --pid --fork --kill-child --net --ipc --uts --mount --mount-proc
/usr/bin/python3 -I -S -c <zygote>``: PID 1 of its own PID namespace, with a network
namespace that has no interfaces, private IPC/UTS, and a private mount namespace where every
mount is remounted read-only and /tmp, /var/tmp, /dev/shm, /run/lock are fresh tmpfs. Per
job the zygote forks a child that drops to the slot's leased uid (pool.lease_uid), gets rlimits
(CPU, address space as a budget over current use, file size, 64 fds, 64 processes, no
core), a scrubbed env, a fresh work dir, stdin /dev/null and capped pipes; after the job the
zygote SIGKILLs every other process in its namespace (kill(-1) as PID 1, which also reaches
setsid'd daemons) and empties the scratch tmpfs.

NOT isolated (know this before trusting a verdict):
- CPU time is capped per process, not per job tree; memory is capped per process (RLIMIT_AS),
  not per job: up to 64 processes x the budget. No cgroup is used.
- The kernel is shared (no seccomp filter): a kernel exploit escapes.
- The job can read any world-readable file of the host (read-only view), e.g. /etc/passwd,
  the repository if its mode allows; it cannot read root-only files (0600/0700) or other
  processes' environments.
- Without root or where ``unshare`` is refused (some containers), the zygote runs without
  namespaces: then no network isolation, writes to world-writable host dirs are possible
  (swept only for the job's own top-level entries by uid) and, without root, no uid drop,
  so the job could signal the parent. The chosen mode is in ``executor.isolation``.
- Verdicts of tests flagged ``in_sandbox`` are computed in the child and only as strong as
  the harness' isolation from the model's code in that same process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache

from codeloop.config import SandboxConfig
from codeloop.sandbox.base import SandboxError
from codeloop.sandbox.pool import PoolExecutor, Zygote, child_python, zygote_opts

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
]


@lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...]:
    """The ``unshare`` command line this kernel accepts, or () where none works."""
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    candidates = [[unshare, *_NS_FLAGS]]
    if os.geteuid() != 0:
        candidates = [[unshare, "--map-root-user", *_NS_FLAGS]]
    for cmd in candidates:
        try:
            probe = subprocess.run([*cmd, child_python(), "-I", "-S", "-c", "pass"],
                                   capture_output=True, timeout=20)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return tuple(cmd)
    return ()


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


class LocalExecutor(PoolExecutor):
    """``backend: local``: warm zygotes, each sealed in its own namespaces and private root;
    fork per job. Refuses to start (SandboxError) where it cannot seal."""

    def __init__(self, cfg: SandboxConfig) -> None:
        problem = _unshare_problem()
        if problem:
            raise SandboxError(f"{problem}; use sandbox.backend: docker")
        for path in cfg.ro_binds:
            if not os.path.exists(path):
                raise SandboxError(f"sandbox.ro_binds: {path} does not exist")
        prefix = list(namespace_prefix())

        def spawn(slot: int) -> Zygote:
            opts = zygote_opts(self.uids[slot], WORK_ROOT, root=True, ro_binds=cfg.ro_binds,
                               private_scratch=True)  # fmt: skip
            return Zygote(prefix, opts)

        super().__init__(cfg, spawn, backend="local")
        self.start()
