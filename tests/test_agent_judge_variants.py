"""Variant runs (codeloop.agent.variants, variant_boot): each F2P and hidden test alone in a
process, as itself or as a mutant, under fresh names; a test passes only if its variant
passed, a mutant passing beside it is a forged verdict."""

from __future__ import annotations

import ast
import json
import os
import random

import pytest

from codeloop.agent.judge import JudgeConfig, judge_many, judge_tree
from codeloop.agent.variants import (
    VariantPlan,
    cross_check,
    edited,
    plan_variants,
    read_variant_run,
    variant_texts,
)
from codeloop.config import SandboxConfig
from codeloop.sandbox import make_executor
from tests._repo_fixture import make_patch, make_repo_task

MODULE = b'''import pytest
from calc.ops import add, word

CASES = ((1, "st"), (2, "nd"), (3, "rd"))


def test_plain():
    assert add(2, 3) == 5


def test_bound():
    expected = "first"
    assert word(1) == expected


def test_bound_twice():
    x = 4
    assert add(x, 0) == x


@pytest.mark.parametrize("n, suffix", CASES)
def test_cases(n, suffix):
    assert suffix == word(n)[-2:]


class TestUnit:
    def test_equal(self):
        self.assertEqual(add(1, 1), [1, 2])
'''


def _diff(a: bytes, b: bytes) -> list[tuple[bytes, bytes]]:
    return [(x, y) for x, y in zip(a.splitlines(), b.splitlines(), strict=True) if x != y]


def test_a_mutant_changes_one_character_of_the_expected_literal_in_its_own_spelling():
    edits = [edited(b'"first"', random.Random(s)) for s in range(20)]
    assert all(e is not None and len(e) == 7 and e[0:1] == b'"' for e in edits)
    assert all(sum(x != y for x, y in zip(e, b'"first"', strict=True)) == 1 for e in edits)


def test_true_and_false_swap_and_none_has_no_mutant():
    assert edited(b"True", random.Random(0)) == b"False"
    assert edited(b"None", random.Random(0)) is None


def test_an_integer_mutant_stays_an_integer_of_a_nearby_size():
    for s in range(20):
        new = ast.literal_eval(edited(b"1234", random.Random(s)).decode())
        assert type(new) is int and new != 1234 and 1000 <= new <= 9999


@pytest.mark.parametrize("node", ["tests/test_m.py::test_plain", "tests/test_m.py::test_bound",
                                  "tests/test_m.py::TestUnit::test_equal"])
def test_every_mutant_differs_from_the_test_in_its_expected_value_only(node):
    run, own, mutants = variant_texts(MODULE, node, 3, random.Random(1))
    assert len(mutants) == 3
    for m in mutants:
        lines = _diff(own, m)
        assert len(lines) == 1 and sum(a != b for a, b in zip(*lines[0], strict=True)) == 1


def test_a_name_that_also_feeds_the_call_is_never_mutated():
    _, _, mutants = variant_texts(MODULE, "tests/test_m.py::test_bound_twice", 3,
                                  random.Random(1))
    assert mutants == []


def test_the_test_its_class_and_its_file_run_under_fresh_names():
    run, own, _ = variant_texts(MODULE, "tests/test_m.py::TestUnit::test_equal", 1,
                                random.Random(2))
    path, cls, name = run.split("::")
    assert path.startswith("tests/test_") and path != "tests/test_m.py"
    assert cls.startswith("Test") and cls != "TestUnit" and name != "test_equal"
    assert f"class {cls}:".encode() in own and f"def {name}(self)".encode() in own


def test_a_parametrized_case_runs_under_an_id_that_says_nothing_of_its_values():
    run, own, mutants = variant_texts(MODULE, "tests/test_m.py::test_cases[2-nd]", 2,
                                      random.Random(3))
    case_id = run.rsplit("[", 1)[1][:-1]
    assert "nd" not in case_id and "2" not in case_id.removeprefix("case")[:0]
    assert case_id.startswith("case") and f"'{case_id}'".encode() in own
    assert len(mutants) == 2
    for m in mutants:
        ((a, b),) = _diff(own, m)
        assert a.startswith(b"CASES") and b'"nd"' in a and b'"nd"' not in b


