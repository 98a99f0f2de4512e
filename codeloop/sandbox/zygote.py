"""Zygote: a warm interpreter that forks one sandboxed child per job.

Stdlib only: it runs as ``/usr/bin/python3 -I -S -c <this source> <opts json>`` (Debian's
python, readable by the unprivileged uid the children drop to), either once per job
(``subprocess`` backend), as a long-lived worker inside fresh namespaces (``local``), or
as the main process of a warm container (``docker``). Frames on fd 0/1: 4-byte big-endian
length + marshal (version 4) of plain data. Per job: fork, new session, the job's memory
cgroup (where the host made one), rlimits, scrubbed env, fresh work dir, stdin /dev/null,
capped pipes, a time budget, then SIGKILL of every process the job left (as PID 1 of its
namespace: kill(-1); otherwise as the job's uid plus the subreaper's children) and removal
of every file it wrote. The zygote never interprets results: it ships the child's raw
result lines back and the parent (codeloop.sandbox.verdicts) decides. The time budget and the
pipe pump are in budget.py, the kill-and-reap clean-up in procs.py, the job's memory cgroup
in memcg.py, the seal (private root, lock-down, the start-up probe) in seal.py and
seccomp.py; their sources run first
(pool.ZYGOTE_SRC). A child that fails to seal reports it on its own pipe before any model
code runs: a fault, never a verdict.

Cost: every page written after a fork is a copy-on-write fault, most of a small job's
cost, so the per-job path writes few pages: the child uses raw os calls, its
environment (fixed work dir path) is set once, rlimits are computed here, and the clean-up
reaps by blocking waits instead of /proc scans.
"""

import ctypes
import errno
import gc
import json
import marshal
import os
import resource
import signal
import struct
import sys
import time

try:  # for linters and tests; as the zygote, the sources before it in pool.ZYGOTE_SRC run first
    from codeloop.sandbox.budget import ParentGone, oom_kills, pump
    from codeloop.sandbox.command import after_command, before_command, exec_command
    from codeloop.sandbox.evaluator_fork import start_evaluator
    from codeloop.sandbox.memcg import cg_close, cg_join, cg_limit, cg_ooms, cg_open, cg_renew
    from codeloop.sandbox.procs import kill_everything
    from codeloop.sandbox.seal import (
        build_private_root,
        drop_privileges,
        lock_down,
        namespaces,
        run_probe,
    )
    from codeloop.sandbox.seccomp import prepared_filter
    from codeloop.sandbox.trees import remove_tree
except ImportError:
    pass

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
PAGE = os.sysconf("SC_PAGE_SIZE")
OOM_REFRESH_S = 1.0  # how stale the host's OOM-kill count may be at a job's start (_oom_base)


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


