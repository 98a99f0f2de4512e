"""The judge's pytest entry (stdlib + pytest only; runs inside the sandbox, from an env dir).

Run as ``python3 -I -B judge_boot.py SPEC`` in the judged tree. Before any code of the
tree runs it reads the run's spec (nonce, env dirs, pytest args, node ids) and unlinks it,
takes the result fd (``CODELOOP_RESULT_FD``) to a fresh descriptor, records the identity of
the pytest machinery that decides an outcome, and only then starts pytest with our plugin
object. Every line it writes there is one JSON record carrying the nonce, a sequence
number and the pid that started: ``start``, ``collected`` (the node ids pytest selected),
``collect_error``, one ``rep`` per test phase (``sub`` for each subtest of a call phase),
``tamper`` when the machinery changed under it, and ``finish`` (pytest's exit status and
how many records came before). The host side
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
         "pygments.formatters.terminal", "_pytest.unittest", "unittest")
TEST_DIRS = ("test", "tests", "testing")
MAX_TEXT = 6000  # chars of a failure's text an agent's own run reports
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


def walk_files(root):
    """Paths of the regular files under ``root`` (links and __pycache__/.git skipped).
    No recursion, whatever depth a command gave the tree; a dir whose path the system
    cannot take (past PATH_MAX) is skipped: nothing there can be imported either."""
    out, todo = [], [root]
    while todo:
        top = todo.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name not in ("__pycache__", ".git"):
                    todo.append(e.path)
            elif e.is_file(follow_symlinks=False):
                out.append(e.path)
    return sorted(out)


def snapshot_tests(root):
    """abs path -> bytes of every test module under ``root``, read before the tree's code
    runs: the tests are imported from these bytes, whatever the disk says later."""
    out = {}
    for path in walk_files(root):
        if is_test_file(os.path.relpath(path, root)):
            try:
                with open(path, "rb") as fh:
                    out[os.path.abspath(path)] = fh.read()
            except OSError:
                continue
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





def _encoder():
    """A JSON encoder of records built only from what the tree's code cannot rebind: C
    functions and slot wrappers bound now, before any of it runs (a replaced json.dumps,
    str subclass or builtins entry changes nothing we write)."""
    from _json import encode_basestring_ascii as quote

    exact, str_t, int_t, bool_t = type, str, int, bool
    int_repr, join, dict_t, items = int.__repr__, "".join, dict, dict.items
    seq_types = (list, tuple)

    def encode(obj):
        t = exact(obj)
        if t is str_t:
            return quote(obj)
        if t is bool_t:
            return "true" if obj else "false"
        if t is int_t:
            return int_repr(obj)
        if obj is None:
            return "null"
        if t is dict_t:
            return "{" + ",".join([quote(str_t.__str__(k)) + ":" + encode(v)
                                   for k, v in items(obj)]) + "}"
        if t in seq_types:
            return "[" + ",".join([encode(v) for v in obj]) + "]"
        return quote(join(["<", t.__name__ if exact(t.__name__) is str_t else "?", ">"]))

    return encode


_encode = _encoder()

def _resolve(mod, dotted):
    obj = sys.modules.get(mod)
    for i, part in enumerate(dotted.split(".")):
        if obj is None:
            return None
        # the raw class attribute (a property or function), not what a lookup returns
        obj = vars(obj).get(part) if i and isinstance(obj, type) else getattr(obj, part, None)
    return obj


def subtest_report_type():
    """pytest's report class of one subtest (``unittest``'s ``subTest``, the ``subtests``
    fixture; pytest 9 on): a test's call phase may log several before the test's own
    report, and a failed one fails the test. None where this pytest has no such class."""
    try:
        from _pytest.subtests import SubtestReport
    except ImportError:
        return None
    return SubtestReport


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
        self.guard = None  # set by main once the tree's files are known
        self.detail = False  # failure texts in the records (an agent's own test run)
        self.origins = {}  # id(code) -> (code, trusted): hook origins checked once each
        self.sub_type = subtest_report_type()  # bound before the tree's code runs
        self.emit("start", pytest=sys.modules["pytest"].__version__)

    def emit(self, kind, **fields):
        rec = {"n": self.nonce, "seq": self.seq, "pid": self.pid, "k": kind, **fields}
        self.seq += 1
        data = _encode(rec).encode("utf-8", "replace") + b"\n"
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
        for what in sorted(bad):
            self.report_tamper(what)

    def report_tamper(self, what):
        """One ``tamper`` record per kind of change seen."""
        if what not in self.tampered:
            self.tampered.add(what)
            self.emit("tamper", what=[what])

    def _trusted_plugin(self, plugin):
        if plugin is self:
            return True
        mod = plugin if isinstance(plugin, type(os)) else sys.modules.get(type(plugin).__module__)
        return self._trusted_file(getattr(mod, "__file__", None) or "/nonexistent")

    def _trusted_file(self, path):
        path = os.path.realpath(path)
        if path in self.conftests or path.startswith(self.trusted_dirs):
            return True
        return self.guard is not None and self.guard.base_file(path)

    def _trusted_impl(self, impl):
        """Where a hook implementation's code really comes from (not its claimed module)."""
        if impl.plugin is self:
            return True
        code = getattr(impl.function, "__code__", None)
        if code is None:
            return self._trusted_plugin(impl.plugin)
        key = id(code)
        if key not in self.origins:
            self.origins[key] = (code, self._trusted_file(code.co_filename))
        return self.origins[key][1]

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
        for caller in list(vars(self.config.hook).values()):  # every hook, not a list of them
            get = getattr(caller, "get_hookimpls", None)
            for impl in get() if callable(get) else ():
                if not self._trusted_impl(impl):
                    out.add(f"hook:{getattr(caller, 'name', '?')}:{impl.plugin_name}")
        return out

    def pytest_configure(self, config):
        self.config = config
        self.meta_path = [id(x) for x in sys.meta_path]  # pytest's assertion hook is in now

    def _text(self, report):
        """A failure's text for the agent's view (``detail`` runs only), its tail."""
        if not self.detail:
            return ""
        try:
            text = report.longreprtext or ""
        except Exception:  # noqa: BLE001 - a hostile longrepr must not break the record
            text = ""
        return text[-MAX_TEXT:] if type(text) is str else ""

    def pytest_collectreport(self, report):
        if report.failed:
            self.emit("collect_error", id=report.nodeid, lr=self._text(report))

    def pytest_collection_finish(self, session):
        self.check()
        if self.guard is not None:
            self.guard.hold_test_functions()
        self.emit("collected", ids=[item.nodeid for item in session.items])

    def pytest_runtest_makereport(self, item, call):
        if call.excinfo is not None:
            self.exc[(item.nodeid, call.when)] = call.excinfo.typename

    def pytest_runtest_logreport(self, report):
        self.check()
        xfail = getattr(report, "wasxfail", None) is not None
        exc = self.exc.pop((report.nodeid, report.when), "")
        fields = {"lr": self._text(report)} if report.failed and self.detail else {}
        sub = self.sub_type is not None and isinstance(report, self.sub_type)
        self.emit("sub" if sub else "rep", id=report.nodeid, when=report.when,
                  outcome=report.outcome, xfail=xfail, exc=exc, **fields)

    def pytest_sessionfinish(self, session):
        self.check()

    def finish(self, status):
        self.check(meta_path=False)
        self.emit("finish", status=int(status), records=self.seq)


