"""The sandbox's verdict on every test of HumanEval and MBPP matches plain Python's.

Plain Python: one ``python3`` process per program runs the solution, the setup code and
then each test in turn in one namespace (as human-eval's and MBPP's harnesses do) and
reports which tests raised. Each canonical solution and a broken variant of it (every
top-level function rebound to return a sentinel) go through both, test by test. The only
difference allowed: a float compared by ``==`` within the sandbox's tolerance.

    .venv/bin/python tests/test_sandbox_agreement.py   # prints the agreement counts
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from codeloop.config import SandboxConfig
from codeloop.data.loaders import load_humaneval, load_mbpp
from codeloop.sandbox import ExecJob, make_executor
from codeloop.sandbox.verdicts import plan_job

MBPP = Path(__file__).resolve().parents[2] / "shared" / "data" / "mbpp.jsonl"
TIMEOUT = 30.0  # mbpp/123's reference needs ~15 s on one loaded core

PLAIN = """
import json, sys
job = json.loads(sys.stdin.read())
ns = {"__name__": "__main__"}
exec(job["code"], ns)
exec(job["setup"], ns)
out = []
for t in job["tests"]:
    try:
        exec(t, ns)
        out.append(True)
    except BaseException:
        out.append(False)
print(json.dumps(out))
"""


def broken(code: str) -> str:
    """The program with every top-level function rebound to return a sentinel tuple."""
    names = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    return code + "".join(f"\ndef {n}(*a, **k):\n    return ('broken', {n!r})\n" for n in names)


def plain_verdicts(job: ExecJob) -> list[bool]:
    """Per-test verdicts of plain Python (a program that fails to load fails every test)."""
    payload = json.dumps({"code": job.code, "setup": job.setup_code, "tests": job.tests})
    try:
        p = subprocess.run(["/usr/bin/python3", "-c", PLAIN], input=payload, text=True,
                           capture_output=True, timeout=TIMEOUT)
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return [False] * len(job.tests)


def jobs_of(tasks) -> list[tuple[str, ExecJob]]:
    out = []
    for t in tasks:
        for label, code in (
            ("canonical", t.reference_solution),
            ("broken", broken(t.reference_solution)),
        ):
            job = ExecJob(code=code, tests=t.all_tests(), setup_code=t.setup_code,
                          entry_point=t.entry_point, timeout_s=TIMEOUT)
            out.append((f"{t.task_id} {label}", job))
    return out


def compare(tasks) -> tuple[Counter, list[str]]:
    """(counts of agreeing / differing tests by plan kind, the differences)."""
    jobs = jobs_of(tasks)
    ex = make_executor(SandboxConfig(backend="local", workers=2, timeout_s=TIMEOUT))
    try:
        ours = ex.run_many([j for _, j in jobs])
    finally:
        ex.close()
    with ThreadPoolExecutor(2) as pool:
        plain = list(pool.map(plain_verdicts, [j for _, j in jobs]))
    counts, diffs = Counter(), []
    for (name, job), res, ref in zip(jobs, ours, plain, strict=True):
        for plan, tr, want in zip(plan_job(job), res.test_results, ref, strict=True):
            agree = tr.passed == want
            counts[(plan.kind, "agree" if agree else "differ")] += 1
            if not agree:
                diffs.append(f"{name}: {plan.kind} {tr.test[:100]!r} sandbox {tr.status} "
                             f"{tr.message[:100]!r} plain {want}")
    return counts, diffs


def _report(name: str, counts: Counter, diffs: list[str]) -> None:
    total = sum(counts.values())
    agree = sum(v for (_, k), v in counts.items() if k == "agree")
    print(f"{name}: {agree}/{total} tests agree with plain Python; by kind {dict(counts)}")
    for d in diffs[:20]:
        print("  differs:", d)


def test_every_humaneval_test_gets_plain_pythons_verdict_on_canonical_and_broken_code():
    counts, diffs = compare(load_humaneval().tasks)
    _report("HumanEval", counts, diffs)
    assert counts[("eval", "agree")] > 0 and not diffs


@pytest.mark.slow
@pytest.mark.skipif(not MBPP.exists(), reason=f"{MBPP} not present")
def test_every_mbpp_test_gets_plain_pythons_verdict_on_canonical_and_broken_code():
    counts, diffs = compare(load_mbpp(str(MBPP)).tasks)
    _report("MBPP", counts, diffs)
    assert counts[("eval", "agree")] > 0 and not diffs


if __name__ == "__main__":
    _report("HumanEval", *compare(load_humaneval().tasks))
    if MBPP.exists():
        _report("MBPP", *compare(load_mbpp(str(MBPP)).tasks))
    sys.exit(0)