# marshal, not json, for our frames: both ends are ours (the parent and this zygote; never
# a process running model code, whose lines stay JSON, parsed as untrusted data), and json's
# Python-level decoder and encoder wrote dozens more of our pages a job (each a
# copy-on-write fault after the fork)
def recv(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else marshal.loads(body)


def send(fd, obj):
    data = marshal.dumps(obj, 4)
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _limits(job, opts):
    """The job's rlimits; computed in the zygote, so the child only applies them."""
    cpu = int(job["timeout"]) + 1
    return [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (_vm_bytes() + job["memory_mb"] * 2**20,) * 2),  # over our use
        (resource.RLIMIT_FSIZE, (job.get("fsize_mb", 16) * 2**20,) * 2),
        (resource.RLIMIT_NOFILE, (job.get("nofile", 64),) * 2),
        (resource.RLIMIT_NPROC, (opts.get("nproc", 64),) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]


def _enter(limits, uid):
    """The child's seal, also run by the start-up probe: the job's memory cgroup (memcg.py),
    rlimits, uid, no capabilities (and the seccomp filter, where the zygote left it to each
    child: _seal)."""
    cg_join()  # while still root: every process of the job is charged there
    for which, lim in limits:
        resource.setrlimit(which, lim)
    drop_privileges(uid)
    # after setuid: a credential change clears the parent-death signal
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if JOB_FILTER:
        JOB_FILTER[0]()


def _child(job, opts, workdir, fds, limits, entry="run_job", req=None, seal_fd=None):
    """Runs in the forked child; never returns. Few page writes: raw os calls (see top).
    Sealed first; then ``seal_fd`` gets b"1" (or b"E<why>") and is closed, before any
    model code runs, so only the zygote can tell a failed seal from a model's exit.
    ``fds`` become fds 1, 2, ... (every other fd is closed before the harness runs);
    ``entry``: the harness function (``run_evaluator`` for the evaluator child)."""
    code = 70
    try:
        os.setsid()
        try:  # under host memory pressure the OOM killer takes a job, not the trainer
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        except OSError:
            pass
        _enter(limits, opts.get("uid"))
    except BaseException as e:  # our failure, not the model's: the zygote reports a fault
        if seal_fd is not None:
            os.write(seal_fd, f"E{type(e).__name__}: {e}".encode()[:4000])
        os._exit(code)
    if seal_fd is not None:
        os.write(seal_fd, b"1")
        os.close(seal_fd)
    try:
        for target, fd in enumerate([os.open("/dev/null", os.O_RDWR), *fds]):  # out, err, res
            os.dup2(fd, target)
        os.closerange(len(fds) + 1, 1 << 16)
        os.chdir(workdir)
        if entry == "cmd":  # an agent's command: exec it in its workspace (command.py)
            exec_command(req)
        HARNESS[entry](job["req"] if req is None else req, 3)
        code = 0
    except BaseException:
        pass
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code)


def _vm_bytes():
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        return int(os.read(fd, 256).split()[0]) * PAGE
    finally:
        os.close(fd)


def sweep(opts, workdir):
    """Remove what the job wrote: its work dir and (private scratch) every scratch entry.
    The job shaped those trees (any depth, any path length): trees.py removes them by dir
    fds, with no recursion and no shutil (whose bz2, lzma and zlib mappings each fork
    would copy)."""
    try:
        os.rmdir(workdir)  # the common case: the job wrote nothing
    except OSError:
        remove_tree(workdir)
    if opts.get("private_scratch"):
        for d in opts["scratch"]:
            for entry in os.listdir(d):
                path = os.path.join(d, entry)
                if path != opts["work_root"]:
                    remove_tree(path)