# Stdlib calls that hand their caller a frame: whoever calls one of these holds the stack.
FRAME_APIS = frozenset({
    ("inspect.py", "currentframe"), ("inspect.py", "stack"), ("inspect.py", "trace"),
    ("inspect.py", "getouterframes"), ("inspect.py", "getinnerframes"),
    ("traceback.py", "walk_stack"), ("traceback.py", "walk_tb"),
    ("traceback.py", "extract_stack"), ("traceback.py", "format_stack"),
    ("traceback.py", "print_stack"), ("__init__.py", "<lambda>"),  # logging.currentframe
})
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
CODE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
GC_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
TRACE_EVENTS = frozenset({"sys.settrace", "sys.setprofile", "sys._current_frames"})
CTYPES_EVENTS = frozenset({"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle",
                           "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at",
                           "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.call_function"})
WATCH_EVENTS = (frozenset({"sys._getframe", "object.__getattr__", "object.__setattr__",
                           "open", "sys.addaudithook"})
                | GC_EVENTS | TRACE_EVENTS | CTYPES_EVENTS)


class Guard:
    """An audit hook (sys.addaudithook: it cannot be removed) that reports, as ``tamper``
    records, what code changed by the patch does to reach the harness at run time:

    - takes a frame (sys._getframe, a traceback's or generator's frame, or a stdlib call
      that returns frames) when the code asking is the patch's: the stack leads to the
      test's own expected values;
    - opens a test file (the snapshot's) when the innermost frame of the tree's code on
      the stack is the patch's;
    - walks the garbage collector's objects, sets a trace or profile hook (patch code
      asking), uses ctypes (the first code past the standard library on the stack is the
      patch's: a library of the env dirs that loads ctypes for itself, as numpy does when
      the patch imports it, is that library's doing), or swaps the code or defaults of a
      test's or pytest's function (the patch's code asking, ``protected``; trusted code
      only where its own code names the attribute and either the function's own module
      is at work, as the standard library's ``types.coroutine`` marking asyncio's
      functions when the patch first imports asyncio, or no code of the patch is on the
      stack, as a library the test calls copying the test's function).

    "The patch's code" is any code not of a trusted origin (``untrusted``): a file the
    patch changed, a file that was not there when the run started (under the tree, /tmp
    or anywhere), code compiled from a string. The task's own code and test files, the
    standard library, pytest and the env dirs are trusted.
    """

    def __init__(self, chan, root, changed, tests, trusted_dirs, stdlib):
        self.chan = chan
        self.stdlib = os.path.realpath(stdlib) + "/"
        self.root = os.path.realpath(root) + "/"
        self.present = frozenset(_tree_files(root))
        self.changed = frozenset(os.path.join(os.path.realpath(root), r) for r in changed)
        self.tests = frozenset(os.path.realpath(p) for p in tests)
        self.trusted = tuple(os.path.realpath(d) + "/" for d in trusted_dirs)
        self.busy = [False]
        self.held = None  # id -> function the test files defined (hold_test_functions)
        self.getframe, self.realpath = sys._getframe, os.path.realpath
        self.fn_type, self.str_type = type(main), str

    def base_file(self, path):
        """A file of the task's own tree that the patch left alone."""
        return path in self.present and path not in self.changed

    def untrusted(self, code):
        """Code is trusted by where it comes from: the standard library, pytest, the env
        dirs, or a file of the task's tree the patch left alone; anything else (the
        patch's files, files the run made, under the tree or /tmp or anywhere, code
        compiled from a string) is the patch's."""
        name = code.co_filename
        if name.startswith("<"):
            return not name.startswith("<frozen")
        if name.startswith(self.trusted):
            return False
        return not (name.startswith(self.root) and self.base_file(name))

    def _api(self, code):
        return (os.path.basename(code.co_filename), code.co_name) in FRAME_APIS

    def asked_by_patch(self, frame):
        """The caller, past any frame-returning stdlib call, is the patch's code."""
        while frame is not None and self._api(frame.f_code):
            frame = frame.f_back
        return frame is not None and self.untrusted(frame.f_code)

    def innermost_tree_is_patch(self, frame):
        """The innermost frame of the tree's code (trusted dirs passed over) is the patch's."""
        while frame is not None:
            name = frame.f_code.co_filename
            if not (name.startswith(self.trusted) or name.startswith("<frozen")):
                return self.untrusted(frame.f_code)
            frame = frame.f_back
        return False

    def out_of_stdlib(self, frame):
        """The frames from ``frame`` out through the standard library's (and the import
        system's), ending with the first past them: the code that called into the stdlib."""
        while frame is not None:
            yield frame
            name = frame.f_code.co_filename
            if not (name.startswith(self.stdlib) or name.startswith("<frozen")):
                return
            frame = frame.f_back

    def first_past_stdlib_is_patch(self, frame):
        """The first frame past the standard library's is the patch's code: it, not a
        trusted library, is the one using what the stdlib gives."""
        frames = list(self.out_of_stdlib(frame))
        return bool(frames) and self.untrusted(frames[-1].f_code)

    def own_module_at_work(self, fn_file, frame):
        """The frames from ``frame`` out, past the standard library's, reach the file
        ``fn_file`` itself: the function's own module decorating what it defines."""
        return any(f.f_code.co_filename == fn_file for f in self.out_of_stdlib(frame))

    def hold_test_functions(self):
        """Keep every function whose code is a test file's or conftest's as collection
        left them (tests, helpers, fixtures, whatever wraps them): the ones a test run
        calls or checks with. Functions made later (a lambda a test makes) are not held."""
        import gc

        tests, fn_type = self.tests, self.fn_type
        self.held = {id(o): o for o in gc.get_objects()
                     if type(o) is fn_type and o.__code__.co_filename in tests}

    def protected(self, fn, fn_file):
        """A function whose code or defaults no patch code may change: the standard
        library's, pytest's or an env dir's, or one a test file or conftest defined (until
        collection ends, any function of theirs; a lambda or local function a test makes
        and hands to the patch's code is that code's to copy or change, as a library such
        as boltons' ``copy_function`` does)."""
        if fn_file.startswith(self.trusted):
            return True
        if fn_file not in self.tests:
            return False
        return self.held is None or id(fn) in self.held

    def patch_on_stack(self, frame):
        """Some frame from ``frame`` out is the patch's code."""
        while frame is not None:
            if self.untrusted(frame.f_code):
                return True
            frame = frame.f_back
        return False

    def trusted_swap(self, fn_file, attr, caller):
        """Trusted code changes a trusted function's ``attr`` of its own accord: its code
        names the attribute (no generic caller, a thread's run or a partial, handing on a
        ``setattr`` the patch chose), and either the function's own module is at work or
        no code of the patch is on the stack (a library copying a test's function)."""
        code = caller.f_code
        if attr not in code.co_names and attr not in code.co_consts:
            return False
        return self.own_module_at_work(fn_file, caller) or not self.patch_on_stack(caller)

    def _kind(self, event, args, caller):
        if event == "object.__getattr__":
            hit = args[1] in FRAME_ATTRS and self.asked_by_patch(caller)
            return "frames" if hit else ""
        if event == "object.__setattr__":
            target = args[0]
            if args[1] not in CODE_ATTRS or type(target) is not self.fn_type:
                return ""
            name = target.__code__.co_filename
            if self.untrusted(caller.f_code):
                return "code_swap" if self.protected(target, name) else ""
            mine = name in self.tests or name.startswith(self.trusted)
            return "code_swap" if mine and not self.trusted_swap(name, args[1], caller) else ""
        if event == "open":
            path = args[0]
            if type(path) is not self.str_type:
                return ""
            real = self.realpath(path)
            if real.startswith("/proc/") and real.endswith(("/mem", "/maps")):
                return "proc_mem"
            hit = real in self.tests and self.innermost_tree_is_patch(caller)
            return "reads_tests" if hit else ""
        if event == "sys.addaudithook":
            return "audit_hook" if self.untrusted(caller.f_code) else ""
        if event == "sys._getframe":
            return "frames" if self.asked_by_patch(caller) else ""
        if event in GC_EVENTS:
            return "gc_objects" if self.asked_by_patch(caller) else ""
        if event in TRACE_EVENTS:
            return "settrace" if self.innermost_tree_is_patch(caller) else ""
        return "ctypes" if self.first_past_stdlib_is_patch(caller) else ""

    def hook(self, event, args):
        if event not in WATCH_EVENTS or self.busy[0]:
            return
        self.busy[0] = True
        try:
            kind = self._kind(event, args, self.getframe(1))
            if kind:
                self.chan.report_tamper(f"runtime:{kind}")
        finally:
            self.busy[0] = False


