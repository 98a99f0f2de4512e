"""Evaluator child: judges the tests that cannot be split, and never runs model code.

Stdlib only; its source follows harness.py's in the zygote (pool.HARNESS_SRC), so it uses
``_encode``, ``decode`` and ``_describe`` from there. The zygote forks this child beside the
job's model-code child, before it; this child reads its own frame (setup code and tests,
expected values included) straight from the zygote's control pipe, so those bytes are in no
memory the model child is forked from. In its namespace every name the program defines is
a proxy: calling one (or reading / setting an attribute of a program object) sends the
arguments as plain data to the model child and takes back its answer as plain data,
decoded to exact stdlib types, or as a handle number for an object that is not plain data.
So no object of the model's, and no code of it, ever runs here, and what the model child
writes on any fd is at most its own answer to a call. Verdicts go to fd 3, a pipe only this
child holds; fd 4 reads answers, fd 5 sends calls.
"""

import builtins
import ctypes
import importlib
import keyword
import os
import sys

try:  # for linters and tests; in the zygote, harness.py's source runs just before this one
    from codeloop.sandbox.harness import (
        _REFS,
        BadValue,
        _compile,
        _describe,
        _dumps,
        _encode,
        _exec,
        _len,
        _loads,
        _str,
        _type,
        _Unsupported,
        _write,
        decode,
    )
except ImportError:
    pass

_ANSWERS_FD, _CALLS_FD = 4, 5
_NO_PASS_THROUGH = (SystemExit, KeyboardInterrupt, GeneratorExit)


class ProgramGone(BaseException):
    """The model child hung up or sent an unreadable answer: no later call can be
    answered. A BaseException, so a test's ``except Exception`` does not swallow it."""


class ProgramError(Exception):
    """The program raised an exception of a type that is not a builtin one."""


class _Link:
    """The call channel to the model child; broken for good once it fails."""

    def __init__(self):
        self.answers = open(_ANSWERS_FD, "rb", closefd=False)
        self.gone = ""

    def _send(self, msg):
        data = (_dumps(msg) + "\n").encode("utf-8", "surrogatepass")
        try:
            while data:
                data = data[_write(_CALLS_FD, data) :]
        except OSError as e:
            raise self._broken(f"program hung up: {e}") from None

    def _broken(self, why):
        self.gone = self.gone or why
        return ProgramGone(self.gone)

    def receive(self):
        """The next answer, a dict; ProgramGone once the link is broken."""
        if self.gone:
            raise ProgramGone(self.gone)
        line = self.answers.readline()
        if not line:
            raise self._broken("the program exited or closed its answer pipe")
        try:
            msg = _loads(line)
        except (ValueError, RecursionError, MemoryError):  # (a line nested 100k deep...)
            msg = None
        if _type(msg) is not dict:
            raise self._broken("unreadable answer from the program")
        return msg

    def ask(self, op, target, *rest):
        """Run ``op`` on the program object ``target`` in the model child: its value."""
        try:
            msg = [op, object.__getattribute__(target, "_ref"), *(_encode(x) for x in rest)]
        except _Unsupported as e:
            raise TypeError(f"cannot pass to the program (not plain data): {e}") from None
        if self.gone:
            raise ProgramGone(self.gone)
        self._send(msg)
        return self.value(self.receive())

    def value(self, msg):
        """An answer -> its value: plain data, a handle proxy, or the program's exception."""
        if "v" in msg:
            try:
                return decode(msg["v"])
            except (BadValue, RecursionError, MemoryError) as e:
                raise self._broken(f"malformed value from the program: {e}") from None
        if _type(msg.get("h")) is int:
            return Remote(["h", msg["h"]])
        err = msg.get("e")
        if _type(err) is list and _len(err) == 2:
            name, text = _str(err[0])[:200], _str(err[1])[:2000]
            cls = getattr(builtins, name, None)
            if isinstance(cls, type) and issubclass(cls, Exception):
                raise cls(text)
            if isinstance(cls, type) and issubclass(cls, _NO_PASS_THROUGH):
                raise ProgramGone(f"the program raised {name}")
            raise ProgramError(f"{name}: {text}")
        raise self._broken("unreadable answer from the program")