def run(job, opts, ctl=None):
    """Judge one job: fork the child, pump its pipes, kill and sweep. Returns a dict."""
    cmd = job.get("cmd")
    cg_limit(job)  # the job cgroup's limit: this job's budget
    if cmd is not None:
        refused = before_command(cmd, opts)  # its workspace bound and handed over
        if refused is not None:
            return refused
    workdir = opts["workdir"]  # same path every job (so is the env), fresh dir every job
    try:
        os.mkdir(workdir, 0o700)
    except FileExistsError:  # a sweep that failed half-way (reported as a fault then)
        remove_tree(workdir)
        os.mkdir(workdir, 0o700)
    if opts.get("uid") is not None and os.getuid() == 0:
        os.chown(workdir, opts["uid"], opts["uid"])
    pipes = {name: os.pipe() for name in ("out", "err", "res")}
    seal_r, seal_w = os.pipe()
    ooms, limits = _oom_base(opts), _limits(job, opts)
    start = time.monotonic()
    link = []
    if job.get("req", {}).get("serve"):
        link = start_evaluator(job, opts, workdir, pipes, limits, _child, recv)
    pid = os.fork()
    if pid == 0:
        fds = [pipes[n][1] for n in ("out", "err", "res")] + link  # never the verdict pipe
        if cmd is not None:
            _child(job, opts, workdir, fds, limits, "cmd", cmd, seal_fd=seal_w)
        _child(job, opts, workdir, fds, limits, seal_fd=seal_w)
    for w in [*link, *(w for _, w in pipes.values()), seal_w]:
        os.close(w)
    pidfd = os.pidfd_open(pid)
    caps = {"out": job["out_cap"], "err": job["out_cap"], "res": job["result_cap"],
            "ver": job["result_cap"]}
    try:
        bufs, over, exited, spent = pump(
            {n: r for n, (r, _) in pipes.items()}, pidfd, ctl, job, caps, start
        )
    finally:
        status, child_cpu = kill_everything(pid, opts)
        wall = time.monotonic() - start
        os.close(pidfd)
        for r, _ in pipes.values():
            os.close(r)
        ws_error = ""
        try:
            sweep(opts, workdir)
        finally:
            if cmd is not None:  # every process of the job is dead: take the workspace back
                ws_error = after_command(cmd, opts)
        sealed = _read_seal(seal_r)
        killed, at_limit = cg_ooms()
        if cmd is not None:  # its workspace files stay charged to this cgroup: a fresh one
            cg_renew()
    if sealed != b"1":  # the child died before model code ran: our fault, never a verdict
        return {"fault": "job child not sealed: " + (sealed[1:].decode("utf-8", "replace")
                                                     or "it exited before sealing")}
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    # killed in the job's own cgroup at its limit: the job's memory budget, a verdict
    budget_oom = killed and at_limit
    timed = "" if spent == "memory" else spent
    # another OOM kill (no budget spent, no cap hit): host memory pressure, a fault; in a
    # container of the job's own (oom_fault off) the job's memory_limit
    oom = not budget_oom and (killed or (sig == signal.SIGKILL and not (timed or over)))
    oom = oom and _oom_since(opts, ooms)
    if budget_oom:  # that kill is in the host's count too: the next job's base
        _oom_since(opts, ooms)
    host_fault = opts.get("oom_fault", True)
    return {
        "results": bufs["res"][: caps["res"]].decode("utf-8", "replace"),
        "verdicts": bufs.get("ver", b"")[: caps["ver"]].decode("utf-8", "replace"),
        "stdout": bufs["out"][: caps["out"]].decode("utf-8", "replace"),
        "stderr": bufs["err"][: caps["err"]].decode("utf-8", "replace"),
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None, "signal": sig,
        "timed_out": bool(timed) and not over, "deadline": timed, "over": over,
        "wall_ms": wall * 1000.0, "cpu_s": child_cpu,
        # RLIMIT_CPU's hard limit is a SIGKILL too: a CPU limit, not a crash
        "cpu_rlimit": sig == signal.SIGKILL and child_cpu >= int(job["timeout"]) + 1 - 0.05,
        "host_oom": oom and host_fault, "oom_killed": budget_oom or (oom and not host_fault),
        "ws_error": ws_error,
    }


def _oom_base(opts):
    """The host's OOM-kill count a SIGKILLed job's is compared with. Reading /proc/vmstat
    costs a noticeable share of a small job's zygote time, so where a host OOM kill is a
    fault (``oom_fault``: the job is re-run on a fresh zygote, never given a verdict) the
    count is re-read at most every OOM_REFRESH_S and after each SIGKILL: a kill elsewhere
    on the host that soon before the job at worst costs a re-run. Where it decides a
    verdict (a container's own memory_limit) it is read before every job."""
    now = time.monotonic()
    if not opts.get("oom_fault", True) or now - opts.get("oom_at", -OOM_REFRESH_S) >= OOM_REFRESH_S:
        opts["oom_seen"], opts["oom_at"] = oom_kills(), now
    return opts["oom_seen"]


def _oom_since(opts, before):
    """Whether the host's OOM killer killed a process since the count ``before``."""
    now = oom_kills()
    opts["oom_seen"], opts["oom_at"] = now, time.monotonic()
    return before >= 0 and now > before


def _read_seal(fd):
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""
    finally:
        os.close(fd)


HARNESS = {}
JOB_FILTER = []  # [install()] when each child installs seccomp itself (workspace binds)


