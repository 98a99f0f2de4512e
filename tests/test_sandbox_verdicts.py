"""Trusted verdicts: the parent decides, on values the child returns, for every backend."""

from __future__ import annotations

import json
import struct

import pytest

from codeloop.config import SandboxConfig
from codeloop.sandbox import ExecJob, make_executor
from codeloop.sandbox.docker_backend import skip_without_docker_engine
from codeloop.sandbox.split import plan_test
from codeloop.sandbox.verdicts import build_request, plan_job, wire


@pytest.fixture(
    scope="module", params=["local", "subprocess", pytest.param("docker", marks=pytest.mark.docker)]
)
def executor(request):
    if request.param == "docker":
        skip_without_docker_engine()
    ex = make_executor(SandboxConfig(backend=request.param, timeout_s=3.0, workers=2))
    yield ex
    ex.close()


def run(ex, code, tests, **kw):
    return ex.run(ExecJob(code=code, tests=tests, **kw))


def test_a_correct_function_passes_every_test(executor):
    r = run(executor, "def f(x):\n    return x * 2\n", ["assert f(1) == 2", "assert f(3) == 6"])
    assert (r.status, r.tests_passed, r.tests_total) == ("passed", 2, 2)


def test_a_wrong_answer_fails_and_names_the_test_with_got_and_expected(executor):
    r = run(executor, "def f(x):\n    return x + 1\n", ["assert f(1) == 2", "assert f(3) == 6"])
    assert r.status == "failed" and r.tests_passed == 1
    assert r.failing_test == "assert f(3) == 6"
    assert (r.test_results[1].got, r.test_results[1].expected) == ("4", "6")


def test_expected_values_are_not_in_the_request_sent_to_the_child():
    job = ExecJob(code="def f(x): return x", tests=["assert f(1) == 987654321"])
    request = build_request(job, plan_job(job), 1.0, 64, 1024)
    assert "987654321" not in json.dumps(request) and "f(1)" in json.dumps(request)


def test_a_test_for_the_evaluator_is_only_in_the_frame_the_zygote_never_reads():
    job = ExecJob(code="def f(x): return x", tests=["assert all(f(i) != 987654321 for i in [1])"])
    request = build_request(job, plan_job(job), 1.0, 64, 1024)
    size = struct.unpack(">I", wire(request)[:4])[0]
    assert b"987654321" not in wire(request)[4 : 4 + size]
    assert "987654321" in json.dumps(request["evaluator"])


def test_the_child_cannot_find_the_expected_value_in_its_memory(executor):
    code = (
        "import gc\n"
        "def f(x):\n"
        "    found = any(isinstance(o, str) and '424242' in o for o in gc.get_objects())\n"
        "    return 424242 if found else -1\n"
    )
    r = run(executor, code, ["assert f(1) == 424242"])
    assert r.status == "failed" and r.test_results[0].got == "-1"


def test_stdlib_types_are_compared_by_their_exact_type(executor):
    code = (
        "from collections import Counter, OrderedDict, deque, defaultdict\n"
        "def c(s): return Counter(s)\n"
        "def o(): return OrderedDict([(1, 2), (3, 4)])\n"
        "def q(): return deque([1, 2])\n"
        "def d(): x = defaultdict(list); x[1].append(2); return x\n"
        "def z(): return complex(1, 2)\n"
        "def s(): return {1, 2}, frozenset({3})\n"
    )
    tests = [
        "assert c('aab') == Counter({'a': 2, 'b': 1})",
        "assert o() == OrderedDict([(1, 2), (3, 4)])",
        "assert q() == deque([1, 2])",
        "assert d() == {1: [2]}",
        "assert z() == (1+2j)",
        "assert s() == ({1, 2}, frozenset({3}))",
        "assert q() == [1, 2]",
        "assert o() == OrderedDict([(3, 4), (1, 2)])",
    ]
    r = run(executor, code, tests)
    assert [t.passed for t in r.test_results] == [True] * 6 + [False, False]


def test_a_tuple_is_not_equal_to_a_list(executor):
    r = run(executor, "def f(): return (1, 2)", ["assert f() == [1, 2]"])
    assert r.status == "failed"


def test_floats_compare_with_a_tolerance(executor):
    r = run(executor, "def f(): return 0.1 + 0.2", ["assert f() == 0.3", "assert f() == 0.31"])
    assert [t.passed for t in r.test_results] == [True, False]


def test_setup_code_runs_after_the_program_and_before_the_tests(executor):
    code = "class Node:\n    def __init__(self, v): self.v = v\ndef val(n): return n.v\n"
    r = ExecJob(code=code, tests=["assert val(root) == 7"], setup_code="root = Node(7)")
    assert executor.run(r).status == "passed"


def test_asserts_that_cannot_be_split_pass_with_correct_code(executor):
    code = "def f(x): return x\ndef g(x): return x\n"
    r = run(executor, code, ["assert f(2) == g(2)", "for i in range(3): assert f(i) == i"])
    assert (r.status, r.tests_passed) == ("passed", 2)


def test_asserts_that_cannot_be_split_fail_with_wrong_code(executor):
    code = "def f(x): return x\ndef g(x): return x + 1\n"
    r = run(executor, code, ["assert f(2) == g(2)", "for i in range(3): assert g(i) == i"])
    assert [t.status for t in r.test_results] == ["failed", "failed"]


def test_an_honest_add_passes_an_all_over_a_generator(executor):
    r = run(
        executor,
        "def add(a, b): return a + b",
        ["assert all(add(i, 1) == i + 1 for i in range(5))"],
    )
    assert r.status == "passed"


def test_a_split_assert_is_planned_as_a_hole_checked_here():
    plan = plan_test("assert abs(candidate(1.5) - 2.0) < 1e-6")
    assert (plan.kind, plan.holes) == ("holes", ("candidate(1.5)",))


