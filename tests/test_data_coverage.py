"""Coverage of a reference solution by its tests, measured in the real sandbox."""

from __future__ import annotations

import opcode
import sys

import pytest

from codeloop.data.coverage import PRELUDE, Coverage, coverage_job, coverage_of, reference_coverage
from codeloop.sandbox import base, make_executor
from codeloop.sandbox.split import shadowed_names
from codeloop.schema import Task

SIGN = Task(
    task_id="t/sign",
    source="mbpp",
    prompt="1 for a positive number, else -1.",
    entry_point="sign",
    reference_solution="def sign(x):\n    if x > 0:\n        return 1\n    return -1\n",
)
# a future import, a generator and a multi-line statement: line numbers must stay exact
EVENS = Task(
    task_id="t/evens",
    source="mbpp",
    prompt="The even numbers below n.",
    entry_point="evens",
    reference_solution=(
        "from __future__ import annotations\n\n\ndef _gen(n: int):\n    for i in range(n):\n"
        "        if i % 2 == 0:\n            yield i\n\n\ndef evens(n: int) -> list[int]:\n"
        "    return list(\n        _gen(n)\n    )\n"
    ),
)
# redefines a name the parent would otherwise evaluate itself (the builtin ``sum``)
OWN_SUM = Task(
    task_id="t/sum",
    source="mbpp",
    prompt="Twice the sum.",
    entry_point="sum",
    reference_solution="def sum(xs):\n    if not xs:\n        return 0\n    return 2 * (xs[0] + sum(xs[1:]))\n",
)
RAISES = Task(
    task_id="t/raises",
    source="mbpp",
    prompt="Broken at import.",
    entry_point="f",
    reference_solution="def f(x):\n    return x\n\nraise RuntimeError('broken')\n",
)
SETUP = Task(
    task_id="t/setup",
    source="mbpp",
    prompt="Identity.",
    entry_point="f",
    reference_solution="def f(x):\n    return x\n",
    setup_code="K = 3",
)


@pytest.fixture(scope="module")
def executor():
    from codeloop.config import SandboxConfig

    ex = make_executor(SandboxConfig(workers=2, timeout_s=5.0))
    yield ex
    ex.close()


def test_tests_that_take_one_branch_of_an_if_cover_half_its_branches(executor):
    [cov] = reference_coverage(executor, [(SIGN, ["assert sign(3) == 1"])])
    assert cov == Coverage(
        statements=0.75,
        branches=0.5,
        statements_covered=3,
        statements_total=4,
        branches_covered=1,
        branches_total=2,
    )


def test_a_test_for_the_other_branch_makes_coverage_complete(executor):
    [cov] = reference_coverage(executor, [(SIGN, ["assert sign(3) == 1", "assert sign(-2) == -1"])])
    assert (cov.statements, cov.branches) == (1.0, 1.0)
    assert cov.branches_covered == cov.branches_total == 2


def test_a_failing_test_still_counts_the_lines_it_ran(executor):
    [cov] = reference_coverage(executor, [(SIGN, ["assert sign(-2) == 99"])])
    assert (cov.statements_covered, cov.branches_covered) == (3, 1)


def test_no_tests_cover_only_what_runs_at_import(executor):
    [cov] = reference_coverage(executor, [(SIGN, [])])
    assert (cov.statements_covered, cov.branches_covered) == (1, 0)  # the def line


def test_a_future_import_and_a_generator_keep_line_numbers_exact(executor):
    few, all_ = reference_coverage(
        executor, [(EVENS, ["assert evens(0) == []"]), (EVENS, ["assert evens(3) == [0, 2]"])]
    )
    assert few.statements_covered == 5 and few.statements_total == 7
    assert few.branches_covered == 1 and few.branches_total == 4
    assert (all_.statements, all_.branches) == (1.0, 1.0)


def test_a_reference_that_shadows_a_builtin_is_called_by_the_tests(executor):
    # were `sum(...)` taken for the builtin, the parent would evaluate it and cover nothing
    assert shadowed_names(coverage_job(OWN_SUM, []).code) == frozenset({"sum"})
    [cov] = reference_coverage(executor, [(OWN_SUM, ["assert sum([1]) == 2"])])
    assert (cov.statements, cov.branches) == (1.0, 1.0)


def test_a_reference_that_raises_at_import_is_unmeasurable_not_zero(executor):
    assert reference_coverage(executor, [(RAISES, ["assert f(1) == 1"])]) == [None]


def test_a_task_with_setup_code_is_unmeasurable_not_zero(executor):
    assert coverage_job(SETUP, ["assert f(1) == 1"]) is None
    assert reference_coverage(executor, [(SETUP, ["assert f(1) == 1"])]) == [None]


def test_a_test_judged_whole_makes_the_task_unmeasurable(executor):
    # both sides call the program: judged by the evaluator, after the read-out
    assert reference_coverage(executor, [(SIGN, ["assert sign(1) == sign(2)"])]) == [None]


def test_a_reference_that_switches_the_tracer_off_is_unmeasurable(executor):
    task = Task(
        task_id="t/off",
        source="mbpp",
        prompt="p",
        entry_point="f",
        reference_solution="import sys\n\ndef f():\n    sys.settrace(None)\n    return 1\n",
    )
    assert reference_coverage(executor, [(task, ["assert f() == 1"])]) == [None]


def test_many_tasks_in_one_call_come_back_in_input_order(executor):
    pairs = [
        (SIGN, ["assert sign(3) == 1"]),
        (SETUP, ["assert f(1) == 1"]),
        (SIGN, ["assert sign(3) == 1", "assert sign(-3) == -1"]),
        (RAISES, []),
        (OWN_SUM, ["assert sum([]) == 0"]),
    ]
    got = reference_coverage(executor, pairs)
    assert [c and c.branches for c in got] == [0.5, None, 1.0, None, 0.5]


def _read_out(arcs) -> base.ExecResult:
    """A result whose read-out test returned ``arcs`` (as a forged child might)."""
    verdict = base.TestResult(0, False, "failed", value=arcs)
    return base.ExecResult(status="failed", test_results=[verdict])


def test_arcs_the_reference_cannot_have_never_raise_a_share_above_one():
    forged = [[-1, 1], [1, -1], [-1, 2], [2, 3], [2, 4], [3, -1], [4, -1], [2, 99], [7, 8]]
    cov = coverage_of(SIGN, _read_out(forged))
    assert (cov.statements_covered, cov.branches_covered) == (4, 2)
    assert (cov.statements, cov.branches) == (1.0, 1.0)


def test_a_read_out_that_is_not_a_list_of_int_pairs_is_unmeasurable():
    for value in (None, "arcs", [[1, 2, 3]], [[1, True]], [(1, 2)]):
        assert coverage_of(SIGN, _read_out(value)) is None


def test_the_tracers_opcode_table_matches_this_python():
    # the sandbox's python is this minor version; a wrong number would misread yields
    table: dict = {}
    exec(compile(PRELUDE, "<codeloop-coverage>", "exec"), table)  # defines, runs nothing else
    assert sys.version_info[:2] in table["_OPS"]
    assert (table["_RESUME"], table["_PUSH_EXC_INFO"]) == (
        opcode.opmap["RESUME"],
        opcode.opmap["PUSH_EXC_INFO"],
    )
