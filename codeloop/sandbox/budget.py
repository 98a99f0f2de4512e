"""The job's time budget, charged from /proc, and the pump that reads a running job's
pipes (the clean-up that kills what a job left is procs.py's).

Stdlib only, like zygote.py: pool.ZYGOTE_SRC is this source followed by zygote.py's, run
as one ``python3 -I -S -c`` program. The budget is charged every SAMPLE_S (only jobs that
run longer pay for it): CPU seconds of the job's processes, and wall time not spent waiting
for a CPU (schedstat), so load slows a job without timing it out (``wall_cap`` caps).
"""

import os
import select
import time

try:  # for linters and tests; as the zygote, memcg.py's and procs.py's sources run first
    from codeloop.sandbox.memcg import cg_killed
    from codeloop.sandbox.procs import descendants
except ImportError:
    pass

SAMPLE_S = 0.05  # how often a running job's budget is charged
CLK_TCK = os.sysconf("SC_CLK_TCK")


class ParentGone(Exception):
    """Our control pipe hung up mid-job: the parent died; kill the job and exit."""


def _cpu_s(pid):
    """CPU seconds of a process plus its reaped children (utime, stime, cutime, cstime)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def job_usage(waits):
    """(CPU seconds, run-queue wait seconds) of the job. ``waits`` keeps each task's last
    wait across samples, so a process reaped since still counts up to its last sample."""
    cpu = 0.0
    for pid in descendants():
        try:
            cpu += _cpu_s(pid)
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    waits[(pid, tid)] = int(fh.read().split()[1])
        except (OSError, ValueError, IndexError):
            pass  # exited between listing and reading
    return cpu, sum(waits.values()) / 1e9


def _spent(job, elapsed, waits):
    """Which budget the job has spent: "cpu", "time", "wall", "memory" (the OOM killer took
    one of its processes: the rest are ended too) or ""."""
    if cg_killed():
        return "memory"
    cpu, wait = job_usage(waits)
    if cpu >= job["timeout"]:
        return "cpu"
    if elapsed - wait >= job["timeout"]:
        return "time"
    return "wall" if elapsed >= job.get("wall_cap", job["timeout"] * 10 + 1) else ""


def pump(fds, pidfd, ctl, job, caps, start):
    """Read the child's pipes until it exits, a cap is hit, or a budget is spent.
    Returns (buffers, caps over, exited, budget spent). Raises ParentGone if ``ctl`` hangs up."""
    bufs = {name: bytearray() for name in fds}
    names = {fd: name for name, fd in fds.items()}
    poller = select.poll()
    for fd in [*names, pidfd]:
        poller.register(fd, select.POLLIN)
    if ctl is not None:
        poller.register(ctl, 0)  # no events asked: poll still reports POLLHUP / POLLERR
    over, exited, spent, waits, next_check = [], False, "", {}, start + SAMPLE_S
    while not exited and not over and not spent:
        now = time.monotonic()
        if now >= next_check:
            spent, next_check = _spent(job, now - start, waits), now + SAMPLE_S
            continue
        for fd, _ in poller.poll(max(1, int((next_check - now) * 1000) + 1)):
            if fd == pidfd:
                exited = True
            elif fd == ctl:
                raise ParentGone
            elif fd in names:
                name, chunk = names[fd], os.read(fd, 65536)
                bufs[name] += chunk
                if not chunk:
                    poller.unregister(fd)
                    del names[fd]
                elif len(bufs[name]) > caps[name]:
                    over.append(name)
    if exited:  # take what is already in the pipes, without waiting for grandchildren
        for fd, name in list(names.items()):
            os.set_blocking(fd, False)
            try:
                while len(bufs[name]) <= caps[name]:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    bufs[name] += chunk
            except BlockingIOError:
                pass
            if len(bufs[name]) > caps[name]:
                over.append(name)
    return bufs, over, exited, spent


def oom_kills():
    """The host's count of OOM-killer kills (not namespaced), or -1 where unreadable."""
    try:
        fd = os.open("/proc/vmstat", os.O_RDONLY)
        try:
            data = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        at = data.index(b"\noom_kill ") + 10
        return int(data[at : data.index(b"\n", at)])
    except (OSError, ValueError):
        return -1
