"""Host-side inotify watch on a judged tree's test files, for the time of one pytest run.

The judge restores every test file after a run and pins the test modules pytest imports,
but a run could still write a test's *data* file (tests/data/expected.json), let the test
read it, and put it back before the run ends, which no after-the-fact comparison sees.
The kernel does: every directory holding a test file is watched from the host (the
workspace is a bind of a host dir, so writes from the sandbox raise events here too), and
any write, creation, deletion or rename of an entry there during the run is reported.
An overflowed event queue counts as a write (the run may have flooded it to hide one).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from codeloop.sandbox.base import SandboxError

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x8, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW = (
    0x100,
    0x200,
    0x400,
    0x800,
    0x4000,
)
MASK = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
MASK |= IN_DELETE_SELF | IN_MOVE_SELF
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
_EVENT = struct.Struct("iIII")
IGNORED = ("__pycache__",)  # bytecode a run writes there is never loaded (judge_boot)

_libc = ctypes.CDLL(None, use_errno=True)


class TestWatch:
    """Watches the directories of one tree's test files; ``writes()`` after the run."""

    __test__ = False  # not a pytest test class

    def __init__(self, root: str, test_files: list[str]) -> None:
        self.root = root
        self.fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            err = ctypes.get_errno()
            raise SandboxError(
                f"inotify_init1: {os.strerror(err)} (fs.inotify.max_user_instances?)"
            )
        self.dirs: dict[int, str] = {}
        for rel in sorted({os.path.dirname(r) for r in test_files}):
            self._add(rel)

    def _add(self, rel: str) -> None:
        path = os.path.join(self.root, rel)
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), MASK)
        if wd < 0:
            err = ctypes.get_errno()
            self.close()
            raise SandboxError(f"inotify_add_watch {path}: {os.strerror(err)} (max_user_watches?)")
        self.dirs[wd] = rel

    def writes(self) -> list[str]:
        """Relative paths written, created, removed or renamed since the watch began."""
        out: list[str] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not data:
                break
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, pos)
                name = (
                    data[pos + _EVENT.size : pos + _EVENT.size + size]
                    .rstrip(b"\0")
                    .decode(errors="replace")
                )
                pos += _EVENT.size + size
                if mask & IN_Q_OVERFLOW:
                    out.append("<inotify queue overflowed>")
                elif name not in IGNORED and wd in self.dirs:
                    out.append(os.path.join(self.dirs[wd], name) if name else self.dirs[wd])
        return sorted(set(out))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
