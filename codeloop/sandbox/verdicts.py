"""Trusted verdicts: turn a job into child requests and the children's raw reports into a result.

Two processes judge a function task, forked side by side by the zygote for each job:

- the *model child* runs the program. It gets only what the program must see: the code and,
  for each split test (split.py), its holes (``f(3)`` of ``assert f(3) == 9``). It sends
  back the holes' values as plain data; this module decodes them to exact stdlib types and
  runs the check itself. Then it stays alive answering the evaluator's calls.
- the *evaluator child* (evaluator.py) judges every other test (loops, several statements,
  ``f(a) == f(b)``, ``all(f(i) == i + 1 for i in ...)``, setup code) and never runs model
  code: the program's names are proxies there, whose calls travel as plain data to the model
  child and come back as plain data (exact stdlib types) or opaque handle numbers. Its
  frame, holding the tests and so the expected values, goes from us through the zygote's
  control pipe to the evaluator alone: the zygote never reads it, so the model child, forked
  from the zygote, never has it in memory either. Verdicts come back on a pipe only the
  evaluator holds.

Why no channel can lie: the only lines we take as a pass are (a) a check this module ran on
values, and a value is just the program's answer (faking its line is the same as returning
it); (b) an ``ok`` from the evaluator's own pipe, which no process running model code holds
(once forked, the model child keeps fds 0-5 only: the verdict pipe's write end is closed
in it before any model code runs; and the evaluator is non-dumpable, so a process of the
same uid cannot ptrace it nor open its /proc fds or memory). What the model child writes on any fd it has (its result pipe, its
answer pipe) is at most its own answer to a call; it cannot see what an answer is checked
against. Malformed lines are ignored, exit codes, stdout and stderr are never evidence of a
pass, and a missing verdict is a failure.
"""

from __future__ import annotations

import ast
import json
import marshal
import signal
import struct
from functools import lru_cache
from typing import Any

from codeloop.sandbox.base import ExecJob, ExecResult, SandboxError, TestResult
from codeloop.sandbox.split import Plan, evaluate_check, plan_test, shadowed_names
from codeloop.sandbox.values import BadValue, decode, output_matches, short_repr

RESULT_CAP = 8 * 2**20  # bytes of result lines a child may send back
WALL_CAP_FACTOR = 10.0  # hard wall cap = factor x timeout + 1 s (see wall_cap)


def wall_cap(timeout_s: float) -> float:
    """The hard wall-clock cap of a job whose time budget is ``timeout_s``.

    The budget itself is charged in CPU seconds of the job's processes and in time the job
    spent neither running nor waiting for a CPU (sleeping, blocked); time spent waiting for
    a CPU on a loaded host is not charged, so load cannot turn a correct program into a
    timeout. This cap bounds what that leaves open (a job starved of CPU for minutes).
    """
    return timeout_s * WALL_CAP_FACTOR + 1.0


_ERROR_STATUS = {"MemoryError": "memory_limit", "RecursionError": "runtime_error"}


@lru_cache(maxsize=4096)
def imports_only(setup: str) -> bool:
    """Whether setup code is only imports (MBPP's test_imports): nothing a test checks
    against, so the model child may run it too and the tests still split."""
    try:
        body = ast.parse(setup).body
    except (SyntaxError, ValueError):
        return False
    return all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in body)


def plan_job(job: ExecJob) -> list[Plan]:
    """One plan per test. With setup code other than imports every test is ``eval``: the
    setup (fixtures, sometimes expected values, e.g. HumanEval/151's ``odd_sum``) runs in
    the evaluator only."""
    if job.io_style != "stdio" and job.setup_code.strip() and not imports_only(job.setup_code):
        return [Plan(kind="eval", source=t) for t in job.tests]
    shadow = shadowed_names(job.code, job.entry_point + "=" if job.entry_point else "")
    return [plan_test(t, job.io_style, shadow) for t in job.tests]


