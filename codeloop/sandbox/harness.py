"""Child-side harness: runs ONE job inside the forked, de-privileged sandbox child.

Stdlib only (it runs under Debian's /usr/bin/python3 -I -S, never imports codeloop); the
zygote execs this source once and calls ``run_job`` in every forked child. The child only
ever *evaluates*: for function tasks it returns the plain-data value of each test's "holes"
(the calls the parent cut out of the asserts), for stdio tasks the program's output. It
never sees expected values, so nothing it prints, returns or exits with can fake a pass.
Everything here runs in the same process as the model's code, so the parent treats every
message from it as untrusted data: values, never verdicts. Tests that cannot be split are
judged by the evaluator child (evaluator.py), whose calls on the program this child answers
(``_serve``) with plain values too.

``_encode`` / ``decode`` are the one wire format of plain data, used by this child, the
evaluator and the parent (codeloop.sandbox.values).
"""

import builtins
import collections
import decimal
import fractions
import json
import os
import sys

# Bound once when the zygote loads the harness: a program that rebinds builtins.exec,
# isinstance, json.dumps... does not change what the harness calls.
_exec, _eval, _compile, _type, _str, _len = exec, eval, compile, type, str, len
_loads, _write, _Module = json.loads, os.write, _type(os)
_open, _callable, _getattr, _setattr = open, callable, getattr, setattr
_MAX_DEPTH = 64
_MAX_ITEMS = 200_000


def _fast_dumps():
    """``json.dumps`` with its defaults, through a C encoder built once. json.dumps builds a
    JSONEncoder and a C encoder per call, and their first use in each forked child writes
    dozens more pages of the zygote's memory (a copy-on-write fault each, every job). Same text,
    same TypeError for a value JSON cannot hold; no cycle check, as every message is a fresh
    tree (``_encode``'s output, strings, numbers)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return json.dumps

    def default(o):
        raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")

    encoder = make(None, default, json.encoder.encode_basestring_ascii, None, ": ", ", ",
                   False, False, True)
    join = "".join

    def dumps(obj):
        return join(encoder(obj, 0))

    return dumps


_dumps = _fast_dumps()


class _Unsupported(Exception):
    pass


def _encode(v, depth=0, count=None):
    """Plain data -> JSON-able tagged form; exact types only (subclasses are refused)."""
    count = count if count is not None else [0]
    count[0] += 1
    if depth > _MAX_DEPTH or count[0] > _MAX_ITEMS:
        raise _Unsupported("value too deep or too large")
    t = _type(v)
    if v is None or t is bool or t is str or t is int or t is float:
        return v
    if t is list:
        return [_encode(x, depth + 1, count) for x in v]
    tag = _TAGS.get(t)
    if tag is None and t in _REFS:
        return {"@": _REFS[t](v)}
    if tag is None:
        raise _Unsupported(f"a value of type {t.__name__!s} is not plain data")
    if tag in "dCOD":
        return {
            tag: [
                [_encode(k, depth + 1, count), _encode(x, depth + 1, count)] for k, x in v.items()
            ]
        }
    if tag in "tsfq":
        return {tag: [_encode(x, depth + 1, count) for x in v]}
    if tag == "b" or tag == "B":
        return {tag: bytes(v).decode("latin-1")}
    if tag == "c":
        return {tag: [v.real, v.imag]}
    if tag == "r":
        return {tag: [v.start, v.stop, v.step]}
    if tag == "M":
        return {tag: str(v)}
    return {tag: [v.numerator, v.denominator]}  # Fraction


_TAGS = {
    dict: "d", collections.Counter: "C", collections.OrderedDict: "O",
    collections.defaultdict: "D", tuple: "t", set: "s", frozenset: "f",
    collections.deque: "q", bytes: "b", bytearray: "B", complex: "c", range: "r",
    decimal.Decimal: "M", fractions.Fraction: "R",
}


class BadValue(ValueError):
    """Not a well-formed encoded value."""


def decode(v, refs=None):
    """Tagged JSON -> exact stdlib value (BadValue if malformed). ``refs`` resolves
    ``{"@": ref}`` (a program object named by the evaluator); None refuses it."""
    t = _type(v)
    if v is None or t is bool or t is int or t is float or t is str:
        return v
    if t is list:
        return [decode(x, refs) for x in v]
    if t is not dict or _len(v) != 1:
        raise BadValue(f"unexpected encoded value {_str(v)[:80]!r}")
    tag, body = next(iter(v.items()))
    if tag == "@" and refs is not None:
        try:
            return refs(body)
        except (KeyError, IndexError, TypeError, ValueError):
            raise BadValue(f"unknown reference {_str(body)[:80]!r}") from None
    fn = _DECODERS.get(tag)
    if fn is None:
        raise BadValue(f"unknown tag {tag!r}")
    try:
        return fn(body, refs)
    except BadValue:
        raise
    except (TypeError, ValueError, ArithmeticError, decimal.InvalidOperation) as exc:
        raise BadValue(f"malformed {tag!r} value: {exc}") from None


def _pairs(body, refs):
    return [(decode(k, refs), decode(x, refs)) for k, x in body]


_DECODERS = {
    "d": lambda b, r: dict(_pairs(b, r)),
    "C": lambda b, r: collections.Counter(dict(_pairs(b, r))),
    "O": lambda b, r: collections.OrderedDict(_pairs(b, r)),
    "D": lambda b, r: collections.defaultdict(None, _pairs(b, r)),
    "t": lambda b, r: tuple(decode(x, r) for x in b),
    "s": lambda b, r: {decode(x, r) for x in b},
    "f": lambda b, r: frozenset(decode(x, r) for x in b),
    "q": lambda b, r: collections.deque(decode(x, r) for x in b),
    "b": lambda b, r: _str(b).encode("latin-1"),
    "B": lambda b, r: bytearray(_str(b).encode("latin-1")),
    "c": lambda b, r: complex(float(b[0]), float(b[1])),
    "r": lambda b, r: range(int(b[0]), int(b[1]), int(b[2])),
    "M": lambda b, r: decimal.Decimal(_str(b)),
    "R": lambda b, r: fractions.Fraction(int(b[0]), int(b[1])),
}
_REFS = {}  # type -> its wire reference; the evaluator registers its proxies here


def _describe(exc):
    return [type(exc).__name__, str(exc)[:2000]]


def _exit(code=None):
    raise SystemExit(code)


def _run_stdio(compiled, items, emit, out_cap):
    """Each test: a fresh fork of this child with the test's input on fd 0."""
    for i, data in enumerate(items):
        path = f"stdin-{i}"
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(data)
        r, w = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            fd = os.open(path, os.O_RDONLY)
            os.dup2(fd, 0)
            os.dup2(w, 1)
            code = 0
            try:
                _exec(compiled, {"__name__": "__main__", "__builtins__": builtins})
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException as e:
                sys.stderr.write(f"{type(e).__name__}: {e}\n")
                code = 1
            try:
                sys.stdout.flush()
            except BaseException:
                pass
            os._exit(code)
        os.close(w)
        chunks, size = [], 0
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            size += len(b)
            if size <= out_cap:
                chunks.append(b)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        os.unlink(path)
        msg = {
            "i": i,
            "out": b"".join(chunks).decode("utf-8", "replace"),
            "truncated": size > out_cap,
        }
        if os.WIFSIGNALED(status):
            msg["signal"] = os.WTERMSIG(status)
        else:
            msg["exit"] = os.WEXITSTATUS(status)
        emit(msg)


