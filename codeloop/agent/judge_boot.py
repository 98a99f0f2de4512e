"""The judge's pytest entry (stdlib + pytest only; runs inside the sandbox, from an env dir).

Run as ``python3 -I -B judge_boot.py SPEC`` in the judged tree. Before any code of the
tree runs it reads the run's spec (nonce, env dirs, pytest args, node ids) and unlinks it,
takes the result fd (``CODELOOP_RESULT_FD``) to a fresh descriptor, records the identity of
the pytest machinery that decides an outcome, and only then starts pytest with our plugin
object. Every line it writes there is one JSON record carrying the nonce, a sequence
number and the pid that started: ``start``, ``collected`` (the node ids pytest selected),
``collect_error``, one ``rep`` per test phase, ``tamper`` when the machinery changed under
it, and ``finish`` (pytest's exit status and how many records came before). The host side
(codeloop.agent.channel) trusts nothing here that it cannot count; see judge.py for what an
in-process attacker can still do.
"""

import importlib
import json
import os
import pathlib
import site
import sys

# What decides an outcome; a product module that swaps one of these is tampering.
WATCHED = (
    ("_pytest.runner", "runtestprotocol"),
    ("_pytest.runner", "call_and_report"),
    ("_pytest.runner", "call_runtest_hook"),
    ("_pytest.runner", "pytest_runtest_makereport"),
    ("_pytest.runner", "CallInfo.from_call"),
    ("_pytest.runner", "SetupState.setup"),
    ("_pytest.reports", "TestReport.from_item_and_call"),
    ("_pytest.reports", "TestReport.__init__"),
    ("_pytest.reports", "BaseReport.passed"),
    ("_pytest.reports", "BaseReport.failed"),
    ("_pytest.python", "pytest_pyfunc_call"),
    ("_pytest.python", "Function.runtest"),
    ("_pytest.main", "pytest_runtestloop"),
    ("_pytest.main", "Session.perform_collect"),
    ("_pytest.skipping", "pytest_runtest_makereport"),
    ("_pytest.skipping", "pytest_runtest_setup"),
    ("_pytest.assertion.rewrite", "AssertionRewritingHook.exec_module"),
    ("_pytest.assertion.rewrite", "rewrite_asserts"),
    ("pluggy._callers", "_multicall"),
    ("pluggy._hooks", "HookCaller.__call__"),
    ("builtins", "__import__"),
    ("builtins", "compile"),
    ("builtins", "exec"),
    ("builtins", "AssertionError"),
    ("os", "_exit"),
    ("os", "write"),
    ("_pytest.assertion.rewrite", "_rewrite_test"),
    ("_pytest.assertion.rewrite", "_read_pyc"),
    ("_frozen_importlib_external", "FileLoader.get_data"),
    ("_frozen_importlib_external", "SourceFileLoader.get_data"),
)
EAGER = ("pluggy", "iniconfig", "packaging.version", "packaging.requirements", "_pytest.terminal",
         "_pytest._io.terminalwriter", "pygments.lexers.python",
         "pygments.formatters.terminal", "_pytest.unittest", "unittest")  # fmt: skip
TEST_DIRS = ("test", "tests", "testing")
# where the tree's code or a command could have written bytecode: none of it is loaded
WRITABLE = ("/ws/", "/tmp/", "/dev/shm/", "/var/tmp/")


def is_test_file(rel):
    """The judge's is_test_path for .py files (codeloop.agent.patches), stdlib only."""
    parts = rel.split("/")
    name = parts[-1]
    if not name.endswith(".py"):
        return False
    if any(p in TEST_DIRS for p in parts[:-1]) or name == "conftest.py":
        return True
    return name.startswith("test_") or name.endswith("_test.py")


def snapshot_tests(root):
    """abs path -> bytes of every test module under ``root``, read before the tree's code
    runs: the tests are imported from these bytes, whatever the disk says later."""
    out = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git")]
        for name in files:
            path = os.path.join(top, name)
            if is_test_file(os.path.relpath(path, root)) and not os.path.islink(path):
                with open(path, "rb") as fh:
                    out[os.path.abspath(path)] = fh.read()
    return out


