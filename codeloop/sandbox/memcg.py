"""A job's memory cgroup (stdlib only, zygote source): every process of a job is charged to
one memory cgroup whose limit is the job's budget.

The host (codeloop.sandbox.cgroups) makes one dir per executor in a memory hierarchy it can
write and names it in the zygote's options (``cgroup``: ``dir``, ``kind`` v2 or v1, ``name``,
or ``problem`` when there is none). The zygote opens that dir before it pivots away from
/sys (an O_PATH fd: its private root has no /sys) and makes its own job cgroup below it.
Per job it sets the limit (v2 ``memory.max``, swap 0; v1 ``memory.limit_in_bytes`` and,
where the kernel has it, ``memory.memsw.limit_in_bytes`` to the same) and each child joins
it first thing in ``_enter`` (writes 0, "this process", to its ``cgroup.procs``), before it
drops root, so everything the job forks is charged there and none of it can leave. The
zygote itself stays outside. The limit is the job's ``memory_mb`` over what a child may copy
of the zygote (its resident pages when the cgroup was set up), as RLIMIT_AS is over the
zygote's address space.

The kernel's OOM killer kills in the cgroup when it is full (v2 with ``memory.oom.group``:
every process of it); the budget's sampler (budget.py) ends what is left of such a job. After
the job the cgroup's counters tell a job killed for its own budget (an OOM kill in it and
the limit reached: v2 ``memory.events`` oom_kill and oom; v1 ``memory.oom_control`` oom_kill
and ``memory.max_usage_in_bytes``, reset per job; v1's failcnt is not kept by every kernel)
from one whose process the host's OOM killer took.

In a container (``cgroup``: ``watch``) the zygote makes no cgroup: the container's own is
the job's (one job at a time), so it only reads that one's OOM-kill count (v2
/sys/fs/cgroup/memory.events, v1 /sys/fs/cgroup/memory/memory.oom_control), and any OOM
kill in it during a job is that job's memory_limit, as for the container's first child.

Files a command leaves in its workspace stay charged to the cgroup that wrote them (tmpfs
pages), so after a command job the zygote retires its cgroup (rmdir: the kernel keeps that
charge in the parent's count until the files go) and makes a fresh one: no later job pays
for an earlier one's files. A judged function has nothing that outlives it (its /tmp and
/dev/shm are swept), so those jobs share the cgroup (the per-job cost is the child's one
write to join it).
"""

import os

JOB_CG = {}  # the zygote's job cgroup: fds, kind, the limit set, the counters last read
# a container's own memory cgroup, as Docker mounts it: (kind, dir, the file of its OOM kills)
WATCHED = (
    ("v2", "/sys/fs/cgroup", "memory.events"),
    ("v1", "/sys/fs/cgroup/memory", "memory.oom_control"),
)


def cg_open(opts, info):
    """In the zygote before the private root: make the job cgroup the options name.
    ``info["job_cgroup"]``: its kind and path below the hierarchy, or why there is none."""
    spec = opts.get("cgroup")
    if not spec:
        return
    if spec.get("problem"):
        info["job_cgroup"] = {"error": spec["problem"]}
        return
    if spec.get("watch"):
        _cg_watch(info)
        return
    try:
        JOB_CG.update(kind=spec["kind"], name=spec["name"], rel=spec["rel"], gen=0)
        JOB_CG["base"] = _resident()
        JOB_CG["dir"] = os.open(spec["dir"], os.O_PATH | os.O_DIRECTORY)
        _cg_new()
    except OSError as e:
        cg_close()
        info["job_cgroup"] = {"error": f"cannot make the job's memory cgroup: {e}"}
        return
    info["job_cgroup"] = {"kind": JOB_CG["kind"], "path": f"{JOB_CG['rel']}/{JOB_CG['leaf']}"}


def _cg_watch(info):
    """Read the OOM kills of the cgroup we are in (a container's) instead of making one."""
    for kind, where, name in WATCHED:
        if os.path.exists(os.path.join(where, name)):
            try:
                JOB_CG.update(kind=kind, watch=True)
                JOB_CG["leaf_fd"] = os.open(where, os.O_PATH | os.O_DIRECTORY)
                JOB_CG["counts"] = _cg_counts()
            except OSError as e:
                cg_close()
                info["job_cgroup"] = {"error": f"cannot read the container's cgroup: {e}"}
                return
            info["job_cgroup"] = {"watch": kind}
            return
    info["job_cgroup"] = {"error": "no memory cgroup of the container to read"}


def _resident():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cg_new():
    """A fresh job cgroup below the executor's dir (no limit yet: cg_limit sets it)."""
    JOB_CG["gen"] += 1
    leaf = f"{JOB_CG['name']}-{JOB_CG['gen']}"
    os.mkdir(leaf, 0o755, dir_fd=JOB_CG["dir"])
    JOB_CG["leaf"] = leaf
    JOB_CG["leaf_fd"] = os.open(leaf, os.O_PATH | os.O_DIRECTORY, dir_fd=JOB_CG["dir"])
    JOB_CG["procs"] = os.open("cgroup.procs", os.O_WRONLY, dir_fd=JOB_CG["leaf_fd"])
    JOB_CG["limit"] = None
    if JOB_CG["kind"] == "v2":
        JOB_CG["files"] = ["memory.max"]
        for name, value in (("memory.oom.group", "1"), ("memory.swap.max", "0")):
            try:  # (absent: a kernel without swap accounting, or before oom.group)
                _cg_write(name, value)
            except FileNotFoundError:
                pass
    else:
        memsw = "memory.memsw.limit_in_bytes"
        JOB_CG["files"] = ["memory.limit_in_bytes", *([memsw] if _cg_has(memsw) else [])]
    JOB_CG["counts"] = _cg_counts()


