"""Parent side of the zygote protocol, and the worker pool every backend shares.

A ``Zygote`` is one warm interpreter (a process, or one inside a container) answering framed
job requests. ``PoolExecutor`` keeps one zygote per worker slot and judges jobs on a thread
pool (``fresh_per_job``: a new zygote per job, the ``subprocess`` backend). Our own faults (a
zygote that dies, hangs or reports a fault, the host's OOM killer taking the job) are never
a model-code status: the slot gets a fresh zygote, the job is re-run once, then SandboxError.

Every slot's children run as a uid leased host-wide for the executor's lifetime (an
exclusive ``flock`` per uid), so no two executors ever share a uid: the per-job ``kill(-1)``
as that uid and its RLIMIT_NPROC count reach only that slot's job. A slot's ``Lane`` queues
a second job in the zygote's pipe, but the zygote runs, kills and sweeps one job at a time.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import queue
import select
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codeloop.sandbox.base import CmdJob, CmdResult, ExecJob, ExecResult, SandboxError
from codeloop.sandbox.cmdjobs import run_commands
from codeloop.sandbox.isolation import Isolation, host_namespaces, host_paths_to_hide, refusal
from codeloop.sandbox.uids import UID_BASE, UID_LOCKS, UID_SPAN, lease_uid  # noqa: F401
from codeloop.sandbox.verdicts import (
    build_request,
    interpret,
    no_code_result,
    plan_job,
    wall_cap,
    wire,
)

if TYPE_CHECKING:  # (not imported for real: `codeloop exec` starts zygotes before pydantic)
    from codeloop.config import SandboxConfig

HERE = Path(__file__).resolve().parent
# one program each (stdlib only): memcg.py, procs.py, budget.py, seccomp.py, seal.py,
# evaluator_fork.py and trees.py define what command.py and zygote.py use; evaluator.py, run in the evaluator child, uses harness.py's wire format
ZYGOTE_SRC = "\n\n".join(
    (HERE / name).read_text()
    for name in ("memcg.py", "procs.py", "budget.py", "seccomp.py", "seal.py", "evaluator_fork.py", "trees.py",
                 "command.py", "zygote.py")
)
HARNESS_SRC = (HERE / "harness.py").read_text() + "\n\n" + (HERE / "evaluator.py").read_text()
CHILD_PYTHON = os.environ.get("CODELOOP_SANDBOX_PYTHON", "/usr/bin/python3")


# Modules the zygote imports once, so jobs (and evaluators) find them loaded: those the
# datasets' programs and tests import. Every module here makes each fork and exit dearer
# (its pages are the zygote's), so rarely used ones (hashlib: all of libcrypto,
# statistics, datetime, textwrap, unicodedata) are left to the jobs that import them, and
# so is random: its at-fork reseed of the generator costs every job CPU.
PRELOAD = ["collections", "math", "itertools", "functools", "re", "heapq", "bisect", "string",
           "operator", "typing", "copy", "json", "decimal", "fractions", "array", "cmath"]
GRACE_S = 10.0  # on top of the job deadline before we call a zygote hung


def child_python() -> str:
    """The interpreter children run: Debian's python3 when there, readable by any uid."""
    if os.access(CHILD_PYTHON, os.X_OK):
        return CHILD_PYTHON
    return shutil.which("python3") or "python3"


def zygote_opts(
    uid: int | None, work_root: str, root: bool = False, ro_binds: list[str] = (),
    seal_extra: dict | None = None, **extra: Any,
) -> dict:
    """Zygote options; ``uid`` is the slot's leased uid (None: no uid drop, not root).
    ``root``: build the private root (only inside a fresh mount namespace); ``seal_extra``:
    the workspace binds and dirs (cmdjobs.WorkspaceRoot.seal_opts)."""
    seal = {"root": root, "ro_binds": list(ro_binds), "host_ns": host_namespaces(),
            "expect_absent": list(host_paths_to_hide()), **(seal_extra or {})}
    return {"harness": HARNESS_SRC, "uid": uid, "work_root": work_root, "preload": PRELOAD,
            "seal": seal, **extra}


