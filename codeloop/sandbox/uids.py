"""Sandbox uids leased host-wide, one per worker slot (moved out of pool.py, which re-exports)."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from codeloop.sandbox.base import SandboxError

UID_BASE, UID_SPAN = 62000, 4096  # uids leased to slots: one uid, one slot, host-wide
UID_LOCKS = Path(tempfile.gettempdir()) / "codeloop-uid-locks"


def lease_uid() -> tuple[int, int]:
    """Lease the lowest free sandbox uid on this host: (uid, fd of its held lock file).

    The lease is an exclusive flock, held until the fd is closed or the process dies, so a
    crashed executor frees its uids. flock locks belong to the open file, so two executors
    in the same process also get different uids (a pid-derived uid once did not: the
    second executor's kill(-1) as the shared uid SIGKILLed the first one's jobs, which came
    back ``crashed``).
    """
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    for uid in range(UID_BASE, UID_BASE + UID_SPAN):
        fd = os.open(UID_LOCKS / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return uid, fd
    raise SandboxError(f"all {UID_SPAN} sandbox uids from {UID_BASE} are leased ({UID_LOCKS})")
