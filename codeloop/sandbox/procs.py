"""The processes of a job: walking the tree below us, and the clean-up that kills and
reaps every process a job left.

Stdlib only, like budget.py and zygote.py: pool.ZYGOTE_SRC runs this source before theirs,
as one ``python3 -I -S -c`` program, so it imports nothing of codeloop.
"""

import os
import signal


def children(pid=None) -> list[int]:
    """PIDs of ``pid``'s (default: our) children, over all its threads. A thread or the
    process that ends while we read is skipped: the other threads' children still count."""
    pid, out = pid or os.getpid(), []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(p) for p in fh.read().split()]
        except (OSError, ValueError):
            continue
    return out


def descendants():
    """PIDs of every process below us: the job's tree and its orphans (we reap for both)."""
    out, todo = [], children()
    while todo:
        out.append(todo.pop())
        todo += children(out[-1])
    return out


def kill_everything(pid, opts):
    """SIGKILL the job's child and every process it left; reap them all.
    Returns (child's wait status, child's CPU seconds incl. its reaped children)."""
    if os.getpid() == 1:  # PID 1 of our own namespace: kill(-1) reaches setsid'd daemons too
        _kill_quiet(-1)
        _, status, ru = os.wait4(pid, 0)
        while True:  # every orphan is our child: block until each dies; ECHILD: none left
            _kill_quiet(-1)  # (kill(-1) and fork exclude each other: nothing escapes it)
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return status, ru.ru_utime + ru.ru_stime
    else:
        _kill_quiet(-pid)
        _kill_quiet(pid)
        uid = opts.get("uid")
        if uid is not None and os.getuid() == 0:
            helper = os.fork()
            if helper == 0:  # kill(-1) as the job's uid: every process that uid owns
                try:
                    os.setuid(uid)
                    for _ in range(64):
                        os.kill(-1, signal.SIGKILL)
                except BaseException:
                    pass
                os._exit(0)
            os.waitpid(helper, 0)
    _, status, ru = os.wait4(pid, 0)
    for _ in range(10000):  # orphans were re-parented to us (PID 1 or subreaper)
        kids = children()
        if not kids:
            break
        for k in kids:
            _kill_quiet(k)
            try:
                os.waitpid(k, 0)
            except ChildProcessError:
                pass
    return status, ru.ru_utime + ru.ru_stime


def _kill_quiet(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
