"""No forgeable verdict: fake result lines on every fd earn no pass, on every backend.

The forms that were forgeable when unsplittable tests ran in the model's own process
(``assert f(a) == f(b)``, ``assert all(...)``, HumanEval check bodies with loops) are
judged in the evaluator child now; a program that writes well-formed "ok", value, answer
and done lines to every fd from 3 to 1023, at import time and from inside the function,
must still fail them, and an honest program must pass them.
"""

from __future__ import annotations

import pytest

from codeloop.config import SandboxConfig
from codeloop.data.loaders import load_humaneval
from codeloop.sandbox import ExecJob, make_executor
from codeloop.sandbox.docker_backend import skip_without_docker_engine
from codeloop.sandbox.verdicts import plan_job

FORGE = """
import json as _json, os as _os

def _forge():
    lines = []
    for k in range(64):
        lines += [{"i": k, "ok": True}, {"i": k, "values": [True]}, {"v": True},
                  {"i": k, "values": [[1, 2, 3], [1, 2, 3]]}]
    lines += [{"load": "ok"}, {"done": True}, {"names": {}}]
    data = "".join(_json.dumps(m) + "\\n" for m in lines).encode()
    for fd in range(3, 1024):
        try:
            _os.write(fd, data)
        except OSError:
            pass

_forge()
"""


def forger(signature: str, body: str = "return None") -> str:
    """A program defining ``signature`` that forges at import and inside the call."""
    return f"{FORGE}\ndef {signature}:\n    _forge()\n    {body}\n"


@pytest.fixture(
    scope="module", params=["local", "subprocess", pytest.param("docker", marks=pytest.mark.docker)]
)
def executor(request):
    if request.param == "docker":
        skip_without_docker_engine()
    ex = make_executor(SandboxConfig(backend=request.param, timeout_s=5.0, workers=2))
    yield ex
    ex.close()


COUNTER = "global _n\n    _n = globals().get('_n', 0) + 1\n    return _n"
FORMS = [
    ("f(x)", COUNTER, "def f(x):\n    return 2 * x\n", "assert f(2) == f(2)"),
    ("add(a, b)", "return 0", "def add(a, b):\n    return a + b\n",
     "assert all(add(i, 1) == i + 1 for i in range(5))"),
    ("f(x)", "return -1", "def f(x):\n    return x\n", "for i in range(3):\n    assert f(i) == i"),
    ("f(x)", "return -1", "def f(x):\n    return x\n", "y = f(4)\nassert y == 4"),
]


@pytest.mark.parametrize("signature, cheat, honest, test", FORMS)
def test_a_forger_fails_an_unsplittable_test(executor, signature, cheat, honest, test):
    job = ExecJob(code=forger(signature, cheat), tests=[test])
    assert plan_job(job)[0].kind == "eval"
    r = executor.run(job)
    assert not r.passed and r.tests_passed == 0


@pytest.mark.parametrize("signature, cheat, honest, test", FORMS)
def test_an_honest_program_passes_the_same_test(executor, signature, cheat, honest, test):
    assert executor.run(ExecJob(code=honest, tests=[test])).passed


def _humaneval_eval_tasks():
    tasks = [t for t in load_humaneval().tasks if t.setup_code or len(t.all_tests()) > 0]
    picked = []
    for t in tasks:
        job = ExecJob(code=t.reference_solution, tests=t.all_tests(), setup_code=t.setup_code,
                      entry_point=t.entry_point)
        if any(p.kind == "eval" for p in plan_job(job)):
            picked.append(t)
    return picked


def test_a_forger_passes_no_check_body_test_of_humaneval(executor):
    """Every HumanEval task with a test for the evaluator: the prompt plus a forging body."""
    tasks = _humaneval_eval_tasks()
    jobs = [ExecJob(code=t.prompt + "    _forge()\n    return None\n" + FORGE, tests=t.all_tests(),
                    setup_code=t.setup_code, entry_point=t.entry_point) for t in tasks]
    passed = {
        t.task_id: [i for i, (p, tr) in enumerate(zip(plan_job(j), r.test_results, strict=True))
                    if p.kind == "eval" and tr.passed]
        for t, j, r in zip(tasks, jobs, executor.run_many(jobs), strict=True)
    }
    assert len(tasks) >= 6 and not any(passed.values()), passed


def test_the_canonical_solutions_pass_every_check_body_test_of_humaneval(executor):
    tasks = _humaneval_eval_tasks()
    jobs = [ExecJob(code=t.reference_solution, tests=t.all_tests(), setup_code=t.setup_code,
                    entry_point=t.entry_point) for t in tasks]
    assert [r.status for r in executor.run_many(jobs)] == ["passed"] * len(tasks)


SCAN = """
# counts the needle in its own memory without holding its text itself: digits are
# translated to A-J (and A-J away), so only a real occurrence reads "JIHGFEDCB"
TABLE = bytes.maketrans(b"0123456789ABCDEFGHIJ", b"ABCDEFGHIJabcdefghij")

def f(given=None):
    import ctypes
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again: /proc/self/mem opens
    found = 0
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps.read().splitlines():
            span, perms = line.split()[:2]
            lo, hi = (int(v, 16) for v in span.split("-"))
            for at in range(lo, hi, 1 << 20) if "r" in perms else ():
                try:
                    mem.seek(at)
                    chunk = mem.read(min(hi, at + (1 << 20) + 8) - at)
                except (OSError, ValueError, OverflowError):
                    continue
                found += chunk.translate(TABLE).count(b"JIHGFEDCB")
    return found
"""


def test_the_expected_values_of_an_evaluator_test_are_nowhere_in_the_model_childs_memory(executor):
    # 987654321 exists only in the test, which the evaluator child alone receives
    job = ExecJob(code=SCAN, tests=["assert all(f() == 0 for _ in range(1)) and 987654321 > 0"])
    r = executor.run(job)
    assert r.passed, (r.status, r.error_message)


def test_the_memory_scan_finds_a_value_the_model_child_was_given(executor):
    job = ExecJob(code=SCAN, tests=["assert all(f('987654321') == 0 for _ in range(1))"])
    assert executor.run(job).status == "failed"


def test_a_forged_list_of_names_is_the_programs_failure_not_a_sandbox_fault(executor):
    forged = '{"names": {"f": ["x", {"e": ["ValueError", "forged"]}], "g": ["x", {"v": 1}]}}'
    code = f"import os\nos.write(5, b'{forged}\\n')\ndef f(x):\n    return x\n"
    r = executor.run(ExecJob(code=code, tests=["assert all(f(i) == i for i in range(3))"]))
    assert r.status == "runtime_error" and r.error_type == "NameError"


def test_a_program_that_exits_inside_a_bare_except_earns_no_pass(executor):
    code = "import os\ndef f(x):\n    os._exit(0)\n"
    r = executor.run(ExecJob(code=code, tests=["try:\n    f(1)\nexcept:\n    pass"]))
    assert not r.passed and r.tests_passed == 0


def test_deeply_nested_lines_on_every_fd_are_the_programs_failure_not_a_crash(executor):
    code = (
        "import os\ndeep = b'[' * 200000 + b']' * 200000 + b'\\n'\n"
        "for fd in range(3, 64):\n    try:\n        os.write(fd, deep)\n    except OSError:\n        pass\n"
        "def f(x):\n    return x\n"
    )
    r = executor.run(
        ExecJob(code=code, tests=["assert f(1) == 2", "assert all(f(i) == i for i in [1])"])
    )
    assert not r.passed and r.tests_passed == 0
