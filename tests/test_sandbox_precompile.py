"""The parent compiles a job's program and holes once; the child runs those code objects only
where its bytecode is the parent's, and a program means what it would compiled in the child."""

from __future__ import annotations

import marshal
import subprocess
import sys

import pytest

from codeloop.config import SandboxConfig
from codeloop.sandbox import ExecJob, judge, make_executor
from codeloop.sandbox.judge import build_request, plan_job


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(backend="local", timeout_s=3.0, workers=1))
    yield ex
    ex.close()


def request_for(code: str, tests: list[str], **kw) -> dict:
    job = ExecJob(code=code, tests=tests, **kw)
    return build_request(job, plan_job(job), 1.0, 64, 1024)["req"]


def test_the_request_carries_code_objects_of_the_program_and_of_every_hole():
    req = request_for("def f(x):\n    return x\n", ["assert f(1) == 1", "assert f(2) == 2"])
    program, setup, holes = marshal.loads(req["pre"])
    assert req["magic"] == judge.MAGIC and setup is None
    assert program.co_filename == "<solution>" and "f" in program.co_names
    assert [[h.co_filename for h in hs] for hs in holes] == [["<test>"], ["<test>"]]


def test_a_program_that_does_not_compile_here_is_left_to_the_child_and_reads_as_a_syntax_error(
    executor,
):
    assert "pre" not in request_for("def f(:\n", ["assert f(1) == 1"])
    r = executor.run(ExecJob(code="def f(:\n", tests=["assert f(1) == 1"]))
    assert r.status == "syntax_error"


def test_a_program_longer_than_the_limit_is_compiled_in_the_child_and_still_judged(executor):
    code = "def f(x):\n    return x\n" + "#" * judge.PRECOMPILE_MAX
    assert "pre" not in request_for(code, ["assert f(1) == 1"])
    assert executor.run(ExecJob(code=code, tests=["assert f(1) == 1"])).status == "passed"


def test_annotations_stay_objects_the_parents_future_import_does_not_reach_the_program(executor):
    code = "def f(x: int):\n    return x\ndef ann():\n    return f.__annotations__['x'].__name__\n"
    r = executor.run(ExecJob(code=code, tests=["assert ann() == 'int'"]))
    assert r.status == "passed", r.test_results[0].message


def test_a_parent_running_with_dash_o_still_keeps_the_programs_asserts():
    probe = (
        "import marshal\n"
        "from codeloop.sandbox import ExecJob\n"
        "from codeloop.sandbox.judge import build_request, plan_job\n"
        "job = ExecJob(code='def f():\\n    assert False, 1\\n', tests=['assert f() is None'])\n"
        "code = marshal.loads(build_request(job, plan_job(job), 1.0, 64, 1024)['req']['pre'])[0]\n"
        "ns = {}\n"
        "exec(code, ns)\n"
        "try:\n"
        "    ns['f']()\n"
        "except AssertionError:\n"
        "    print('kept')\n"
    )
    out = subprocess.run([sys.executable, "-O", "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "kept", out.stderr[-2000:]


def test_a_child_whose_bytecode_differs_compiles_the_sources_and_ignores_the_parents_code(
    executor, monkeypatch
):
    # code objects of another program, marked with a magic number no child has: were they
    # used, f would return 0 and the test would fail
    wrong = marshal.dumps((compile("def f(x):\n    return 0\n", "<solution>", "exec"), None,
                           [[None]]), 4)  # fmt: skip
    monkeypatch.setattr(judge, "MAGIC", b"\x00\x00\r\n")
    monkeypatch.setattr(judge, "precompile", lambda req: wrong)
    r = executor.run(ExecJob(code="def f(x):\n    return x\n", tests=["assert f(5) == 5"]))
    assert r.status == "passed"


def test_a_child_whose_bytecode_is_the_parents_runs_the_parents_code_objects(executor, monkeypatch):
    wrong = marshal.dumps((compile("def f(x):\n    return 0\n", "<solution>", "exec"), None,
                           [[None]]), 4)  # fmt: skip
    monkeypatch.setattr(judge, "precompile", lambda req: wrong)
    r = executor.run(ExecJob(code="def f(x):\n    return x\n", tests=["assert f(5) == 5"]))
    assert r.status == "failed" and r.test_results[0].got == "0"