def _tree_files(root):
    return walk_files(os.path.realpath(root))


def env_plugins():
    """The pytest11 entry-point plugins of the env dirs, imported before the tree is on
    sys.path, with pytest's own autoload then turned off: a ``*.dist-info`` the tree adds
    registers nothing."""
    from importlib import metadata

    out = []
    for ep in metadata.entry_points(group="pytest11"):
        try:
            out.append(ep.load())
        except Exception:  # noqa: BLE001 - a broken plugin of an env is pytest's to report
            continue
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return out


def tree_paths(env_dirs):
    """The tree's own import dirs its env dirs' spec.json name (``tree_paths``: a src
    layout's ``src``), in order, once each. They go on sys.path right after the tree's
    root, as the outcome plugin puts them for a plain pytest run: the same trust as the
    root itself. Read before the guard starts watching file opens."""
    names = []
    for d in env_dirs:
        try:
            with open(os.path.join(d, "spec.json"), encoding="utf-8") as fh:
                got = json.load(fh).get("tree_paths", [])
        except (OSError, ValueError, AttributeError):
            continue
        names += [p for p in got if isinstance(p, str) and p not in names] if isinstance(got, list) else []
    return names


def take_spec(path):
    """The run's spec (read, then unlinked: the nonce is on no disk once the tree's code
    can run), the result fd moved to a fresh descriptor, the env dirs on sys.path."""
    with open(path, encoding="utf-8") as fh:
        spec = json.load(fh)
    os.unlink(path)
    raw = int(os.environ.pop("CODELOOP_RESULT_FD", "3"))
    fd = os.dup(raw)
    os.close(raw)
    for env in spec["paths"]:
        site.addsitedir(env)
    sys.dont_write_bytecode = True
    return spec, fd


