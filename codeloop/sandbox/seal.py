"""The seal (stdlib only, zygote source): a private root, no privileges, and the probe.

``build_private_root`` runs once per zygote, inside its fresh mount namespace (root, or
root of a user namespace): a tmpfs becomes the new root, holding read-only binds of only
the directories the interpreter uses (its binary's dir, its stdlib, every dir a loaded
shared object came from, /usr/lib64 for the ELF loader), the task environment dirs the
config names (``ro_binds``), the device nodes null/zero/urandom/random, a private /proc of
the zygote's PID namespace and fresh tmpfs /tmp (the work dirs) and /dev/shm. Then
pivot_root, the old root is detached, and the root tmpfs is remounted read-only. Nothing
else of the host exists there: no /etc, /home, /root, /work, /srv, /opt, /var, no repo.

``lock_down`` (once, in the zygote, after the root): empty capability bounding set,
securebits that give uid 0 no capabilities on exec, no_new_privs, the seccomp filter
(seccomp.py). Forked children inherit all of it. ``drop_privileges`` (per job, in the
child): the leased uid when we are root, then every capability set cleared.

``probe`` runs a throw-away child through the same per-job path and reports what it
really holds (read from /proc/self/status and by trying forbidden calls): this is the
record ``executor.isolation`` is built from, not what we meant to set.
"""

import ctypes
import json
import os
import resource
import socket
import sys

try:  # for linters and tests; as the zygote, seccomp.py's source runs just before this one
    from codeloop.sandbox.seccomp import install_filter
except ImportError:
    pass

sys_libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_NOATIME, MS_NODIRATIME, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 16384, 1 << 18, 1 << 21
MS_SLAVE = 1 << 19
MNT_DETACH = 2
# statvfs flags a bind remount must keep (a user namespace may not clear locked ones)
_KEEP = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
         (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
         (os.ST_RELATIME, MS_RELATIME))
DEVICES = ("null", "zero", "urandom", "random")
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_NEVER_BIND = ("/dev", "/proc", "/sys", "/tmp", "/var/tmp", "/run")
NEW_ROOT = "/tmp"  # staging mount point inside our own mount namespace (the host's is hidden)
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 28, 47, 4
PR_SET_NO_NEW_PRIVS, PTRACE_TRACEME, CLONE_NEWUSER = 38, 0, 0x10000000
# SECBIT_NOROOT | its lock | SECBIT_KEEP_CAPS_LOCKED | NO_CAP_AMBIENT_RAISE | its lock
SECUREBITS = 0x01 | 0x02 | 0x20 | 0x40 | 0x80
CAP_SETPCAP = 8


def _prctl(option, a2=0, a3=0, a4=0, a5=0):
    args = [ctypes.c_ulong(x) for x in (a2, a3, a4, a5)]
    if sys_libc.prctl(ctypes.c_int(option), *args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def mount(src, target, fstype, flags, data=None):
    args = [x.encode() if x is not None else None for x in (src, target, fstype, data)]
    if sys_libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags), args[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src or ''} on {target}: {os.strerror(err)}")


def runtime_dirs():
    """Host dirs the running interpreter needs: its binary, stdlib, loaded libraries."""
    dirs = {os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.__file__)}
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/") and " (deleted)" not in parts[5]:
                dirs.add(os.path.dirname(parts[5].strip()))
    for loader_dir in ("/lib64", "/usr/lib64"):  # the ELF interpreter, for exec'd children
        if os.path.isdir(loader_dir):
            dirs.add(os.path.realpath(loader_dir))
    # never "/" itself, pseudo filesystems or scratch dirs (a mapped /dev/shm file, say)
    return sorted(d for d in dirs if os.path.isdir(d) and not _unbindable(d))


def _unbindable(d):
    return d == "/" or any(d == p or d.startswith(p + "/") for p in _NEVER_BIND)


def _bind(src, dst, read_only=True, receive=False):
    """Bind ``src`` at ``dst``; ``receive``: with the mounts below it (a zygote started late
    finds workspaces mounted already), and a slave of the host's mount, so the mounts the
    host makes below it later appear here too (nothing made here goes back); otherwise only
    ``src``'s own mount, private: the host's later mounts never change what the sandbox sees."""
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND | (MS_REC if receive else 0))
    if not receive:
        mount(None, dst, None, MS_PRIVATE)
    if read_only:
        kept = MS_NOSUID | MS_NODEV
        flags = os.statvfs(src).f_flag
        for bit, ms in _KEEP:
            kept |= ms if flags & bit else 0
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def build_private_root(ro_binds, host_mnt_ns, binds=(), dirs=()):
    """Pivot into a fresh tmpfs root holding only the runtime, ``ro_binds`` and scratch.
    ``host_mnt_ns``: the parent's mount namespace inode; we refuse to touch it.
    ``binds``: ``[host_dir, path_inside, writable]`` mounted at a fixed path of our choosing
    (agent workspaces, test environments at /envs), so no host path name shows; a writable
    one (a workspace root) receives the host's later mounts below it (a workspace's own
    tmpfs, made after we start) as a slave, every other mount here is private.
    ``dirs``: ``[path, mode]`` made on the root before it turns read-only; what is bound
    below a mode-000 one is reachable by the zygote only (no job holds a capability to pass
    it, and the read-only root refuses a chmod)."""
    if os.stat("/proc/self/ns/mnt").st_ino == host_mnt_ns:
        raise OSError(1, "not in a private mount namespace: refusing to build a root here")
    # slaves, not private: the workspace root's bind below must stay linked to the host's
    # (shared) mount; each other mount of the new root is made private as it is bound
    mount(None, "/", None, MS_REC | MS_SLAVE)
    # opened before the staging tmpfs hides the host's /tmp (a workspace root may be there)
    held = [(os.open(src, os.O_PATH | os.O_DIRECTORY), dst, rw) for src, dst, rw in binds]
    mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    new = NEW_ROOT
    for d in runtime_dirs() + [os.path.realpath(p) for p in ro_binds]:
        _bind(d, new + d)
    for fd, dst, writable in held:
        _bind(f"/proc/self/fd/{fd}", new + dst, read_only=not writable, receive=writable)
        os.close(fd)
    for d, mode in dirs:
        os.makedirs(new + d, exist_ok=True)
        os.chmod(new + d, mode)
    for name in ("bin", "lib", "lib64"):  # merged-usr symlinks, where the host has them
        if os.path.islink("/" + name) and not os.path.lexists(new + "/" + name):
            os.symlink(os.readlink("/" + name), new + "/" + name)
    for dev in DEVICES:
        _bind("/dev/" + dev, new + "/dev/" + dev, read_only=False)
    for path, size in (("/tmp", "256m"), ("/dev/shm", "64m")):
        os.makedirs(new + path, exist_ok=True)
        mount("tmpfs", new + path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    os.makedirs(new + "/proc")
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(new)
    if sys_libc.syscall(ctypes.c_long(_PIVOT_ROOT[os.uname().machine]), b".", b".") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    if sys_libc.umount2(b".", MNT_DETACH) != 0:  # the old root, stacked on the same point
        err = ctypes.get_errno()
        raise OSError(err, f"detaching the old root: {os.strerror(err)}")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return sorted(os.listdir("/"))


def _status():
    with open("/proc/self/status") as fh:
        return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)