def pin_tests(snap, root):
    """Serve test modules from ``snap``: plain imports (the loader's get_data) and pytest's
    assertion rewriter (its source read; its cached-pyc read is turned off). No bytecode
    file under ``root`` or a writable dir is ever read (a cached or planted .pyc, sourceless
    or not): that code compiles from its source. The env dirs' own bytecode still loads."""
    import _frozen_importlib_external as ext

    from _pytest.assertion import rewrite

    untrusted = (os.path.realpath(root) + "/", *WRITABLE)
    orig_get_data = ext.FileLoader.get_data

    def get_data(self, path):
        data = snap.get(os.path.abspath(path))
        if data is not None:
            return data
        if path.endswith(".pyc") and os.path.realpath(path).startswith(untrusted):
            raise FileNotFoundError(path)
        return orig_get_data(self, path)

    class Pinned(type(pathlib.Path())):
        def read_bytes(self):
            return snap[os.path.abspath(str(self))]

    orig_rewrite = rewrite._rewrite_test

    def rewrite_test(fn, config):
        return orig_rewrite(Pinned(str(fn)) if os.path.abspath(str(fn)) in snap else fn, config)

    ext.FileLoader.get_data = get_data
    ext.SourceFileLoader.get_data = get_data
    rewrite._rewrite_test = rewrite_test
    rewrite._read_pyc = lambda *a, **k: None


# Hooks whose implementations decide or carry an outcome; each must come from pytest,
# pluggy, our plugin, a conftest.py of the tree (the task's, restored) or an env dir.
HOOKS = (
    "pytest_runtest_protocol", "pytest_runtest_setup", "pytest_runtest_call",
    "pytest_runtest_teardown", "pytest_runtest_makereport", "pytest_runtest_logreport",
    "pytest_pyfunc_call", "pytest_report_teststatus", "pytest_runtestloop",
    "pytest_collection_modifyitems", "pytest_sessionfinish", "pytest_collection_finish",
)  # fmt: skip


def _resolve(mod, dotted):
    obj = sys.modules.get(mod)
    for i, part in enumerate(dotted.split(".")):
        if obj is None:
            return None
        # the raw class attribute (a property or function), not what a lookup returns
        obj = vars(obj).get(part) if i and isinstance(obj, type) else getattr(obj, part, None)
    return obj


def _identity(obj):
    code = getattr(obj, "__code__", None) or getattr(getattr(obj, "fget", None), "__code__", None)
    return (id(obj), id(code) if code is not None else 0)