def main():
    spec, fd = take_spec(sys.argv[1])
    # pytest and what it may import later, loaded before the tree is on sys.path: a module
    # of the tree named pytest, pluggy or packaging can shadow nothing that decides
    import pytest

    for name in EAGER:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    snap = snapshot_tests(os.getcwd())
    for rel, text in (spec.get("overrides") or {}).items():  # canaries, served from memory
        snap[os.path.abspath(rel)] = text.encode("utf-8")
    pin_tests(snap, os.getcwd())
    # pytest's own dirs and the env dirs (read-only binds): where trusted plugins live
    pytest_dir = os.path.dirname(os.path.dirname(pytest.__file__))
    conftests = [p for p in snap if os.path.basename(p) == "conftest.py"]
    chan = Channel(fd, spec["nonce"], [pytest_dir, *spec["paths"]], conftests)
    chan.detail = bool(spec.get("detail"))
    stdlib = os.path.dirname(os.__file__)
    here = os.path.dirname(os.path.abspath(__file__))
    chan.guard = Guard(chan, os.getcwd(), spec.get("changed", []), snap,
                       [stdlib, pytest_dir, here, *spec["paths"]], stdlib)
    plugins = env_plugins()  # autoload off: entry points of the env dirs only, loaded now
    tree = tree_paths(spec["paths"])
    sys.addaudithook(chan.guard.hook)
    sys.path.insert(0, os.getcwd())  # as `python -m pytest` does, without -I's loss of it
    sys.path[1:1] = [os.path.join(os.getcwd(), rel) for rel in tree]
    status = pytest.main(list(spec["args"]) + list(spec["ids"]), plugins=[chan, *plugins])
    chan.finish(int(status))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(status))  # no atexit hook of the tree's code runs after our last record


if __name__ == "__main__":
    main()