_LINK = []


class Remote:
    """A name or object of the program; it lives in the model child (``_ref`` names it)."""

    __slots__ = ("_ref",)

    def __init__(self, ref):
        object.__setattr__(self, "_ref", ref)

    def __call__(self, *args, **kwargs):
        return _LINK[0].ask("call", self, list(args), dict(kwargs))

    def __getattr__(self, name):
        if name.startswith("__"):  # protocol probes (copy, pickle...): not the program's
            raise AttributeError(name)
        return _LINK[0].ask("get", self, name)

    def __setattr__(self, name, value):
        _LINK[0].ask("set", self, name, value)

    def __repr__(self):
        return f"<program object {object.__getattribute__(self, '_ref')!r}>"


_REFS[Remote] = lambda v: object.__getattribute__(v, "_ref")


def _stdlib_module(name):
    """The stdlib module ``name``, imported here (a program's ``math`` is ours too)."""
    if _type(name) is str and name.split(".")[0] in sys.stdlib_module_names:
        try:
            return importlib.import_module(name)
        except BaseException:
            return None
    return None


def _bind(ns, names, link):
    """Put the program's names (from its first answer) into the test namespace."""
    if _type(names) is not dict:
        raise link._broken("unreadable list of the program's names")
    for name, kind in names.items():
        if _type(name) is not str or not name.isidentifier() or keyword.iskeyword(name):
            continue
        if name.startswith("__") or _type(kind) is not list or not kind:
            continue
        if kind[0] == "m":
            module = _stdlib_module(kind[1] if _len(kind) > 1 else None)
            ns[name] = module if module is not None else Remote(["n", name])
        elif kind[0] == "x" and _len(kind) == 2 and _type(kind[1]) is dict:
            if "v" in kind[1] or "h" in kind[1]:  # (an "e" here is a malformed list)
                ns[name] = link.value(kind[1])
        else:
            ns[name] = Remote(["n", name])


def _judge(frame, link, emit):
    try:
        first = link.receive()
        ns = {"__name__": "__test__", "__builtins__": builtins}
        _bind(ns, first.get("names"), link)
    except (Exception, ProgramGone) as e:  # model data, however odd, is never our fault
        link._broken(f"unusable list of the program's names: {type(e).__name__}")
        for i, _ in frame["tests"]:
            emit({"i": i, "gone": link.gone})
        return
    entry = frame.get("entry") or ""
    if entry and entry in ns and "candidate" not in ns:
        ns["candidate"] = ns[entry]
    failed_setup = None
    if frame.get("setup"):
        try:
            _exec(_compile(frame["setup"], "<setup>", "exec"), ns)
        except BaseException as e:
            failed_setup = e
    for i, src in frame["tests"]:
        try:
            if failed_setup is not None:
                raise failed_setup
            _exec(_compile(src, "<test>", "exec"), ns)
            # the program vanished mid-test and a bare except swallowed it: in one process
            # (plain Python) that test would have died with it, so it does not pass here
            emit({"i": i, "gone": link.gone} if link.gone else {"i": i, "ok": True})
        except ProgramGone:
            emit({"i": i, "gone": link.gone})
        except BaseException as e:
            emit({"i": i, "error": _describe(e)})


def run_evaluator(frame, verdict_fd):
    """Entry point of the evaluator child: verdict lines on ``verdict_fd``, then done."""

    def emit(obj):
        data = (_dumps(obj) + "\n").encode("utf-8", "surrogatepass")
        while data:
            data = data[_write(verdict_fd, data) :]

    # non-dumpable: a process of the same uid (the model child) can neither ptrace this
    # one nor open its /proc/<pid>/fd or mem (the zygote already is; said again here)
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    try:
        sys.set_int_max_str_digits(0)
    except AttributeError:
        pass
    try:
        link = _Link()
        _LINK[:] = [link]
        _judge(frame, link, emit)
    except BaseException as e:  # a fault of ours, never a verdict
        emit({"fault": f"evaluator: {type(e).__name__}: {e}"})
        return
    emit({"done": True})
    os.close(_CALLS_FD)  # after the last verdict: the model child's EOF, then it exits
