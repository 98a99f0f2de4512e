"""Parent side of the zygote protocol, and the worker pool every backend shares.

A ``Zygote`` is one warm interpreter (a process, or a process inside a container) that
answers framed job requests. ``PoolExecutor`` keeps one zygote per worker slot and judges
jobs on a thread pool; with ``fresh_per_job`` it starts a new zygote for every job (the
plain ``subprocess`` backend). Our own faults (a zygote that dies, hangs or reports a
fault, or the host's OOM killer taking the job) are never a model-code status: the slot
gets a fresh zygote and the job is re-run once; a second fault raises SandboxError.

Every slot's children run as a uid leased host-wide for the executor's lifetime (an
exclusive ``flock`` on a lock file per uid), so no two executors, in one process or in
several, ever share a uid: the per-job ``kill(-1)`` as that uid and its RLIMIT_NPROC count
reach only that slot's own job.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import select
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from codeloop.config import SandboxConfig
from codeloop.sandbox.base import ExecJob, ExecResult, SandboxError
from codeloop.sandbox.judge import build_request, interpret, no_code_result, plan_job, wall_cap

HERE = Path(__file__).resolve().parent
ZYGOTE_SRC = (HERE / "zygote.py").read_text()
HARNESS_SRC = (HERE / "harness.py").read_text()
CHILD_PYTHON = os.environ.get("CODELOOP_SANDBOX_PYTHON", "/usr/bin/python3")
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


PRELOAD = ["collections", "math", "itertools", "functools", "re", "heapq", "bisect", "string",
           "operator", "typing", "copy", "random", "statistics", "datetime", "json",
           "decimal", "fractions", "array", "hashlib", "cmath", "textwrap", "unicodedata"]  # fmt: skip
GRACE_S = 10.0  # on top of the job deadline before we call a zygote hung


def child_python() -> str:
    """The interpreter children run: Debian's python3 when there, readable by any uid."""
    if os.access(CHILD_PYTHON, os.X_OK):
        return CHILD_PYTHON
    return shutil.which("python3") or "python3"


def zygote_opts(uid: int | None, work_root: str, **extra: Any) -> dict:
    """Zygote options; ``uid`` is the slot's leased uid (None: no uid drop, not root)."""
    return {"harness": HARNESS_SRC, "uid": uid, "work_root": work_root, "preload": PRELOAD, **extra}


class Zygote:
    """One zygote process spoken to through its stdin/stdout pipes."""

    def __init__(self, prefix: list[str], opts: dict, start_timeout: float = 30.0) -> None:
        self.stderr = tempfile.TemporaryFile()
        argv = [*prefix, child_python(), "-I", "-S", "-c", ZYGOTE_SRC, json.dumps(opts)]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.stderr, env=env, start_new_session=True)  # fmt: skip
        except OSError as exc:
            raise SandboxError(f"cannot start zygote {argv[0]}: {exc}") from exc
        self.info = self._recv(start_timeout)

    def _read_exact(self, n: int, deadline: float) -> bytes:
        fd, buf = self.proc.stdout.fileno(), b""
        while len(buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise SandboxError(f"zygote gave no answer in time{self._tail()}")
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise SandboxError(f"zygote exited (code {self.proc.poll()}){self._tail()}")
            buf += chunk
        return buf

    def _recv(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        size = struct.unpack(">I", self._read_exact(4, deadline))[0]
        return json.loads(self._read_exact(size, deadline))

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
            try:
                pid = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                pass
        return pid

    def request(self, job: dict, timeout: float) -> dict:
        if self.proc.poll() is not None:  # killed while idle: never route a job to it
            raise SandboxError(f"zygote exited (code {self.proc.returncode}){self._tail()}")
        data = json.dumps(job).encode("utf-8", "surrogatepass")
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise SandboxError(f"zygote is gone: {exc}{self._tail()}") from exc
        return self._recv(timeout)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


class PoolExecutor:
    """Executor over N zygote slots; ``spawn(slot)`` makes a zygote for a slot.

    With ``drop_uid`` (and root) each slot leases its own host-wide uid (``self.uids``).
    """

    def __init__(
        self,
        cfg: SandboxConfig,
        spawn: Callable[[int], Any],
        fresh_per_job: bool = False,
        drop_uid: bool = True,
    ) -> None:
        self.cfg = cfg
        self.workers = cfg.workers or os.cpu_count() or 1
        self._spawn, self._fresh = spawn, fresh_per_job
        self._slots: queue.Queue = queue.Queue()
        self._zygotes: dict[int, Any] = {}
        self._closed = False
        self._uid_locks: list[int] = []
        self.uids: list[int | None] = [None] * self.workers
        if drop_uid and os.geteuid() == 0:
            for slot in range(self.workers):
                self.uids[slot], fd = lease_uid()
                self._uid_locks.append(fd)
        for slot in range(self.workers):
            self._slots.put(slot)
        self._threads = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sandbox")

    def _zygote(self, slot: int) -> Any:
        z = self._zygotes.get(slot)
        if z is None:
            z = self._zygotes[slot] = self._spawn(slot)
        return z

    def _discard(self, slot: int) -> None:
        z = self._zygotes.pop(slot, None)
        if z is not None:
            try:
                z.close()
            except Exception:  # noqa: BLE001 - a broken zygote may fail to close; it is dropped
                pass

    def _attempt(self, request: dict, timeout: float) -> dict:
        """One try on a free slot. A fault of ours (zygote gone, hung, reporting a fault,
        job taken by the host's OOM killer) drops the slot's zygote and raises."""
        slot = self._slots.get()
        try:
            resp = self._zygote(slot).request(request, timeout)
            if "fault" in resp:
                raise SandboxError(f"sandbox fault: {resp['fault']}")
            if resp.get("host_oom"):
                raise SandboxError("the host's OOM killer killed the job (host memory pressure)")
            if self._fresh:
                self._discard(slot)
            return resp
        except SandboxError:
            self._discard(slot)
            raise
        finally:
            self._slots.put(slot)

    def run(self, job: ExecJob) -> ExecResult:
        """Judge one job (thread-safe). Our own fault: a fresh zygote re-runs the job once,
        then SandboxError; a fault is never turned into a model-code status."""
        if self._closed:
            raise SandboxError("executor is closed")
        if not job.code.strip():
            return no_code_result(job)
        plans = plan_job(job)
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

    def __enter__(self) -> PoolExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
