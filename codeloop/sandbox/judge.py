"""Trusted verdicts: turn a job into a child request and the child's raw report into a result.

Everything the child sends is untrusted: malformed lines are ignored, values are decoded to
exact stdlib types and compared here. Exit codes, stdout and stderr are never evidence of a
pass; a test passes only when this module saw its value and the check held.
"""

from __future__ import annotations

import json
import signal
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


def plan_job(job: ExecJob) -> list[Plan]:
    shadow = shadowed_names(
        job.code, job.setup_code, job.entry_point + "=" if job.entry_point else ""
    )
    return [plan_test(t, job.io_style, shadow) for t in job.tests]


def build_request(
    job: ExecJob, plans: list[Plan], timeout_s: float, memory_mb: int, out_cap: int
) -> dict:
    """The message for the zygote: only hole expressions / inputs, never expected values."""
    if job.io_style == "stdio":
        items: list[Any] = [p.stdin for p in plans]
    else:
        items = [
            {"holes": list(p.holes)} if p.kind == "holes" else {"stmt": p.source} for p in plans
        ]
    req = {"code": job.code, "setup": job.setup_code, "entry": job.entry_point,
           "mode": job.io_style, "items": items, "out_cap": out_cap}  # fmt: skip
    return {"req": req, "timeout": timeout_s, "wall_cap": wall_cap(timeout_s),
            "memory_mb": memory_mb, "out_cap": out_cap, "result_cap": RESULT_CAP}  # fmt: skip


def _parse_lines(text: str, n: int) -> tuple[dict | None, dict[int, dict], bool]:
    load, tests, done = None, {}, False
    for line in text.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if "load" in msg and load is None:
            load = msg
        elif msg.get("done") is True:
            done = True
        elif type(msg.get("i")) is int and 0 <= msg["i"] < n and msg["i"] not in tests:
            tests[msg["i"]] = msg
    return load, tests, done


def _error_fields(msg: dict) -> tuple[str, str]:
    err = msg.get("error")
    if isinstance(err, list) and len(err) == 2:
        return str(err[0])[:200], str(err[1])[:2000]
    return "Error", "malformed error report"


def _judge_function(plan: Plan, msg: dict, idx: int) -> TestResult:
    tr = TestResult(index=idx, passed=False, status="failed", test=plan.source,
                    in_sandbox=plan.in_sandbox, expected=plan.expected_src)  # fmt: skip
    if "error" in msg:
        tr.error_type, tr.message = _error_fields(msg)
        if tr.error_type == "AssertionError" and plan.kind == "stmt":
            return tr
        tr.status = _ERROR_STATUS.get(tr.error_type, "runtime_error")
        return tr
    if "unsupported" in msg:
        tr.message = f"returned value rejected: {str(msg['unsupported'])[:300]}"
        return tr
    if plan.kind == "stmt":
        tr.passed = msg.get("ok") is True
    else:
        raw = msg.get("values")
        try:
            if not isinstance(raw, list) or len(raw) != len(plan.holes):
                raise BadValue("wrong number of values")
            values = [decode(v) for v in raw]
            tr.passed = evaluate_check(plan, values)
            tr.got = short_repr(values[0]) if len(values) == 1 else short_repr(values)
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
        return "memory_limit", "killed by the OOM killer of the job's container"
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
    load, msgs, done = _parse_lines(resp.get("results", ""), n)
    res = ExecResult(status="passed", tests_total=n, stdout=resp.get("stdout", ""),
                     stderr=resp.get("stderr", ""), duration_ms=float(resp.get("wall_ms", 0.0)))  # fmt: skip
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
            TestResult(i, False, status, test=p.source, in_sandbox=p.in_sandbox)
            for i, p in enumerate(plans)
        ]
        res.failing_test = plans[0].source if plans else ""
        return res
    missing_status, missing_msg = _missing_status(resp)
    for i, plan in enumerate(plans):
        if i in msgs:
            judge = _judge_stdio if plan.kind == "stdio" else _judge_function
            res.test_results.append(judge(plan, msgs[i], i))
        else:
            res.test_results.append(TestResult(i, False, missing_status, test=plan.source,
                                               message=missing_msg, in_sandbox=plan.in_sandbox))  # fmt: skip
    res.tests_passed = sum(t.passed for t in res.test_results)
    first_bad = next((t for t in res.test_results if not t.passed), None)
    if first_bad is not None:
        res.status, res.failing_test = first_bad.status, first_bad.test
        res.error_type, res.error_message = first_bad.error_type, first_bad.message
    elif resp.get("over") or resp.get("timed_out") or (n == 0 and not done):
        res.status, res.error_message = missing_status, missing_msg
    return res


def no_code_result(job: ExecJob) -> ExecResult:
    tests = [TestResult(i, False, "no_code", test=t) for i, t in enumerate(job.tests)]
    return ExecResult(status="no_code", tests_total=len(job.tests), test_results=tests,
                      failing_test=job.tests[0] if job.tests else "", error_message="no code")  # fmt: skip
