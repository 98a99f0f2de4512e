"""The variant runner (stdlib + pytest only; runs inside the sandbox, from the judge's env dir).

Run as ``python3 -I -B variant_boot.py SPEC`` in a copy of the judged tree that holds no
test module (codeloop.agent.variants writes it). Before any code of the tree runs it reads
the spec and unlinks it, opens the variants file and unlinks that, takes the result fd,
imports pytest and the env dirs' plugins, snapshots the tree's conftests and helpers and
turns the plugin autoload off. Then, one variant at a time, in shuffled order: it reads
the variant's header (its id, test and file), forks, and the child reads that variant's
module (never another's: the runner itself never reads a module's text), closes the
variants file and the result fd, and runs the one test with pytest, its module served
from those bytes; it writes the test's outcome to a pipe of its own and exits. The runner
waits (``timeout`` seconds at most), then writes one ``var`` record under the run's nonce.

Nothing a variant learns reaches another: the runner is not dumpable (no process of the
job can read its memory or open its files through /proc, the variants file included,
whatever it executes), it is the subreaper of everything a child starts (all killed when
the child is done), and between two children the tree, the workspace beside it and the
job's home and scratch dirs are put back as they were (``Slate``). An audit hook
(``KillHook``), set before any code of the tree runs, ends a child whose patch code takes
frames or code objects, walks the gc, traces, builds code under another file's name or
uses ctypes. Once the test's module is imported its source is no longer served (the file
on disk is an empty stand-in). A child's outcome is its own word: what it cannot do is
know which variant it is (codeloop.agent.variants).
"""

import json
import os
import select
import signal
import sys
import time

KILLED = 86  # a child's exit status when the audit hook ended it
RUNNER = os.path.abspath(__file__)
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
OUTCOMES = ("passed", "failed", "error", "skipped", "missing", "timeout")


def _pread_all(fd, size, at):
    out = b""
    while len(out) < size:
        chunk = os.pread(fd, size - len(out), at + len(out))
        if not chunk:
            break
        out += chunk
    return out


FRAME_ATTRS = frozenset({"f_code", "tb_frame", "gi_frame", "cr_frame", "ag_frame", "__code__"})
PATCH_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys.settrace",
                          "sys.setprofile", "code.__new__", "gc.get_objects",
                          "gc.get_referrers", "gc.get_referents", "sys.addaudithook"})


class KillHook:
    """An audit hook that ends the process (exit status KILLED) when:

    - anyone opens another process's /proc entries (the runner's open variants file is
      there) or signals another process;
    - the patch's code (a file it changed, a file the run made, code compiled from a
      string) takes a frame or a code object (a test's expected values sit in its
      constants), walks the garbage collector's objects, traces or profiles, builds or
      compiles code under another file's name, uses ctypes or adds an audit hook.
    """

    def __init__(self, boot, root, changed, trusted):
        self.root = os.path.realpath(root) + "/"
        self.changed = frozenset(os.path.join(os.path.realpath(root), r) for r in changed)
        self.present = frozenset(boot.walk_files(os.path.realpath(root)))
        self.trusted = tuple(os.path.realpath(d) + "/" for d in trusted)
        self.getframe, self.realpath, self.busy = sys._getframe, os.path.realpath, [False]

    def untrusted(self, code):
        """By origin: the standard library, pytest, the env dirs and the tree's files the
        patch left alone are trusted; anything else (changed files, files the run made
        anywhere, code compiled from a string) is the patch's."""
        name = code.co_filename
        if name.startswith("<"):
            return not name.startswith("<frozen")
        if name.startswith(self.trusted):
            return False
        return not (name.startswith(self.root) and name in self.present
                    and name not in self.changed)

    def __call__(self, event, args):
        if self.busy[0]:
            return
        self.busy[0] = True
        try:
            if self.fatal(event, args):
                os._exit(KILLED)
        finally:
            self.busy[0] = False

    def fatal(self, event, args):
        if self.getframe(2).f_code.co_filename == RUNNER:
            return False  # the runner's own bookkeeping (its /proc scan, its kills)
        if event == "open":
            return _other_proc(args[0], self.realpath)
        if event in ("os.kill", "os.killpg"):
            return args[0] != os.getpid()
        if event == "object.__getattr__":
            return args[1] in FRAME_ATTRS and self.untrusted(self.getframe(2).f_code)
        if event == "compile":
            name = args[1] if len(args) > 1 else ""
            spoof = isinstance(name, str | bytes) and not os.fsdecode(name).startswith("<")
            return spoof and self.untrusted(self.getframe(2).f_code)
        if event in PATCH_EVENTS or event.startswith("ctypes."):
            return self.untrusted(self.getframe(2).f_code)
        return False