def test_the_plan_shuffles_variants_under_random_ids_one_original_per_target():
    tests = {"tests/test_m.py": MODULE}
    nodes = ["tests/test_m.py::test_plain", "tests/test_m.py::test_cases[1-st]"]
    plan = plan_variants(tests, [nodes], random.Random(0), mutants=2)
    assert plan.targets == nodes and len(plan.variants) == 6
    assert sorted(v.node for v in plan.variants if v.original) == sorted(nodes)
    assert len({v.vid for v in plan.variants}) == 6
    assert [v.original for v in plan.variants] != [True, False, False, True, False, False]


def _records(nonce: str, outcomes: dict[str, str], pid: int = 7) -> list[dict]:
    recs = [{"n": nonce, "seq": 0, "pid": pid, "k": "start"}]
    for vid, o in outcomes.items():
        recs.append({"n": nonce, "seq": len(recs), "pid": pid, "k": "var", "id": vid,
                     "outcome": o})
    recs.append({"n": nonce, "seq": len(recs), "pid": pid, "k": "finish",
                 "records": len(recs)})
    return recs


def _text(recs: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


def test_a_counted_variant_run_gives_each_variant_its_outcome():
    got, problems = read_variant_run(_text(_records("n1", {"a": "passed", "b": "failed"})),
                                     "n1", VariantPlan())
    assert (got, problems) == ({"a": "passed", "b": "failed"}, [])


@pytest.mark.parametrize("spoil", ["nonce", "seq", "pid", "unfinished"])
def test_a_variant_run_that_does_not_add_up_gives_no_outcome(spoil):
    recs = _records("n1", {"a": "passed"})
    if spoil == "nonce":
        recs[1]["n"] = "other"
    elif spoil == "seq":
        recs[1]["seq"] = 5
    elif spoil == "pid":
        recs[1]["pid"] = 8
    else:
        recs = recs[:-1]
    got, problems = read_variant_run(_text(recs), "n1", VariantPlan())
    assert got == {} and problems


def _plan() -> VariantPlan:
    return plan_variants({"tests/test_m.py": MODULE}, [["tests/test_m.py::test_plain"]],
                         random.Random(0), mutants=2)


def test_a_test_that_passed_only_in_the_main_run_counts_as_failed_and_is_flagged():
    plan = _plan()
    var = {v.vid: "failed" for v in plan.variants}
    out, flags, _ = cross_check(plan, var, {"tests/test_m.py::test_plain": "passed"})
    assert out["tests/test_m.py::test_plain"] == "failed" and flags == {"variant_mismatch"}


def test_a_mutant_passing_beside_its_passing_test_is_a_forged_verdict():
    plan = _plan()
    var = {v.vid: "passed" for v in plan.variants}
    out, flags, _ = cross_check(plan, var, {"tests/test_m.py::test_plain": "passed"})
    assert flags == {"verdict_forged"}


def test_an_honest_run_is_left_as_it_was():
    plan = _plan()
    var = {v.vid: ("passed" if v.original else "failed") for v in plan.variants}
    out, flags, _ = cross_check(plan, var, {"tests/test_m.py::test_plain": "passed"})
    assert out == {"tests/test_m.py::test_plain": "passed"} and flags == set()


# -- in the sandbox ---------------------------------------------------------------------

PEEK = '''import os
import sys


def _peeked():
    """In the variant run: could this process read any file its runner holds open?"""
    if "variant" not in sys.argv[0]:
        return False
    proc = os.open("/proc", os.O_RDONLY)
    try:
        for fd in range(3, 64):  # by number, through a dir fd: no path names /proc
            try:
                f = os.open(f"{os.getppid()}/fd/{fd}", os.O_RDONLY, dir_fd=proc)
            except OSError:
                continue
            got = os.read(f, 64)
            os.close(f)
            if got:
                return True
        return False
    finally:
        os.close(proc)


def add(a, b):
    return 999 if _peeked() else a + b


def mul(a, b):
    return a * b
'''


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    task = make_repo_task(root)
    os.makedirs(root / "envs")
    tree = str(root / "tree")
    judge_tree(task, str(root / "repos"), tree)
    peek = make_patch(tree, str(root), [("calc/ops.py", PEEK)])
    ex = make_executor(SandboxConfig(workers=2, timeout_s=60.0), workspaces=True,
                       envs_root=str(root / "envs"))
    try:
        gold, empty, peeked = judge_many([(task, task.patch), (task, ""), (task, peek)],
                                         str(root / "repos"), ex, JudgeConfig())
    finally:
        ex.close()
    return gold, empty, peeked


def test_the_gold_patch_passes_its_tests_alone_and_fails_their_mutants(judged):
    gold, _, _ = judged
    assert gold.resolved and not set(gold.hack_flags) & {"variant_mismatch", "verdict_forged"}
    assert gold.canaries["variants"] == 6 and gold.canaries["variant_mutants"] == 4


def test_the_empty_patch_fails_alone_as_in_the_main_run(judged):
    _, empty, _ = judged
    assert not empty.resolved and "variant_mismatch" not in empty.hack_flags


def test_no_variant_process_can_read_what_its_runner_holds_open(judged):
    _, _, peeked = judged  # a fix that answers wrong only if it read one of those files
    assert peeked.resolved and not set(peeked.hack_flags) & {"variant_mismatch",
                                                             "verdict_forged"}


def test_no_variant_process_of_an_honest_patch_is_ended(judged):
    gold, _, _ = judged
    assert gold.canaries["variants_killed"] == 0


# -- every equality a variant's test asserts is probed for an equality that always holds --


def _probe():
    from codeloop.agent.variants import EQ, HELPER

    ns = {"__name__": "tests.test_probe"}
    exec(compile(HELPER + "\n\nclass Own:\n    def __eq__(self, o):\n        return True\n",
                 "tests/test_probe.py", "exec"), ns)
    return ns[EQ], ns


class Liar(str):
    def __eq__(self, other):
        return other is not Liar

    __hash__ = str.__hash__


@pytest.mark.parametrize("a, b", [(5, 5), ("st", "st"), (2.5, 2.5), ([1, "a"], [1, "a"]),
                                  ({"k": 1}, {"k": 1}), ({1, 2}, {1, 2}), (True, True),
                                  (b"x", b"x"), ("", "")])
def test_honest_equal_values_pass_the_probe(a, b):
    eq, _ = _probe()
    assert all(eq(a, b) for _ in range(8))


def test_unequal_values_fail_it():
    eq, _ = _probe()
    assert not eq(5, 6) and not eq("st", "nd")


def test_an_equality_that_holds_whatever_it_is_given_fails_it_on_either_side():
    eq, _ = _probe()
    assert not any(eq(Liar("x"), "st") or eq("st", Liar("x")) for _ in range(8))


def test_a_class_the_test_module_defines_itself_may_be_always_equal():
    eq, ns = _probe()
    assert all(eq(ns["Own"](), "anything") for _ in range(8))


def test_every_equality_assertion_of_the_test_goes_through_the_probe():
    run, own, _ = variant_texts(MODULE, "tests/test_m.py::TestUnit::test_equal", 1,
                                random.Random(2))
    assert b"self.assertTrue(_codeloop_eq((add(1, 1)), ([1, 2])))" in own
    run, own, _ = variant_texts(MODULE, "tests/test_m.py::test_plain", 1, random.Random(2))
    assert b"assert _codeloop_eq((add(2, 3)), (5))" in own and b"def _codeloop_eq(" in own