class Zygote:
    """One zygote process spoken to through its stdin/stdout pipes."""

    def __init__(self, prefix: list[str], opts: dict, start_timeout: float = 30.0) -> None:
        self.stderr = tempfile.TemporaryFile()
        argv = [*prefix, child_python(), "-I", "-S", "-c", ZYGOTE_SRC, json.dumps(opts)]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.stderr, env=env, start_new_session=True)
        except OSError as exc:
            raise SandboxError(f"cannot start zygote {argv[0]}: {exc}") from exc
        self.info = self.recv(start_timeout)
        if "seal_error" in self.info:
            self.close()
            raise SandboxError(
                f"sandbox zygote refused to start: {self.info['seal_error']}; "
                "use sandbox.backend: docker where this machine cannot seal a local sandbox"
            )

    def _read_exact(self, n: int, deadline: float) -> bytes:
        buf = b""
        while len(buf) < n:
            remaining = deadline - time.monotonic()
            try:  # (closed under us when a lane-mate found the zygote dead)
                fd = self.proc.stdout.fileno()
                if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                    raise SandboxError(f"zygote gave no answer in time{self._tail()}")
                chunk = os.read(fd, n - len(buf))
            except (OSError, ValueError) as exc:
                raise SandboxError(f"zygote is gone: {exc}{self._tail()}") from exc
            if not chunk:
                raise SandboxError(f"zygote exited (code {self.proc.poll()}){self._tail()}")
            buf += chunk
        return buf

    def recv(self, timeout: float) -> dict:
        """The next frame: the answer to the oldest job not yet answered (first: the probe)."""
        deadline = time.monotonic() + timeout
        size = struct.unpack(">I", self._read_exact(4, deadline))[0]
        return marshal.loads(self._read_exact(size, deadline))

    def _tail(self) -> str:
        try:
            self.stderr.seek(0)
            text = self.stderr.read()[-2000:].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return f": {text}" if text else ""

    def host_pid(self) -> int:
        """PID (in our namespace) of the zygote itself, below a possible ``unshare``."""
        pid = self.proc.pid
        if self.info.get("pid1"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                pid = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
        return pid

    def send(self, job: dict) -> None:
        """Queue one job; the zygote reads it once it is done with the jobs before it."""
        if self.proc.poll() is not None:  # killed while idle: never route a job to it
            raise SandboxError(f"zygote exited (code {self.proc.returncode}){self._tail()}")
        try:
            self.proc.stdin.write(wire(job))
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise SandboxError(f"zygote is gone: {exc}{self._tail()}") from exc

    def request(self, job: dict, timeout: float) -> dict:
        self.send(job)
        return self.recv(timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


class Lane:
    """In-order jobs over one zygote, up to ``DEPTH`` in flight: the next job waits in the
    zygote's pipe, so the zygote starts it the moment it has answered the one before,
    instead of idling while we interpret that answer and plan the next job. The zygote
    still runs one job at a time: the queue adds no concurrency, only removes idle gaps.
    A failure breaks the lane for every job in it (each is re-run on a fresh zygote)."""

    def __init__(self, zygote: Any) -> None:
        self.zygote = zygote
        self._send = threading.Lock()
        self._turn = threading.Condition()
        self._tickets = 0  # jobs sent
        self._next = 0  # ticket whose answer is read next
        self._broken: SandboxError | None = None

    def _fail(self, exc: SandboxError) -> SandboxError:
        with self._turn:
            self._broken = self._broken or exc
            self._turn.notify_all()
        return exc

    def request(self, job: dict, timeout: float) -> dict:
        """Send ``job``, wait until the answers before it are read, read its own."""
        with self._send:  # frames never interleave; tickets follow the pipe's order
            if self._broken:
                raise SandboxError(f"zygote failed earlier: {self._broken}")
            ticket, self._tickets = self._tickets, self._tickets + 1
            try:
                self.zygote.send(job)
            except SandboxError as exc:
                raise self._fail(exc) from None
        with self._turn:
            while self._next != ticket and not self._broken:
                self._turn.wait()
            if self._broken:
                raise SandboxError(f"zygote failed with a job before ours: {self._broken}")
        try:  # our turn: the zygote is on our job now, so the deadline starts here
            resp = self.zygote.recv(timeout)
        except SandboxError as exc:
            raise self._fail(exc) from None
        with self._turn:
            self._next += 1
            self._turn.notify_all()
        return resp


class PoolExecutor:
    """Executor over N zygote slots; ``spawn(slot)`` makes a zygote for a slot.

    With ``drop_uid`` (and root) each slot leases its own host-wide uid (``self.uids``);
    ``leased``: (uids, lock fds) leased already, one per slot, now the executor's. Each slot
    is a ``Lane`` taking ``DEPTH`` jobs at once (1 with ``fresh_per_job``). Each zygote's
    start-up probe is an ``Isolation`` (``self.isolation``: the first one's); with ``enforce``
    one lacking anything in ``cfg.require`` is refused (SandboxError naming what is missing).
    """

    DEPTH = 2

    def __init__(
        self,
        cfg: SandboxConfig,
        spawn: Callable[[int], Any],
        fresh_per_job: bool = False,
        drop_uid: bool = True,
        backend: str = "local",
        enforce: bool = True,
        leased: tuple[list[int | None], list[int]] | None = None,
    ) -> None:
        self.cfg, self.backend = cfg, backend
        self.required = tuple(cfg.require) if enforce else ()
        self.isolation: Isolation | None = None
        self.workspaces = getattr(self, "workspaces", None)  # set by a backend that has them
        self.workers = cfg.workers or os.cpu_count() or 1
        self._spawn, self._fresh = spawn, fresh_per_job
        self._slots: queue.Queue = queue.Queue()
        self._zygotes: dict[int, Any] = {}
        self._closed = False
        self._uid_locks: list[int] = []
        self.uids: list[int | None] = [None] * self.workers
        if leased is not None:
            self.uids, self._uid_locks = list(leased[0]), list(leased[1])
        elif drop_uid and os.geteuid() == 0:
            for slot in range(self.workers):
                self.uids[slot], fd = lease_uid()
                self._uid_locks.append(fd)
        self._lanes: dict[int, Lane] = {}
        self._spawning = [threading.Lock() for _ in range(self.workers)]
        depth = 1 if fresh_per_job else self.DEPTH
        for _ in range(depth):  # slot order 0, 1, .., 0, 1, ..: a batch spreads over zygotes
            for slot in range(self.workers):
                self._slots.put(slot)
        self._threads = ThreadPoolExecutor(
            max_workers=self.workers * depth, thread_name_prefix="sandbox"
        )

    def _zygote(self, slot: int) -> Any:
        return self._lane(slot).zygote

    def _lane(self, slot: int) -> Lane:
        with self._spawning[slot]:  # two jobs of one slot must not both start a zygote
            lane = self._lanes.get(slot)
            if lane is None:
                z = self._spawn(slot)
                self._check(z)
                self._zygotes[slot] = z
                lane = self._lanes[slot] = Lane(z)
            return lane

    def _check(self, zygote: Any) -> None:
        """Record the zygote's probed isolation; refuse it if it lacks a required property."""
        iso = Isolation.from_zygote(self.backend, zygote.info)
        if self.isolation is None or self._fresh:
            self.isolation = iso
        missing = iso.missing(self.required)
        if missing:
            try:
                zygote.close()
            finally:
                raise SandboxError(refusal(self.backend, iso, missing))

    def start(self, all_slots: bool = False) -> None:
        """Start slot 0's zygote now (so ``isolation`` is known), with ``all_slots`` every
        slot's side by side (a start is mostly waiting); SandboxError if one is refused."""
        errors: list[BaseException] = []

        def one(slot: int) -> None:
            try:
                self._lane(slot)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in our thread
                errors.append(exc)

        others = [threading.Thread(target=one, args=(s,)) for s in range(1, self.workers)]
        for t in others if all_slots else ():
            t.start()
        one(0)
        for t in others if all_slots else ():
            t.join()
        if errors:
            self.close()
            raise errors[0]

    def _discard(self, slot: int, lane: Lane | None = None) -> None:
        """Drop the slot's zygote; given ``lane``, only if it is still that lane's (a
        lane-mate may have replaced it already)."""
        with self._spawning[slot]:
            if lane is not None and self._lanes.get(slot) is not lane:
                return
            self._lanes.pop(slot, None)
            z = self._zygotes.pop(slot, None)
        if z is not None:
            try:
                z.close()
            except Exception:  # noqa: BLE001 - a broken zygote may fail to close; it is dropped
                pass

    def _attempt(self, request: dict, timeout: float) -> dict:
        """One try on a free lane. A fault of ours (zygote gone, hung, reporting a fault,
        job taken by the host's OOM killer) drops the slot's zygote and raises."""
        slot, lane = self._slots.get(), None
        try:
            lane = self._lane(slot)
            resp = lane.request(request, timeout)
            if "fault" in resp:
                raise SandboxError(f"sandbox fault: {resp['fault']}")
            if resp.get("host_oom"):
                raise SandboxError("the host's OOM killer killed the job (host memory pressure)")
            if self._fresh:
                self._discard(slot, lane)
            return resp
        except SandboxError:
            if lane is not None:  # (None: its zygote did not start; nothing to drop)
                self._discard(slot, lane)
            raise
        finally:
            self._slots.put(slot)

    def run(self, job: ExecJob, plans: list | None = None) -> ExecResult:
        """Judge one job (thread-safe). Our own fault: a fresh zygote re-runs the job once,
        then SandboxError; a fault is never turned into a model-code status. ``plans``:
        ``judge.plan_job(job)`` if the caller already made them (planned elsewhere)."""
        if self._closed:
            raise SandboxError("executor is closed")
        if not job.code.strip():
            return no_code_result(job)
        plans = plan_job(job) if plans is None else plans
        timeout = job.timeout_s or self.cfg.timeout_s
        request = build_request(job, plans, timeout, self.cfg.memory_mb, self.cfg.max_output_bytes)
        try:
            resp = self._attempt(request, wall_cap(timeout) + GRACE_S)
        except SandboxError as first:
            if self._closed:
                raise
            try:
                resp = self._attempt(request, wall_cap(timeout) + GRACE_S)
            except SandboxError as second:
                raise SandboxError(f"{second} (the job was re-run after: {first})") from first
        return interpret(job, plans, resp)

    def run_many(self, jobs: list[ExecJob]) -> list[ExecResult]:
        """Judge many jobs in parallel; results in input order."""
        return list(self._threads.map(self.run, jobs))

    def run_commands(self, jobs: list[CmdJob]) -> list[CmdResult]:
        """Run commands in this executor's workspaces (cmdjobs.run_commands)."""
        return run_commands(self, jobs, GRACE_S)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._threads.shutdown(wait=True)
        for slot in list(self._zygotes):
            self._discard(slot)
        for fd in self._uid_locks:  # after the zygotes: their jobs are gone, the uid is free
            os.close(fd)
        self._uid_locks = []
        if self.workspaces is not None:
            self.workspaces.close()

    def __enter__(self) -> PoolExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