def _other_proc(path, realpath):
    if isinstance(path, bytes):
        path = path.decode("utf-8", "replace")
    if not isinstance(path, str) or "proc" not in path:
        return False
    parts = realpath(path).split("/")
    return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and (
        int(parts[2]) != os.getpid())


def seal_runner():
    """No process may read the runner's memory or open files through /proc (it is not
    dumpable: its /proc entries are root's), and every process a child leaves behind is
    reparented to it (a subreaper), so none outlives its variant."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for option in (PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER):
        if libc.prctl(option, 1 if option == PR_SET_CHILD_SUBREAPER else 0, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({option}) refused: {os.strerror(err)}")


def end_strays():
    """Kill and reap every process reparented to the runner (what a child left running)."""
    me = str(os.getpid())
    while True:
        strays = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[1].decode() == me:
                strays.append(int(name))
        if not strays:
            return
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass


class Slate:
    """What a child may write and the next one could read, put back as it was before the
    first: the tree (from its bytes read at the start), the workspace beside it, the
    job's home and scratch dirs (/tmp, /var/tmp, /dev/shm, /run/lock: the sandbox's, this
    job's alone, emptied). No variant leaves notes for the next."""

    def __init__(self, trees, root):
        self.trees, self.root = trees, os.path.realpath(root)
        self.entries = []  # (relpath, kind, data, mode), a dir before what it holds
        todo = [""]
        while todo:
            rel = todo.pop()
            with os.scandir(os.path.join(self.root, rel) if rel else self.root) as it:
                for e in sorted(it, key=lambda e: e.name):
                    sub = f"{rel}/{e.name}" if rel else e.name
                    st = e.stat(follow_symlinks=False)
                    if e.is_symlink():
                        self.entries.append((sub, "link", os.readlink(e.path), 0))
                    elif e.is_dir(follow_symlinks=False):
                        self.entries.append((sub, "dir", None, st.st_mode & 0o7777))
                        todo.append(sub)
                    elif e.is_file(follow_symlinks=False):
                        with open(e.path, "rb") as fh:
                            self.entries.append((sub, "file", fh.read(), st.st_mode & 0o7777))

    def restore(self):
        home = os.path.realpath(os.environ.get("HOME") or "/nonexistent")
        for place in (os.path.dirname(self.root), home, "/tmp", "/var/tmp", "/dev/shm",
                      "/run/lock"):
            self._empty(place, keep=(self.root, home))
        self.trees.empty_tree(self.root)
        for rel, kind, data, mode in sorted(self.entries, key=lambda x: x[0].count("/")):
            path = os.path.join(self.root, rel)
            if kind == "dir":
                os.makedirs(path, exist_ok=True)
                os.chmod(path, mode)
            elif kind == "link":
                os.symlink(data, path)
        for rel, kind, data, mode in self.entries:
            if kind == "file":
                fd = os.open(os.path.join(self.root, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                             | os.O_NOFOLLOW, mode)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)

    def _empty(self, place, keep):
        """Remove what ``place`` holds but the dirs on the way to ``keep`` (the tree, the
        job's own home: the sandbox's per-job scratch dirs hold nothing else of ours)."""
        try:
            names = os.listdir(place)
        except OSError:
            return
        for name in names:
            path = os.path.join(place, name)
            if any(k == path or k.startswith(path + "/") for k in keep):
                continue
            try:
                self.trees.remove_tree(path)
            except OSError:
                pass