@pytest.mark.parametrize(
    "test",
    [
        "assert f(2) == f(3)",
        "assert all(f(i) == i + 1 for i in range(5))",
        "assert [f(i) == 1 for i in range(2)] == [True, True]",
        "for i in range(3): assert f(i) == i",
        "x = f(1)\nassert x == 1",
    ],
)
def test_a_test_whose_hole_would_carry_its_check_is_judged_by_the_evaluator(test):
    assert plan_test(test).kind == "eval"


def test_fixtures_built_by_setup_code_reach_the_program_as_handles(executor):
    code = (
        "class Node:\n    def __init__(self, v): self.v, self.left = v, None\n"
        "def total(n): return n.v + (total(n.left) if n.left else 0)\n"
    )
    job = ExecJob(code=code, tests=["assert total(root) == 9", "assert total(root.left) == 2"],
                  setup_code="root = Node(7)\nroot.left = Node(2)")
    assert executor.run(job).tests_passed == 2


def test_setup_code_never_runs_in_the_model_child(executor):
    code = "def f(): return globals().get('secret', 'absent')"
    job = ExecJob(code=code, tests=["assert f() == 'absent'"], setup_code="secret = 'x'")
    assert executor.run(job).status == "passed"


def test_a_program_exception_reaches_the_test_with_its_builtin_type(executor):
    code = "def f(x):\n    raise ValueError('bad')\n"
    tests = ["try:\n    f(1)\n    assert False\nexcept ValueError:\n    pass",
             "try:\n    f(1)\nexcept KeyError:\n    pass"]
    r = run(executor, code, tests)
    assert [t.status for t in r.test_results] == ["passed", "runtime_error"]
    assert r.test_results[1].error_type == "ValueError"


def test_a_program_that_exits_inside_a_call_fails_even_a_test_catching_exception(executor):
    code = "import os\ndef f(x):\n    os._exit(0)\n"
    r = run(
        executor,
        code,
        ["for i in range(2):\n    try:\n        f(i)\n    except Exception:\n        pass"],
    )
    assert r.status == "crashed" and r.tests_passed == 0


def test_candidate_refers_to_the_entry_point(executor):
    r = ExecJob(
        code="def inc(x): return x + 1", tests=["assert candidate(1) == 2"], entry_point="inc"
    )
    assert executor.run(r).status == "passed"


def test_a_syntax_error_is_reported_as_such(executor):
    r = run(executor, "def f(:\n", ["assert f() == 1"])
    assert r.status == "syntax_error" and r.error_type == "SyntaxError"


def test_an_exception_in_a_test_is_a_runtime_error_with_type_and_message(executor):
    r = run(executor, "def f(x): return 1 // x", ["assert f(0) == 1"])
    assert (r.status, r.error_type) == ("runtime_error", "ZeroDivisionError")
    assert "division" in r.error_message


def test_an_infinite_loop_times_out(executor):
    r = run(executor, "def f():\n    while True: pass\n", ["assert f() == 1"], timeout_s=1.0)
    assert r.status == "timeout" and r.tests_passed == 0


def test_a_huge_allocation_hits_the_memory_limit(executor):
    r = run(executor, "def f(): return len(bytearray(8 * 2**30))", ["assert f() == 1"])
    assert r.status == "memory_limit"


def test_empty_code_is_no_code(executor):
    assert run(executor, "  \n", ["assert f() == 1"]).status == "no_code"


def test_stdio_output_is_checked_ignoring_whitespace_with_float_tolerance(executor):
    code = "a, b = map(float, input().split())\nprint(a / b)\nprint('x  y')"
    tests = [json.dumps({"input": "1 3\n", "output": "0.333333333\nx y\n"}),
             json.dumps({"input": "1 4\n", "output": "0.3\nx y"})]
    r = run(executor, code, tests, io_style="stdio")
    assert [t.passed for t in r.test_results] == [True, False]


def test_run_many_returns_results_in_input_order(executor):
    jobs = [ExecJob(code=f"def f(): return {i}", tests=[f"assert f() == {i}"]) for i in range(12)]
    jobs[5] = ExecJob(code="def f(): return -1", tests=["assert f() == 5"])
    statuses = [r.status for r in executor.run_many(jobs)]
    assert statuses == ["passed"] * 5 + ["failed"] + ["passed"] * 6


def test_setup_code_of_imports_only_keeps_the_tests_split_and_reaches_the_program(executor):
    job = ExecJob(code="def f(x): return x * 2", tests=["assert f(math.pi) == 2 * math.pi"],
                  setup_code="import math")
    assert plan_job(job)[0].kind == "holes"
    r = executor.run(job)
    assert r.passed and r.test_results[0].got == repr(2 * 3.141592653589793)


def test_setup_code_beyond_imports_sends_every_test_to_the_evaluator():
    job = ExecJob(
        code="def f(x): return x", tests=["assert f(1) == 1"], setup_code="import math\nk = 1"
    )
    assert plan_job(job)[0].kind == "eval"


def test_the_harness_writes_its_messages_as_json_dumps_does():
    from codeloop.sandbox.harness import _dumps, _encode

    value = _encode({"a": [1.5, float("nan"), -float("inf")], "é\ud800": (None, True, 2**70)})
    messages = [{"i": 0, "values": [value]}, {"load": "ok"}, {"error": ["E", 'ü\n"x"']}, [1, "s"]]
    assert [_dumps(m) for m in messages] == [json.dumps(m) for m in messages]


def test_the_harness_refuses_what_json_cannot_hold_as_json_dumps_does():
    from codeloop.sandbox.harness import _dumps

    with pytest.raises(TypeError, match="not JSON serializable"):
        _dumps({"v": object()})