def build_request(
    job: ExecJob, plans: list[Plan], timeout_s: float, memory_mb: int, out_cap: int
) -> dict:
    """The job for the zygote. ``req`` (the model child's) holds only hole expressions or
    stdin, never an expected value; ``evaluator`` (if any test needs it) is the evaluator's
    own frame, which ``wire`` sends after the zygote's and the zygote never reads."""
    judged: list[list] = []
    if job.io_style == "stdio":
        items: list[Any] = [p.stdin for p in plans]
    else:
        items = [[i, list(p.holes)] for i, p in enumerate(plans) if p.kind == "holes"]
        judged = [[i, p.source] for i, p in enumerate(plans) if p.kind == "eval"]
    setup = job.setup_code if job.io_style != "stdio" and imports_only(job.setup_code) else ""
    req = {"code": job.code, "setup": setup, "entry": job.entry_point, "mode": job.io_style,
           "items": items, "out_cap": out_cap, "serve": bool(judged)}
    out = {"req": req, "timeout": timeout_s, "wall_cap": wall_cap(timeout_s),
           "memory_mb": memory_mb, "out_cap": out_cap, "result_cap": RESULT_CAP}
    if judged:
        out["evaluator"] = {"setup": job.setup_code, "entry": job.entry_point, "tests": judged}
    return out


def _frame(obj: dict) -> bytes:
    """A zygote frame: 4-byte length + marshal (see zygote.recv for why not JSON)."""
    data = marshal.dumps(obj, 4)
    return struct.pack(">I", len(data)) + data


def wire(request: dict) -> bytes:
    """The bytes a zygote is sent for one job: its frame, then the evaluator's (if any)."""
    head = {k: v for k, v in request.items() if k != "evaluator"}
    tail = request.get("evaluator")
    return _frame(head) + (_frame(tail) if tail is not None else b"")


def _parse_lines(text: str, n: int) -> tuple[dict | None, dict[int, dict], bool, str]:
    """(load line, first line per test index, done seen, fault) of one child's stream."""
    load, tests, done, fault = None, {}, False, ""
    for line in text.splitlines():
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):  # a child's line nested 100k deep
            continue
        if not isinstance(msg, dict):
            continue
        if "load" in msg and load is None:
            load = msg
        elif msg.get("done") is True:
            done = True
        elif "fault" in msg:
            fault = str(msg["fault"])[:2000]
        elif type(msg.get("i")) is int and 0 <= msg["i"] < n and msg["i"] not in tests:
            tests[msg["i"]] = msg
    return load, tests, done, fault


def _error_fields(msg: dict) -> tuple[str, str]:
    err = msg.get("error")
    if isinstance(err, list) and len(err) == 2:
        return str(err[0])[:200], str(err[1])[:2000]
    return "Error", "malformed error report"


def _judge_function(plan: Plan, msg: dict, idx: int) -> TestResult:
    tr = TestResult(index=idx, passed=False, status="failed", test=plan.source,
                    expected=plan.expected_src)
    if "error" in msg:
        tr.error_type, tr.message = _error_fields(msg)
        if tr.error_type == "AssertionError" and plan.kind == "eval":
            return tr
        tr.status = _ERROR_STATUS.get(tr.error_type, "runtime_error")
        return tr
    if "unsupported" in msg:
        tr.message = f"returned value rejected: {str(msg['unsupported'])[:300]}"
        return tr
    if plan.kind == "eval":  # (msg is from the evaluator's stream: see interpret)
        tr.passed = msg.get("ok") is True
    else:
        raw = msg.get("values")
        try:
            if not isinstance(raw, list) or len(raw) != len(plan.holes):
                raise BadValue("wrong number of values")
            values = [decode(v) for v in raw]
            tr.passed = evaluate_check(plan, values)
            tr.got = short_repr(values[0]) if len(values) == 1 else short_repr(values)
            if len(values) == 1:
                tr.value = values[0]
        except (BadValue, RecursionError, MemoryError) as exc:
            tr.message = f"unusable value from the child: {exc}"
        except Exception as exc:  # the check itself raised on the returned value
            tr.error_type, tr.message = type(exc).__name__, str(exc)[:500]
    tr.status = "passed" if tr.passed else "failed"
    return tr


def _judge_stdio(plan: Plan, msg: dict, idx: int) -> TestResult:
    tr = TestResult(index=idx, passed=False, status="failed", test=plan.source)
    out = msg.get("out")
    if not isinstance(out, str):
        tr.message = "malformed output report"
        return tr
    tr.got = out[:200]
    if msg.get("truncated"):
        tr.status, tr.message = "output_limit", "output exceeded the cap"
    elif msg.get("signal") is not None or msg.get("exit") != 0:
        sig = msg.get("signal")
        tr.status = "timeout" if sig == signal.SIGXCPU else "runtime_error"
        tr.message = (
            f"killed by signal {sig}" if sig is not None else f"exit code {msg.get('exit')}"
        )
    elif output_matches(out, plan.expected_output):
        tr.passed, tr.status = True, "passed"
    return tr


