"""AST mutations: one site each, the rest of the file byte-for-byte unchanged."""

from __future__ import annotations

from codeloop.data.repos.mutate import OPERATORS, apply_mutation, find_mutations

SRC = '''import os

LIMIT = 10


def pick(xs, n=3):
    """Docstring stays."""
    total = 0
    for i in range(n):
        if xs[i] > 2:
            total += xs[i] * 2
    return total


def head(xs):
    return xs[:2]


def call(a, b):
    return max(a, b)
'''


def _mutants(op: str, src: str = SRC) -> set[str]:
    return {apply_mutation(src, m) for m in find_mutations(src) if m.operator == op}


def test_every_operator_finds_a_site_in_a_small_module():
    found = {m.operator for m in find_mutations(SRC)}
    assert found == set(OPERATORS)


def test_a_comparison_swap_changes_only_that_operator():
    assert SRC.replace("xs[i] > 2", "xs[i] >= 2") in _mutants("compare")


def test_off_by_one_moves_a_range_stop_and_a_slice_bound():
    got = _mutants("off_by_one")
    assert SRC.replace("range(n)", "range(n + 1)") in got
    assert SRC.replace("xs[:2]", "xs[:3]") in got


def test_a_negated_condition_wraps_the_if_test():
    assert SRC.replace("if xs[i] > 2:", "if not xs[i] > 2:") in _mutants("condition")


def test_swapped_arguments_swap_the_first_two():
    assert SRC.replace("max(a, b)", "max(b, a)") in _mutants("swap_args")


def test_a_dropped_statement_becomes_pass():
    assert SRC.replace("    total = 0\n", "    pass\n") in _mutants("drop_stmt")


def test_a_wrong_return_returns_the_first_parameter():
    assert SRC.replace("return total", "return xs") in _mutants("wrong_return")


def test_default_values_and_module_level_code_are_left_alone():
    for m in find_mutations(SRC):
        assert "n=3" in apply_mutation(SRC, m) and "LIMIT = 10" in apply_mutation(SRC, m)


def test_only_the_named_functions_are_mutated():
    assert {m.function for m in find_mutations(SRC, {"head"})} == {"head"}


def test_spans_count_bytes_so_a_non_ascii_line_mutates_in_place():
    src = 'def f(x):\n    s = "é"; return x + 1\n'
    got = {apply_mutation(src, m) for m in find_mutations(src) if m.operator == "arith"}
    assert got == {'def f(x):\n    s = "é"; return x - 1\n'}
