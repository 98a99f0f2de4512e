"""Child-side harness: runs ONE job inside the forked, de-privileged sandbox child.

Stdlib only (it runs under Debian's /usr/bin/python3 -I -S, never imports codeloop); the
zygote execs this source once and calls ``run_job`` in every forked child. The child only
ever *evaluates*: for function tasks it returns the plain-data value of each test's "holes"
(the calls the parent cut out of the asserts), for stdio tasks the program's output. It
never sees expected values, so nothing it prints, returns or exits with can fake a pass.
Everything here runs in the same process as the model's code, so the parent treats every
message from it as untrusted data (only values, never verdicts, except in_sandbox checks).
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
_dumps, _write = json.dumps, os.write
_MAX_DEPTH = 64
_MAX_ITEMS = 200_000


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
}  # fmt: skip


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
        if req.get("setup"):
            _exec(_compile(req["setup"], "<setup>", "exec"), ns)
    except BaseException as e:
        emit({"load": "error", "error": _describe(e)})
        return
    entry = req.get("entry") or ""
    if entry and entry in ns and "candidate" not in ns:
        ns["candidate"] = ns[entry]
    emit({"load": "ok"})
    for i, item in enumerate(req["items"]):
        if "stmt" in item:
            try:
                _exec(_compile(item["stmt"], "<test>", "exec"), ns)
                emit({"i": i, "ok": True})
            except BaseException as e:
                emit({"i": i, "error": _describe(e)})
            continue
        values = []
        for src in item["holes"]:
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