class Outcome:
    """The one test's phases, as pytest reports them."""

    def __init__(self, node, pinned, path, sub_type):
        self.node, self.phases, self.pinned, self.path = node, {}, pinned, path
        self.sub_type, self.sub_failed = sub_type, False

    def pytest_collection_finish(self, session):
        self.pinned.pop(self.path, None)  # imported: its source is served no more

    def pytest_runtest_logreport(self, report):
        if self.sub_type is not None and isinstance(report, self.sub_type):
            self.sub_failed = self.sub_failed or report.failed  # a subtest's fails the test
            return
        self.phases.setdefault(report.when, report)

    def verdict(self):
        setup, call, down = (self.phases.get(w) for w in ("setup", "call", "teardown"))
        if setup is None:
            return "missing"
        if not setup.passed:
            return "skipped" if setup.skipped else "error"
        if call is None or down is None:
            return "missing"
        if getattr(call, "wasxfail", None) is not None:
            return "failed"
        if not call.passed or self.sub_failed:
            return "skipped" if call.skipped else "failed"
        return "passed" if down.passed else "error"


def child(boot, header, vfd, at, snap, plugins, args, out_fd):
    """Run one variant's test (in the forked child); its outcome to ``out_fd``."""
    import pytest

    text = _pread_all(vfd, header["len"], at)
    os.close(vfd)
    pinned = dict(snap)
    pinned[os.path.abspath(header["rel"])] = text
    del text
    boot.pin_tests(pinned, os.getcwd())
    seen = Outcome(header["node"], pinned, os.path.abspath(header["rel"]),
                   boot.subtest_report_type())
    pytest.main([*args, "--", header["node"]], plugins=[seen, *plugins])
    os.write(out_fd, seen.verdict().encode())


def wait_outcome(r, pid, timeout):
    """The child's outcome (``timeout`` seconds at most), its process reaped."""
    got, end = b"", time.monotonic() + timeout
    while len(got) <= 16:
        left = end - time.monotonic()
        ready = select.select([r], [], [], left)[0] if left > 0 else []
        if not ready:
            os.kill(pid, signal.SIGKILL)
            got = b"timeout"
            break
        chunk = os.read(r, 64)
        if not chunk:
            break
        got += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == KILLED:
        return "killed"
    text = got.decode("ascii", "replace")
    return text if text in OUTCOMES else "failed"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import codeloop_judge_boot as boot  # its spec reading, pinning and plugin loading
    import codeloop_trees as trees  # walking and emptying a tree by dir fds

    sys.path.remove(here)
    spec, fd = boot.take_spec(sys.argv[1])
    vfd = os.open(spec["variants"], os.O_RDONLY)
    os.unlink(spec["variants"])  # from here on only this fd reaches the variants
    seal_runner()
    slate = Slate(trees, os.getcwd())
    import importlib

    import pytest  # loaded before the tree is on sys.path

    for name in boot.EAGER:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    snap = boot.snapshot_tests(os.getcwd())
    plugins = boot.env_plugins()
    tree = boot.tree_paths(spec["paths"])
    stdlib = os.path.dirname(os.__file__)
    pytest_dir = os.path.dirname(os.path.dirname(pytest.__file__))
    sys.addaudithook(KillHook(boot, os.getcwd(), spec.get("changed", []),
                              [stdlib, pytest_dir, here, *spec["paths"]]))
    sys.path.insert(0, os.getcwd())
    sys.path[1:1] = [os.path.join(os.getcwd(), rel) for rel in tree]
    encode, nonce, seq, pid = boot._encode, spec["nonce"], 0, os.getpid()

    def emit(kind, **fields):
        nonlocal seq
        data = encode({"n": nonce, "seq": seq, "pid": pid, "k": kind, **fields}).encode() + b"\n"
        seq += 1
        while data:
            data = data[os.write(fd, data) :]

    emit("start")
    at = 0
    for _ in range(int(spec["count"])):
        size = int.from_bytes(_pread_all(vfd, 4, at), "big")
        header = json.loads(_pread_all(vfd, size, at + 4))
        body_at, at = at + 4 + size, at + 4 + size + int(header["len"])
        r, w = os.pipe()
        child_pid = os.fork()
        if child_pid == 0:
            try:
                os.close(r)
                os.close(fd)
                child(boot, header, vfd, body_at, snap, plugins, spec["args"], w)
            finally:
                os._exit(0)
        os.close(w)
        outcome = wait_outcome(r, child_pid, float(spec["timeout"]))
        end_strays()
        slate.restore()
        emit("var", id=header["id"], outcome=outcome)
    emit("finish", records=seq)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