class Channel:
    """Our plugin: writes the records; registered before any conftest or test module."""

    def __init__(self, fd, nonce, trusted_dirs, conftests=()):
        self.fd, self.nonce, self.seq, self.pid = fd, nonce, 0, os.getpid()
        self.conftests = frozenset(os.path.realpath(p) for p in conftests)  # the task's own
        self.trusted_dirs = tuple(os.path.realpath(d) + "/" for d in trusted_dirs)
        self.config = None
        self._write = os.write  # bound now: a later os.write swap must not silence us
        for mod in {m for m, _ in WATCHED}:  # pytest's own modules, before the tree's code
            importlib.import_module(mod)
        self.base = {f"{m}:{d}": _identity(_resolve(m, d)) for m, d in WATCHED}
        self.meta_path = [id(x) for x in sys.meta_path]
        self.exc = {}
        self.tampered = set()
        self.emit("start", pytest=sys.modules["pytest"].__version__)

    def emit(self, kind, **fields):
        rec = {"n": self.nonce, "seq": self.seq, "pid": os.getpid(), "k": kind, **fields}
        self.seq += 1
        data = (json.dumps(rec) + "\n").encode("utf-8", "replace")
        while data:
            data = data[self._write(self.fd, data) :]

    def check(self, meta_path=True):
        """Record (once each) the watched objects that changed since start; ``meta_path``:
        also pytest's import hooks, which pytest itself removes at its end."""
        now = {f"{m}:{d}": _identity(_resolve(m, d)) for m, d in WATCHED}
        bad = {k for k, v in now.items() if v != self.base[k]}
        if sys.gettrace() is not None or sys.getprofile() is not None:
            bad.add("sys.settrace")
        if meta_path and [id(x) for x in sys.meta_path[: len(self.meta_path)]] != self.meta_path:
            bad.add("sys.meta_path")
        bad |= self._foreign_hooks()
        new = sorted(bad - self.tampered)
        if new:
            self.tampered |= set(new)
            self.emit("tamper", what=new)

    def _trusted_plugin(self, plugin):
        if plugin is self:
            return True
        mod = plugin if isinstance(plugin, type(os)) else sys.modules.get(type(plugin).__module__)
        path = os.path.realpath(getattr(mod, "__file__", None) or "/nonexistent")
        return path in self.conftests or path.startswith(self.trusted_dirs)

    def _foreign_hooks(self):
        if self.config is None:
            return set()
        out = set()
        for plugin in self.config.pluginmanager.get_plugins():  # a conftest made during the run
            path = getattr(plugin, "__file__", None) or ""
            if (
                os.path.basename(path) == "conftest.py"
                and os.path.realpath(path) not in self.conftests
            ):
                out.add(f"conftest:{path}")
        for name in HOOKS:
            for impl in getattr(self.config.hook, name).get_hookimpls():
                if not self._trusted_plugin(impl.plugin):
                    out.add(f"hook:{name}:{impl.plugin_name}")
        return out

    def pytest_configure(self, config):
        self.config = config
        self.meta_path = [id(x) for x in sys.meta_path]  # pytest's assertion hook is in now

    def pytest_collectreport(self, report):
        if report.failed:
            self.emit("collect_error", id=report.nodeid)

    def pytest_collection_finish(self, session):
        self.check()
        self.emit("collected", ids=[item.nodeid for item in session.items])

    def pytest_runtest_makereport(self, item, call):
        if call.excinfo is not None:
            self.exc[(item.nodeid, call.when)] = call.excinfo.typename

    def pytest_runtest_logreport(self, report):
        self.check()
        xfail = getattr(report, "wasxfail", None) is not None
        exc = self.exc.pop((report.nodeid, report.when), "")
        self.emit("rep", id=report.nodeid, when=report.when, outcome=report.outcome,
                  xfail=xfail, exc=exc)  # fmt: skip

    def pytest_sessionfinish(self, session):
        self.check()

    def finish(self, status):
        self.check(meta_path=False)
        self.emit("finish", status=int(status), records=self.seq)


def main():
    with open(sys.argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    os.unlink(sys.argv[1])  # the nonce is on no disk once the tree's code can run
    raw = int(os.environ.pop("CODELOOP_RESULT_FD", "3"))
    fd = os.dup(raw)
    os.close(raw)
    for path in spec["paths"]:
        site.addsitedir(path)
    sys.dont_write_bytecode = True
    # pytest and what it may import later, loaded before the tree is on sys.path: a module
    # of the tree named pytest, pluggy or packaging can shadow nothing that decides
    import pytest

    for name in EAGER:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    snap = snapshot_tests(os.getcwd())
    pin_tests(snap, os.getcwd())
    # pytest's own dirs and the env dirs (read-only binds): where trusted plugins live
    pytest_dir = os.path.dirname(os.path.dirname(pytest.__file__))
    conftests = [p for p in snap if os.path.basename(p) == "conftest.py"]
    chan = Channel(fd, spec["nonce"], [pytest_dir, *spec["paths"]], conftests)
    sys.path.insert(0, os.getcwd())  # as `python -m pytest` does, without -I's loss of it
    status = pytest.main(list(spec["args"]) + list(spec["ids"]), plugins=[chan])
    chan.finish(int(status))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(status))  # no atexit hook of the tree's code runs after our last record


if __name__ == "__main__":
    main()