def _run_function(compiled, req, emit):
    ns = {"__name__": "__solution__", "__builtins__": builtins}
    try:
        _exec(compiled, ns)
        if req.get("setup"):  # imports only (judge.imports_only); other setup never comes here
            _exec(_compile(req["setup"], "<setup>", "exec"), ns)
    except BaseException as e:
        emit({"load": "error", "error": _describe(e)})
        return
    entry = req.get("entry") or ""
    if entry and entry in ns and "candidate" not in ns:
        ns["candidate"] = ns[entry]
    emit({"load": "ok"})
    for i, holes in req["items"]:
        values = []
        for src in holes:
            try:
                values.append(_encode(_eval(_compile(src, "<test>", "eval"), ns)))
            except _Unsupported as e:
                emit({"i": i, "unsupported": str(e)})
                break
            except BaseException as e:
                emit({"i": i, "error": _describe(e)})
                break
        else:
            emit({"i": i, "values": values})
    if req.get("serve"):
        _serve(ns, 4, 5)


def _serve(ns, calls_fd, answers_fd):
    """Answer the evaluator child's calls on the program's names until it hangs up.

    Requests: ``[op, ref, ...]`` with op ``call`` (args, kwargs), ``get`` (attribute name)
    or ``set`` (attribute name, value); ref ``["n", name]`` or ``["h", k]``. Answers:
    ``{"v": value}``, ``{"h": k}`` for a value that is not plain data (kept here, the
    evaluator holds only its number), or ``{"e": [type, message]}``. The first answer,
    unasked, lists the program's names.
    """
    handles = []

    def answer(obj):
        data = (_dumps(obj) + "\n").encode("utf-8", "surrogatepass")
        while data:
            data = data[_write(answers_fd, data) :]

    def wrap(v):
        try:
            return {"v": _encode(v)}
        except _Unsupported:
            handles.append(v)
            return {"h": _len(handles) - 1}

    def resolve(ref):
        kind, key = ref
        return ns[key] if kind == "n" else handles[key]

    names = {}
    for name, v in list(ns.items()):
        if not name.startswith("__"):
            t = _type(v)
            names[name] = (
                ["m", v.__name__] if t is _Module else ["c"] if _callable(v) else ["x", wrap(v)]
            )
    answer({"names": names})
    for line in _open(calls_fd, "rb", closefd=False):
        try:
            op, ref, *rest = _loads(line)
            target = resolve(ref)
            if op == "call":
                args, kwargs = decode(rest[0], resolve), decode(rest[1], resolve)
                out = wrap(target(*args, **kwargs))
            elif op == "get":
                out = wrap(_getattr(target, rest[0]))
            else:
                _setattr(target, rest[0], decode(rest[1], resolve))
                out = {"v": None}
        except BaseException as e:
            out = {"e": _describe(e)}
        answer(out)


def run_job(req, result_fd):
    """Entry point in the sandbox child. Writes JSON lines to result_fd, then returns."""
    dumps, write = _dumps, _write

    def emit(obj):
        data = (dumps(obj) + "\n").encode("utf-8", "surrogatepass")
        while data:
            data = data[write(result_fd, data) :]

    builtins.exit = builtins.quit = _exit  # -S leaves these undefined; programs call them
    try:
        sys.set_int_max_str_digits(0)
    except AttributeError:
        pass
    try:
        compiled = _compile(req["code"], "<solution>", "exec")
    except (SyntaxError, ValueError) as e:
        emit({"load": "syntax", "error": _describe(e), "line": getattr(e, "lineno", None)})
        return
    except BaseException as e:  # MemoryError / RecursionError from a pathological source
        emit({"load": "error", "error": _describe(e)})
        return
    if req.get("mode") == "stdio":
        emit({"load": "ok"})
        _run_stdio(compiled, req["items"], emit, req.get("out_cap", 65536))
    else:
        _run_function(compiled, req, emit)
    emit({"done": True})