def lock_down(seccomp=True):
    """Once in the zygote: empty bounding set, no root-on-exec, no_new_privs, seccomp
    (``seccomp=False``: each child installs it instead, so the zygote can still bind a
    workspace per job; see command.py). Returns the steps that failed (name -> reason)."""
    failed = {}
    bounding = int(_status().get("CapBnd", "0"), 16)
    try:
        for cap in range(64):
            if bounding >> cap & 1:
                _prctl(PR_CAPBSET_DROP, cap)
    except OSError as e:
        failed["bounding_set"] = str(e)
    if int(_status().get("CapEff", "0"), 16) >> CAP_SETPCAP & 1:
        try:
            _prctl(PR_SET_SECUREBITS, SECUREBITS)
        except OSError as e:
            failed["securebits"] = str(e)
    try:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
    except OSError as e:
        failed["no_new_privs"] = str(e)
    if seccomp:
        try:
            install_filter(sys_libc)
        except OSError as e:
            failed["seccomp"] = str(e)
    return failed


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


# built once in the zygote, so the per-job child allocates nothing (page writes: zygote.py)
_CAP_HEADER = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
_CAP_HEADER_REF, _CAP_NONE = ctypes.byref(_CAP_HEADER), (_CapData * 2)()
_AMBIENT_CLEAR = [ctypes.c_int(PR_CAP_AMBIENT)]
_AMBIENT_CLEAR += [ctypes.c_ulong(x) for x in (PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)]
# looked up here, not on first use: CDLL resolves (dlsym, a new function object) and caches
# a name when first asked, which in every forked child cost page copies per job
_CAPSET = sys_libc.capset


def drop_privileges(uid):
    """Per job, in the child: become ``uid`` (when given and we are root), then clear every
    capability set, so uid 0 of a user namespace holds nothing either."""
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if _CAPSET(_CAP_HEADER_REF, _CAP_NONE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    sys_libc.prctl(*_AMBIENT_CLEAR)  # (kernels before 4.3 have no ambient set: EINVAL)


def _refused(call):
    """True when ``call()`` fails with EPERM (the seccomp answer)."""
    return call() != 0 and ctypes.get_errno() == 1


def probe_child(expect_absent, limits):
    """In a child after the per-job setup: what it really holds, as a dict."""
    st = _status()
    caps = {k: int(st.get(k, "0"), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd")}
    caps["CapAmb"] = int(st.get("CapAmb", "0"), 16)
    got_limits = all(tuple(resource.getrlimit(w)) == tuple(v) for w, v in limits)
    try:
        with open("/.codeloop-probe", "w"):
            root_writable = True
        os.unlink("/.codeloop-probe")
    except OSError:
        root_writable = False
    return {
        "uid": os.getuid(),
        "caps": caps,
        "no_new_privs": st.get("NoNewPrivs", "0").strip() == "1",
        "seccomp_mode": int(st.get("Seccomp", "0").strip()),
        "umount_refused": _refused(lambda: sys_libc.umount2(b"/.codeloop-none", 0)),
        "unshare_refused": _refused(lambda: sys_libc.unshare(CLONE_NEWUSER)),
        "ptrace_refused": _refused(lambda: sys_libc.ptrace(PTRACE_TRACEME, 0, None, None)),
        "rlimits": got_limits,
        "root_entries": sorted(os.listdir("/")),
        "root_writable": root_writable,
        "host_paths_visible": [p for p in expect_absent if os.path.lexists(p)],
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "cgroup": _read("/proc/self/cgroup"),
    }


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def namespaces(host_ns):
    """Which of our namespaces differ from the parent's (``host_ns``: name -> inode)."""
    out = {}
    for name, ino in host_ns.items():
        try:
            out[name] = os.stat(f"/proc/self/ns/{name}").st_ino != ino
        except OSError:
            out[name] = False
    return out


def run_probe(child_setup, expect_absent, limits):
    """Fork a child through ``child_setup`` (the per-job path), return its probe_child."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            child_setup()
            os.write(w, json.dumps(probe_child(expect_absent, limits)).encode())
        except BaseException as e:  # noqa: BLE001 - reported, never raised in a fork
            os.write(w, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data or b'{"error": "probe child wrote nothing"}')
