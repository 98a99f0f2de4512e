"""Host side of the jobs' memory cgroups (codeloop.sandbox.memcg is the zygote's side).

``JobCgroups()`` makes one dir per executor, ``codeloop-<pid>-<token>``, in the first memory
hierarchy this process can write: cgroup v2 where the memory controller is there (below
our own cgroup when it delegates memory to its children, else below the hierarchy's root),
else the v1 memory hierarchy (below our own cgroup, else its root). Each zygote makes its
job cgroups below it. Where none can be made (an ordinary user without a delegated
cgroup, a container with /sys/fs/cgroup read-only) ``problem`` says why, the zygotes run
without one and their probe reports ``job_memory_cgroup`` missing: memory is then capped
per process only (RLIMIT_AS). ``close`` removes the dir and every job cgroup left in it, and so
does the interpreter's exit for an executor never closed (a run killed before either leaves
empty cgroups behind: they hold no process).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import secrets
import time
import weakref

PREFIX = "codeloop-"


def _unescape(path: str) -> str:
    """A mountinfo path field (spaces and such are octal escapes)."""
    return path.encode().decode("unicode_escape") if "\\" in path else path


def _hierarchies() -> list[tuple[str, str, str, str]]:
    """(kind, mount point, mount root, our cgroup's path) of each memory hierarchy, v2 first."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, (fstype, _src, sopts) = left.split(), right.split()[:3]
            root, point = _unescape(fields[3]), _unescape(fields[4])
            if fstype == "cgroup2" and "" in own:
                try:
                    with open(os.path.join(point, "cgroup.controllers")) as c:
                        has_memory = "memory" in c.read().split()
                except OSError:
                    has_memory = False
                if has_memory:
                    found.append(("v2", point, root, own[""]))
            elif fstype == "cgroup" and "memory" in sopts.split(",") and "memory" in own:
                found.append(("v1", point, root, own["memory"]))
    return sorted(found, key=lambda h: h[0] != "v2")


def _bases(kind: str, point: str, root: str, own: str) -> list[str]:
    """Where an executor's dir may go in this hierarchy: below our own cgroup, else its root."""
    out = []
    if own == root or own.startswith(root.rstrip("/") + "/"):
        mine = os.path.join(point, own[len(root.rstrip("/")) :].lstrip("/"))
        if kind == "v1" or _delegates_memory(mine):
            out.append(mine.rstrip("/"))
    if point not in out:
        out.append(point)
    return out


def _delegates_memory(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.subtree_control")) as fh:
            return "memory" in fh.read().split()
    except OSError:
        return False


def _remove_quietly(path: str) -> None:
    """At exit, for an executor never closed: what can go goes (a job still running keeps
    its cgroup)."""
    with contextlib.suppress(OSError):
        remove_cgroup(path, wait_s=0.5)


def remove_cgroup(path: str, wait_s: float = 5.0) -> None:
    """rmdir a cgroup and the cgroups below it (its control files go with it). A cgroup whose
    last processes are still exiting is busy a moment: retried up to ``wait_s``."""
    for name in os.listdir(path):
        sub = os.path.join(path, name)
        if os.path.isdir(sub):
            remove_cgroup(sub, wait_s)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


class JobCgroups:
    """An executor's memory cgroup dir (``path``, ``kind``), or ``problem`` saying why none."""

    def __init__(self) -> None:
        self.path, self.kind, self.rel, self.problem = "", "", "", ""
        self._spawned = itertools.count(1)  # (next() is atomic: slots start side by side)
        tried = []
        try:
            hierarchies = _hierarchies()
        except OSError as e:
            hierarchies, tried = [], [f"cannot read our cgroups: {e}"]
        for kind, point, root, own in hierarchies:
            for base in _bases(kind, point, root, own):
                why = self._make(kind, point, base)
                if not why:
                    return
                tried.append(f"{kind} {base}: {why}")
        self.problem = "no writable memory cgroup" + (f" ({'; '.join(tried)})" if tried else "")

    def _make(self, kind: str, point: str, base: str) -> str:
        """Make our dir below ``base`` ('' when done), else why not."""
        path = os.path.join(base, f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.mkdir(path, 0o755)
        except OSError as e:
            return e.strerror or str(e)
        try:
            if kind == "v2":  # its job cgroups (children) get the memory controller
                with open(os.path.join(path, "cgroup.subtree_control"), "w") as fh:
                    fh.write("+memory")
            elif not os.path.exists(os.path.join(path, "memory.limit_in_bytes")):
                raise OSError(errno.ENOENT, "no memory.limit_in_bytes")
        except OSError as e:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return e.strerror or str(e)
        self.path, self.kind = path, kind
        self.rel = os.path.relpath(path, point)
        self._at_exit = weakref.finalize(self, _remove_quietly, path)
        return ""

    def zygote_opts(self, slot: int) -> dict:
        """The ``cgroup`` option of a zygote started for ``slot`` (each start its own name)."""
        if not self.path:
            return {"problem": self.problem or "the executor's memory cgroup is gone"}
        name = f"s{slot}-{next(self._spawned)}"
        return {"dir": self.path, "kind": self.kind, "rel": self.rel, "name": name}

    def close(self) -> None:
        """Remove the dir and every job cgroup in it (after every zygote has ended)."""
        path, self.path = self.path, ""
        if path:
            self._at_exit.detach()
            remove_cgroup(path)