def _seal(opts, info):
    """Build the private root (if asked), lock down, probe. False: refuse to run jobs."""
    seal = opts.get("seal", {})
    cg_open(opts, info)  # before the root: it has no /sys
    if seal.get("root"):
        try:
            info["root_built"] = build_private_root(
                seal.get("ro_binds", []),
                seal["host_ns"]["mnt"],
                seal.get("binds", []),
                seal.get("dirs", []),
            )
        except OSError as e:
            info["seal_error"] = f"cannot build the private root: {e}"
            return False
    if opts.get("private_scratch") and not (seal.get("root") or opts.get("container")):
        # sweeping "private" scratch dirs that are the host's would empty the host's /tmp
        info["seal_error"] = "private_scratch without a private root or a container"
        return False
    # binding a workspace per job needs mount in the zygote: then each child installs the
    # filter (built once here) before anything of the job runs (command.py)
    per_job = bool(seal.get("seccomp_per_job"))
    info["lock_down_failed"] = lock_down(seccomp=not per_job)
    if per_job:
        try:
            JOB_FILTER.append(prepared_filter(_libc))
        except OSError as e:
            info["lock_down_failed"]["seccomp"] = str(e)
    info["namespaces"] = namespaces(seal.get("host_ns", {}))
    with open("/proc/self/uid_map") as fh:
        info["uid_map"] = fh.read()
    os.makedirs(opts["work_root"], mode=0o711, exist_ok=True)
    opts["scratch"] = [d for d in SCRATCH if os.path.isdir(d) and os.access(d, os.W_OK)]
    opts["workdir"] = work = os.path.join(opts["work_root"], f"job-{os.getpid()}")
    os.environ.clear()  # the children's scrubbed environment, set once
    os.environ.update(PATH="/usr/bin:/bin", HOME=work, TMPDIR=work, LANG="C.UTF-8")
    limits = _limits({"timeout": 5, "memory_mb": 256}, opts)
    info["probe"] = run_probe(
        lambda: _enter(limits, opts.get("uid")), seal.get("expect_absent", []), limits
    )
    return True


def _shrink():
    """Return the start-up's garbage (compiling this program and the harness, the probe) to
    the kernel: every page we still map is copied into each job's page table by fork and
    torn down at its exit, so fewer pages make every job cheaper."""
    gc.collect()
    trim = getattr(_libc, "malloc_trim", None)  # glibc's; absent elsewhere
    if trim is not None:
        trim(0)


def main():
    opts = json.loads(sys.argv[1])
    exec(compile(opts.pop("harness"), "<harness>", "exec"), HARNESS)
    rfd, wfd = os.dup(0), os.dup(1)
    opts["ctl_fd"] = rfd  # an evaluator child reads its own frame from it
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    for name in opts.get("preload", []):
        try:
            __import__(name)
        except ImportError:
            pass
    if os.getpid() != 1:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # No PDEATHSIG: it fires when the parent *thread* that spawned us exits, killing a healthy
    # zygote. Parent death is EOF/HUP on our control pipe (recv, pump) instead.
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # a same-uid child can't ptrace or open /proc/<us>
    # python: the interpreter's major.minor, which an environment's spec must name
    info = {"ready": True, "pid1": os.getpid() == 1, "uid": os.getuid(),
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    if not _seal(opts, info):
        send(wfd, info)
        return
    send(wfd, info)
    _shrink()
    while True:
        job = recv(rfd)
        if job is None:  # the parent closed our pipe: every job is killed and reaped and
            cg_close()  # nothing is buffered (our job cgroup goes too), so skip the
            os._exit(0)  # interpreter's teardown
        try:
            send(wfd, run(job, opts, rfd if opts.get("watch_parent", True) else None))
        except ParentGone:
            cg_close()
            return
        except OSError as e:
            send(
                wfd,
                {"fault": f"{type(e).__name__}: {e} (errno {errno.errorcode.get(e.errno, '?')})"},
            )
            if job.get("once"):
                return


if __name__ == "__main__":
    main()