_DEADLINES = {
    "cpu": "CPU time budget spent",
    "time": "time budget spent (time waiting for a CPU not counted)",
    "wall": "hard wall-clock cap reached",
}


def _missing_status(resp: dict) -> tuple[str, str]:
    """Why a test has no result: what happened to the child process decides."""
    sig = resp.get("signal")
    if resp.get("over"):
        return "output_limit", f"output over the cap on {', '.join(resp['over'])}"
    if resp.get("timed_out"):
        return "timeout", _DEADLINES.get(resp.get("deadline"), "time limit reached")
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and resp.get("cpu_rlimit")):
        return "timeout", "CPU time limit of a process reached"
    if resp.get("oom_killed"):
        return "memory_limit", "memory budget of the job (all its processes) exceeded: OOM-killed"
    if sig == signal.SIGXFSZ:
        return "output_limit", "file size limit reached"
    if sig is not None:
        return (
            "crashed",
            f"killed by signal {sig} ({signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else '?'})",
        )
    return "crashed", f"exited with code {resp.get('exit')} before reporting"


def interpret(job: ExecJob, plans: list[Plan], resp: dict) -> ExecResult:
    """Zygote response -> ExecResult. Raises SandboxError on a fault of our own."""
    if "fault" in resp:
        raise SandboxError(f"sandbox fault: {resp['fault']}")
    n = len(plans)
    load, values, done, _ = _parse_lines(resp.get("results", ""), n)
    _, verdicts, judged, fault = _parse_lines(resp.get("verdicts", ""), n)
    if fault:
        raise SandboxError(f"sandbox fault: {fault}")
    # each test's line from the one stream allowed to speak for it; "ok" only from the
    # evaluator's, values only from the model child's
    evals = [i for i, p in enumerate(plans) if p.kind == "eval"]
    msgs = {i: m for i, m in values.items() if plans[i].kind != "eval"}
    msgs.update((i, verdicts[i]) for i in evals if i in verdicts and "gone" not in verdicts[i])
    done = done and (judged or not evals)  # every child that had tests finished
    res = ExecResult(status="passed", tests_total=n, stdout=resp.get("stdout", ""),
                     stderr=resp.get("stderr", ""), duration_ms=float(resp.get("wall_ms", 0.0)))
    if load is None or load.get("load") != "ok":
        status, message = _missing_status(resp)
        if load is not None:
            res.error_type, message = _error_fields(load)
            status = (
                "syntax_error"
                if load.get("load") == "syntax"
                else _ERROR_STATUS.get(res.error_type, "runtime_error")
            )
        res.status, res.error_message = status, message
        res.test_results = [
            TestResult(i, False, status, test=p.source) for i, p in enumerate(plans)
        ]
        res.failing_test = plans[0].source if plans else ""
        return res
    missing_status, missing_msg = _missing_status(resp)
    for i, plan in enumerate(plans):
        if i in msgs:
            judge = _judge_stdio if plan.kind == "stdio" else _judge_function
            res.test_results.append(judge(plan, msgs[i], i))
        else:
            gone = verdicts.get(i, {}).get("gone") if plan.kind == "eval" else None
            message = f"{missing_msg} (evaluator: {str(gone)[:300]})" if gone else missing_msg
            res.test_results.append(TestResult(i, False, missing_status, test=plan.source,
                                               message=message))
    res.tests_passed = sum(t.passed for t in res.test_results)
    first_bad = next((t for t in res.test_results if not t.passed), None)
    if first_bad is not None:
        res.status, res.failing_test = first_bad.status, first_bad.test
        res.error_type, res.error_message = first_bad.error_type, first_bad.message
    elif any(resp.get(k) for k in ("over", "timed_out", "oom_killed")) or (n == 0 and not done):
        res.status, res.error_message = missing_status, missing_msg
    return res


def no_code_result(job: ExecJob) -> ExecResult:
    tests = [TestResult(i, False, "no_code", test=t) for i, t in enumerate(job.tests)]
    return ExecResult(status="no_code", tests_total=len(job.tests), test_results=tests,
                      failing_test=job.tests[0] if job.tests else "", error_message="no code")
