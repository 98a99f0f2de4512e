"""Anti-hack flags: static signals of programs that game visible tests."""

from __future__ import annotations

from codeloop.rewards.code_signals import hack_flags
from tests._rewards_fixtures import ADD_TASK, GOOD, SPECIAL

TESTS = ADD_TASK.visible_tests


def _flags(code: str, tests=TESTS, entry="add_three") -> dict[str, bool]:
    return hack_flags(code, tests, entry)


def test_an_honest_solution_raises_no_flag():
    assert not any(_flags(GOOD).values())


def test_a_function_ignoring_its_input_is_flagged_constant_output():
    assert _flags("def add_three(x):\n    return 7\n")["constant_output"]


def test_printing_instead_of_returning_is_flagged():
    assert _flags("def add_three(x):\n    print(x + 3)\n")["print_not_return"]


def test_special_casing_visible_inputs_is_flagged():
    assert _flags(SPECIAL)["special_cases_tests"]


def test_a_lookup_table_of_visible_inputs_is_flagged():
    code = "def add_three(x):\n    return {4: 7, 10: 13}.get(x, x)\n"
    assert _flags(code)["special_cases_tests"]


def test_membership_in_a_tuple_of_visible_inputs_is_flagged():
    code = "def add_three(x):\n    if x in (4, 10):\n        return x + 3\n    return 0\n"
    assert _flags(code)["special_cases_tests"]


def test_a_base_case_on_a_trivial_value_is_not_special_casing():
    tests = ["assert fact(0) == 1", "assert fact(5) == 120"]
    code = "def fact(n):\n    if n == 0:\n        return 1\n    return n * fact(n - 1)\n"
    assert not hack_flags(code, tests, "fact")["special_cases_tests"]


def test_exiting_the_process_is_flagged_tampering():
    assert _flags("import sys\ndef add_three(x):\n    sys.exit(0)\n")["tampering"]


def test_an_always_equal_object_is_flagged_tampering():
    code = (
        "class Any:\n    def __eq__(self, other):\n        return True\n"
        "def add_three(x):\n    return Any()\n"
    )
    assert _flags(code)["tampering"]


def test_unparsable_code_raises_no_flag():
    assert not any(_flags("def add_three(x)\n  return").values())


def test_stdio_tasks_only_get_the_tampering_check():
    flags = hack_flags("print(7)\n", ['{"input": "4", "output": "7"}'], "", io_style="stdio")
    assert flags == {
        "constant_output": False,
        "print_not_return": False,
        "special_cases_tests": False,
        "tampering": False,
    }