def _cg_has(name):
    try:
        os.close(os.open(name, os.O_RDONLY, dir_fd=JOB_CG["leaf_fd"]))
    except FileNotFoundError:
        return False
    return True


def _cg_fd(name, flags):
    """The job cgroup's file ``name``, opened once (each job reads its counters)."""
    fds = JOB_CG.setdefault("fds", {})
    if (name, flags) not in fds:
        fds[(name, flags)] = os.open(name, flags, dir_fd=JOB_CG["leaf_fd"])
    return fds[(name, flags)]


def _cg_write(name, value):
    os.write(_cg_fd(name, os.O_WRONLY), value.encode())


def _cg_read(name):
    return os.pread(_cg_fd(name, os.O_RDONLY), 4096, 0).decode()


def _cg_set(limit):
    # v1: memsw may never be below the memory limit: lower the memory limit first, raise it last
    files = JOB_CG["files"]
    if JOB_CG["limit"] is not None and limit > JOB_CG["limit"]:
        files = files[::-1]
    for name in files:
        _cg_write(name, str(limit))
    JOB_CG["limit"] = limit


def cg_limit(job):
    """Before the fork: the job cgroup's limit is this job's budget (written when it changes)."""
    if not JOB_CG or JOB_CG.get("watch"):
        return
    limit = job["memory_mb"] * 2**20 + JOB_CG["base"]
    if limit == JOB_CG["limit"]:
        return
    try:
        _cg_set(limit)
    except OSError:  # (v1: EBUSY when what is charged exceeds it) a fresh one holds nothing
        cg_renew()
        _cg_set(limit)


def cg_join():
    """In the child, still root: move into the job cgroup (everything it forks follows)."""
    if JOB_CG and not JOB_CG.get("watch"):
        os.write(JOB_CG["procs"], b"0")


def _cg_counts():
    """(OOM kills in the cgroup, v2: times it was full with no memory to reclaim; v1: 0)."""
    if JOB_CG["kind"] == "v2":
        kv = dict(line.split() for line in _cg_read("memory.events").splitlines())
        return int(kv.get("oom_kill", 0)), int(kv.get("oom", 0))
    kv = dict(line.split() for line in _cg_read("memory.oom_control").splitlines())
    return int(kv.get("oom_kill", 0)), 0


def cg_killed():
    """While the job runs: whether the OOM killer has killed one of its processes."""
    if not JOB_CG:
        return False
    try:
        return _cg_counts()[0] > JOB_CG["counts"][0]
    except (OSError, ValueError):
        return False


def cg_ooms():
    """After the job: (an OOM kill in its cgroup, the cgroup hit its limit) since the last
    job. Both: the job was killed for its own budget."""
    if not JOB_CG:
        return False, False
    before = JOB_CG["counts"]
    JOB_CG["counts"] = now = _cg_counts()
    if JOB_CG.get("watch"):  # the container is the job's: its limit is the job's bound
        return now[0] > before[0], now[0] > before[0]
    if JOB_CG["kind"] == "v2":
        return now[0] > before[0], now[1] > before[1]
    peak = int(_cg_read("memory.max_usage_in_bytes"))
    _cg_write("memory.max_usage_in_bytes", "0")  # (v1: back to the usage now, for the next job)
    # (a failed charge stops short of the limit by at most the kernel's charge batch)
    full = JOB_CG["limit"] is not None and peak + 2**20 >= JOB_CG["limit"]
    return now[0] > before[0], full


def cg_renew():
    """Retire the job cgroup (every process of it is dead) and make a fresh one."""
    if not JOB_CG or JOB_CG.get("watch"):
        return
    old = JOB_CG["leaf"]
    for fd in [*JOB_CG.pop("fds", {}).values(), JOB_CG.pop("procs"), JOB_CG.pop("leaf_fd")]:
        os.close(fd)
    try:
        os.rmdir(old, dir_fd=JOB_CG["dir"])
    except OSError:  # left for the host, which removes the executor's whole dir at close
        pass
    _cg_new()


def cg_close():
    """Close the fds and remove the job cgroup (at the zygote's exit, or a failed setup)."""
    for fd in JOB_CG.pop("fds", {}).values():
        os.close(fd)
    for key in ("procs", "leaf_fd"):
        if key in JOB_CG:
            os.close(JOB_CG.pop(key))
    if "leaf" in JOB_CG:
        try:
            os.rmdir(JOB_CG["leaf"], dir_fd=JOB_CG["dir"])
        except OSError:
            pass
    if "dir" in JOB_CG:
        os.close(JOB_CG["dir"])
    JOB_CG.clear()
