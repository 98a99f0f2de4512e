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
import tempfile
from functools import lru_cache

from codeloop.config import SandboxConfig
from codeloop.sandbox.pool import PoolExecutor, Zygote, child_python, zygote_opts

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


class LocalExecutor(PoolExecutor):
    """``backend: local``: warm namespaced zygotes; fork per job."""

    def __init__(self, cfg: SandboxConfig) -> None:
        prefix = list(namespace_prefix())
        self.host_root = None
        if prefix:
            root, extra = "/tmp/codeloop-work", {"isolate_fs": True, "private_scratch": True}
            self.isolation = "namespaces: pid, net, ipc, uts, mount (read-only root, private tmpfs)"
        else:
            self.host_root = root = tempfile.mkdtemp(prefix="codeloop-sbx-")
            os.chmod(root, 0o711)
            extra = {}
            self.isolation = "no namespaces (unshare refused): rlimits, uid drop when root"

        def spawn(slot: int) -> Zygote:
            return Zygote(prefix, zygote_opts(self.uids[slot], root, **extra))

        super().__init__(cfg, spawn)
        if self.uids[0] is not None:
            self.isolation += f"; children run as leased uids {self.uids}"

    def close(self) -> None:
        super().close()
        if self.host_root:
            shutil.rmtree(self.host_root, ignore_errors=True)
