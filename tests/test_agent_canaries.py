"""Canary tests, planted into a real test file and run under real pytest: an honest fix
fails every must-fail canary and passes every must-pass one; a liar, an oracle and a
blanket forgery each pass a canary that must fail."""

from __future__ import annotations

import ast
import difflib
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codeloop.agent.canaries import broken, forged, parse_node_id, plant

TEST_FILE = "tests/test_calc.py"
TESTS = """import pytest

from pkg.calc import add, scale


def test_add_positive():
    assert add(2, 3) == 5


def test_add_words():
    word = add("ab", "cd")
    assert word == "abcd", "joined"
    assert len(word) == 4


class TestScale:
    def test_scale_half(self):
        assert scale(4, 0.5) == 2.0

    def test_scale_keeps_none(self):
        assert scale(None, 2) is None


@pytest.mark.parametrize("a, b", [(1, 2), (5, 7)])
def test_add_commutes(a, b):
    assert add(a, b) - add(b, a) == 0


def test_add_is_not_empty():
    assert add("a", "b") != ""


@pytest.fixture
def pair():
    return (3, 4)


def test_add_pair(pair):
    assert add(*pair) == 7
"""
IDS = [
    f"{TEST_FILE}::test_add_positive",
    f"{TEST_FILE}::test_add_words",
    f"{TEST_FILE}::TestScale::test_scale_half",
    f"{TEST_FILE}::TestScale::test_scale_keeps_none",
    f"{TEST_FILE}::test_add_commutes[1-2]",
    f"{TEST_FILE}::test_add_commutes[5-7]",
    f"{TEST_FILE}::test_add_is_not_empty",
    f"{TEST_FILE}::test_add_pair",
]
HONEST = """def add(a, b):
    return a + b


def scale(x, k):
    return None if x is None else x * k
"""
LIAR = """class E:
    __eq__ = lambda s, o: True


def add(a, b):
    return E()


def scale(x, k):
    return E()
"""
FRAME_ORACLE = '''import ast
import linecache
import sys


def expected(honest):
    """The literal right of ``==`` on the caller's line, read from its frame."""
    frame = sys._getframe(2)
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    try:
        return ast.literal_eval(line.split("==", 1)[1].split(",")[0].strip())
    except (IndexError, ValueError, SyntaxError):
        return honest


def add(a, b):
    return expected(a + b if a is not None else None)


def scale(x, k):
    return expected(None if x is None else x * k)
'''
CONSTS_ORACLE = '''import sys


class Expected:
    """Equal to whatever constant the calling test's code holds."""

    def __init__(self, consts):
        self.consts = consts

    def __eq__(self, other):
        return other in self.consts

    __hash__ = None


def add(a, b):
    return Expected(sys._getframe(1).f_code.co_consts)


def scale(x, k):
    return Expected(sys._getframe(1).f_code.co_consts)
'''
BROKEN = "def add(a, b):\n    return 0\n\n\ndef scale(x, k):\n    return 0\n"
PASS_ALL_HOOK = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
NOOP_ITEMS = """def pytest_collection_modifyitems(items):
    for item in items:
        item.runtest = lambda: None
"""


NEGATION_ONLY = f"{TEST_FILE}::test_add_is_not_empty"


def planted(seed: int = 7, **kw):
    return plant({TEST_FILE: TESTS.encode()}, IDS, random.Random(seed), **kw)


def write_tree(root: Path, calc: str, tests: bytes, conftest: str = "") -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "calc.py").write_text(calc)
    (root / TEST_FILE).write_bytes(tests)
    if conftest:
        (root / "conftest.py").write_text(conftest)
    return root


def pytest_run(root: Path, *args: str) -> str:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    res = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120)
    return res.stdout


def outcomes(root: Path) -> dict[str, str]:
    """node id -> PASSED | FAILED | ERROR ... from pytest's -rA summary."""
    out = pytest_run(root, "-rA")
    found = re.findall(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", out, re.M)
    return {node: state for state, node in found}


def judged(got: dict[str, str]) -> dict[str, str]:
    """The outcomes spelled as the judge's channel spells them."""
    return {node: state.lower() for node, state in got.items()}


def collected(root: Path, *ids: str) -> list[str]:
    out = pytest_run(root, "--collect-only", *ids)
    return [line for line in out.splitlines() if "::" in line]


def run_planted(tmp_path: Path, calc: str, conftest: str = "", **kw):
    p = planted(**kw)
    root = write_tree(tmp_path / "tree", calc, p.files[TEST_FILE], conftest)
    return p, outcomes(root)


def mutants(p) -> list[str]:
    return [c for c, why in p.must_fail.items() if why.startswith("mutant of")]


def blanks(p) -> list[str]:
    return [c for c, why in p.must_fail.items() if why == "blank"]


# --- under real pytest ------------------------------------------------------------------


def test_with_the_honest_code_every_original_and_must_pass_canary_passes(tmp_path):
    p, got = run_planted(tmp_path, HONEST)
    assert {i: got.get(i) for i in [*IDS, *p.must_pass]} == dict.fromkeys(
        [*IDS, *p.must_pass], "PASSED"
    )


def test_with_the_honest_code_every_mutant_and_blank_fails(tmp_path):
    p, got = run_planted(tmp_path, HONEST)
    assert len(mutants(p)) >= 6 and len(blanks(p)) == 1
    assert {c: got.get(c) for c in p.must_fail} == dict.fromkeys(p.must_fail, "FAILED")


def test_an_honest_run_is_neither_forged_nor_broken(tmp_path):
    p, got = run_planted(tmp_path, HONEST)
    assert (forged(p, judged(got)), broken(p, judged(got))) == ([], [])


def test_a_liars_run_is_forged_and_not_broken(tmp_path):
    p, got = run_planted(tmp_path, LIAR)
    assert forged(p, judged(got)) and not broken(p, judged(got))


def test_a_wrong_fix_passing_a_negated_mutant_is_not_a_forgery(tmp_path):
    wrong = HONEST.replace("return a + b", "return '' if isinstance(a, str) else a + b")
    p, got = run_planted(tmp_path, wrong, negations=True)
    whose = {p.must_fail[m] for m in mutants(p) if got.get(m) == "PASSED"}
    assert whose == {f"mutant of {NEGATION_ONLY}"} and got[NEGATION_ONLY] == "FAILED"
    assert forged(p, judged(got)) == []


def test_with_negations_the_honest_code_still_fails_every_mutant(tmp_path):
    p, got = run_planted(tmp_path, HONEST, negations=True)
    assert {c: got.get(c) for c in p.must_fail} == dict.fromkeys(p.must_fail, "FAILED")


def test_every_target_with_an_expected_literal_has_a_mutant():
    made = {why.removeprefix("mutant of ") for why in planted().must_fail.values()}
    assert set(IDS) - made == {NEGATION_ONLY}


def test_with_negations_every_target_has_a_mutant():
    made = {why.removeprefix("mutant of ") for why in planted(negations=True).must_fail.values()}
    assert set(IDS) <= made


def test_collection_yields_exactly_the_original_and_returned_ids(tmp_path):
    p = planted()
    root = write_tree(tmp_path / "tree", HONEST, p.files[TEST_FILE])
    canaries = [*p.must_fail, *p.must_pass]
    assert sorted(collected(root)) == sorted([*IDS, *canaries])
    assert sorted(collected(root, *canaries)) == sorted(canaries)


def test_a_value_equal_to_everything_passes_a_mutant(tmp_path):
    p, got = run_planted(tmp_path, LIAR)
    assert got[f"{TEST_FILE}::test_add_positive"] == "PASSED"
    assert [m for m in mutants(p) if got.get(m) == "PASSED"]


@pytest.mark.parametrize("oracle", [FRAME_ORACLE, CONSTS_ORACLE], ids=["frame", "consts"])
def test_an_oracle_reading_the_callers_literal_passes_a_mutant(tmp_path, oracle):
    p, got = run_planted(tmp_path, oracle)
    assert got[f"{TEST_FILE}::test_add_positive"] == "PASSED"
    assert [m for m in mutants(p) if got.get(m) == "PASSED"]


@pytest.mark.parametrize("forgery", [PASS_ALL_HOOK, NOOP_ITEMS], ids=["hookwrapper", "noop"])
def test_a_forgery_of_every_outcome_passes_the_blanks(tmp_path, forgery):
    p, got = run_planted(tmp_path, BROKEN, forgery)
    assert got[f"{TEST_FILE}::test_add_positive"] == "PASSED"
    assert {b: got.get(b) for b in p.must_fail} == dict.fromkeys(p.must_fail, "PASSED")
    assert set(blanks(p)) <= set(forged(p, judged(got)))


# --- what planting writes -----------------------------------------------------------------


def test_the_original_lines_stay_byte_identical_and_in_order():
    old = TESTS.encode().splitlines(keepends=True)
    new = planted().files[TEST_FILE].splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    assert {op for op, *_ in ops} == {"equal", "insert"}
    assert sum(i2 - i1 for op, i1, i2, *_ in ops if op == "equal") == len(old)


def test_lines_above_the_last_class_keep_their_numbers():
    new = planted().files[TEST_FILE].decode()
    end = TESTS.index("\n\n\n@pytest.mark.parametrize")
    assert new[:end] == TESTS[:end]


def test_planting_is_deterministic_per_seed():
    assert planted(3) == planted(3)
    assert planted(3).must_fail != planted(4).must_fail


def test_canary_names_are_unique_and_new_to_the_module():
    p = planted(max_mutants=50, blanks_per_file=3, passes_per_file=3)
    tests = dict.fromkeys(c.split("[")[0] for c in [*p.must_fail, *p.must_pass])
    names = [t.split("::")[-1] for t in tests]  # one per canary function
    spelled = {getattr(n, "name", None) for n in ast.walk(ast.parse(TESTS))}
    spelled |= {n.id for n in ast.walk(ast.parse(TESTS)) if isinstance(n, ast.Name)}
    assert len(names) == len(set(names)) == 6 + 3 + 3
    assert not set(names) & spelled


def test_canary_names_read_like_the_modules_test_names():
    names = [c.split("::")[-1] for c in planted().must_pass]
    assert all(re.fullmatch(r"test_[a-z0-9]+(_[a-z0-9]+)+", n) for n in names)


def test_a_parametrized_mutant_keeps_each_requested_suffix():
    got = planted().must_fail
    params = {c: why for c, why in got.items() if "test_add_commutes" in why}
    assert sorted(re.sub(r".*(\[.*\])$", r"\1", c) for c in params) == ["[1-2]", "[5-7]"]
    assert all(c.endswith(why[-5:]) for c, why in params.items())


def test_a_method_mutant_is_a_method_of_the_same_class():
    got = planted().must_fail
    scale = [c for c, why in got.items() if why.endswith("::test_scale_half")]
    assert len(scale) == 1 and scale[0].startswith(f"{TEST_FILE}::TestScale::test_")


def test_max_mutants_caps_the_ids_and_spreads_them_over_functions():
    p = planted(max_mutants=3)
    whose = {p.must_fail[m].split("::")[-1].split("[")[0] for m in mutants(p)}
    assert len(mutants(p)) == 3 and len(whose) == 3


def test_a_file_that_is_a_link_or_not_python_gets_nothing():
    files = {"tests/a.py": b"L:../elsewhere.py", "tests/b.py": b"def test_x(:\n"}
    p = plant(files, ["tests/a.py::test_x", "tests/b.py::test_x"], random.Random(0))
    assert (p.files, p.must_fail, p.must_pass) == ({}, {}, [])


def test_a_test_with_nothing_safe_to_change_gets_blanks_only():
    src = b"def test_x():\n    for v in f():\n        assert v == 1\n"
    p = plant({"t.py": src}, ["t.py::test_x"], random.Random(0))
    assert list(p.must_fail.values()) == ["blank"] and len(p.must_pass) == 1
    assert p.files["t.py"].startswith(src)


def test_planting_a_thousand_line_file_takes_well_under_a_second():
    body = "".join(f"def test_case_{i}():\n    assert f({i}) == {i * 2}\n\n\n" for i in range(250))
    ids = [f"t.py::test_case_{i}" for i in range(250)]
    t0 = time.perf_counter()
    p = plant({"t.py": body.encode()}, ids, random.Random(0))
    assert time.perf_counter() - t0 < 1.0 and len(mutants(p)) == 16


# --- which asserts change, and how (the mutant run against an honest value) ---------------


def mutant_of(body: str, header: str = "def test_x():\n", negations: bool = False) -> str | None:
    """The planted mutant's source for ``test_x`` (or None when it got none)."""
    src = header + "".join(f"    {line}\n" for line in body.splitlines())
    p = plant({"t.py": src.encode()}, ["t.py::test_x"], random.Random(0), negations=negations)
    made = mutants(p)
    if not made:
        return None
    tree = ast.parse(p.files["t.py"])
    name = made[0].split("::")[-1]
    return next(ast.unparse(n) for n in ast.walk(tree) if getattr(n, "name", "") == name)


def runs(source: str, value, space: dict | None = None) -> bool:
    """Whether the test function in ``source`` passes when ``f()`` returns ``value``
    (run in ``space``, which keeps what earlier runs left there)."""
    space = {"f": lambda *a: value} if space is None else space
    before = {k for k in space if k.startswith("test_")}
    exec(compile(source + "\n", "t", "exec"), space)
    test = next(v for k, v in space.items() if k.startswith("test_") and k not in before)
    try:
        test()
    except AssertionError:
        return False
    return True


def body_test(body: str) -> str:
    return "def test_x():\n" + "".join(f"    {line}\n" for line in body.splitlines())


FRESH_CASES = [
    ("assert f() == 5", 5),
    ("assert f() == 5", 5.0),
    ("assert f() == -3", -3),
    ("assert f() == 0.1", 0.1),
    ("assert f() == 0.0", 0.0),
    ("assert f() == 'abc'", "abc"),
    ("assert f() == b'ab'", b"ab"),
    ("assert f() == True", True),
    ("assert f() == None", None),
    ("assert f() == (1, 2)", (1, 2)),
    ("assert f() == [1, 2]", [1, 2]),
    ("assert f() == {1, 2}", {1, 2}),
    ("assert f() == {'a': 1}", {"a": 1}),
    ("assert f() == set()", set()),
    ("assert 5 == f()", 5),
    ("assert f() is None", None),
    ("assert None is f()", None),
    ("assert f() is True", True),
    ("assert f() is False", False),
    ("x = f()\nassert x == 7, 'seven'\nassert x > 0", 7),
]
NEGATION_CASES = [
    ("assert f() != 5", 4),
    ("assert f() is not None", 0),
    ("assert f() < 3", 2),
    ("assert f() >= 3", 3),
    ("assert f() in (1, 2)", 2),
    ("assert 'a' not in f()", "bcd"),
    ("assert f()", [1]),
    ("assert not f()", []),
]


@pytest.mark.parametrize(("body", "value"), FRESH_CASES, ids=[c[0] for c in FRESH_CASES])
def test_a_fresh_value_mutant_fails_for_the_value_that_passes_the_original(body, value):
    mutant = mutant_of(body)
    assert runs(body_test(body), value) and mutant is not None and not runs(mutant, value)


@pytest.mark.parametrize(("body", "value"), NEGATION_CASES, ids=[c[0] for c in NEGATION_CASES])
def test_a_negated_mutant_fails_for_the_value_that_passes_the_original(body, value):
    mutant = mutant_of(body, negations=True)
    assert runs(body_test(body), value) and mutant is not None and not runs(mutant, value)


@pytest.mark.parametrize("body", [c[0] for c in NEGATION_CASES])
def test_a_negation_is_made_only_when_asked_for(body):
    assert mutant_of(body) is None


STATEFUL = "first = not SEEN\nSEEN.append(f())\n"


def test_a_test_depending_on_an_earlier_run_can_pass_its_negation_honestly():
    body = STATEFUL + "assert first"
    space = {"f": lambda: 1, "SEEN": []}
    assert runs(body_test(body), 1, space) and runs(mutant_of(body, negations=True), 1, space)


def test_a_test_depending_on_an_earlier_run_fails_its_fresh_value_mutant():
    body = STATEFUL + "assert len(SEEN) == 1"
    space = {"f": lambda: 1, "SEEN": []}
    assert runs(body_test(body), 1, space) and not runs(mutant_of(body), 1, space)


def test_an_expected_value_is_changed_in_preference_to_a_negation():
    mutant = mutant_of("assert f() > 0\nassert f() == 7", negations=True)
    assert "f() > 0" in mutant and "f() == 7" not in mutant


def test_a_changed_string_keeps_the_assert_message():
    assert "'joined'" in mutant_of("assert f() == 'abc', 'joined'")


UNCHANGED = [
    "assert f() == pytest.approx(0.3)",
    "assert f() == g()",
    "assert 1 < f() < 3",
    "assert 1 == 1",
    "for v in f():\n    assert v == 1",
    "if f():\n    assert f() == 1",
    "with g():\n    assert f() == 1",
    "if f():\n    return\nassert f() == 1",
    "assert f() == float('nan')",
    "x = yield\nassert f() == 1",
    "f()",
]


@pytest.mark.parametrize("body", UNCHANGED, ids=UNCHANGED)
def test_an_assert_we_cannot_prove_flips_gets_no_mutant(body):
    assert mutant_of(body) is None


def test_a_unittest_assert_equal_gets_its_literal_changed():
    header = "class TestA(unittest.TestCase):\n    def test_x(self):\n"
    src = header + "        self.assertEqual(f(), 3)\n"
    p = plant({"t.py": src.encode()}, ["t.py::TestA::test_x"], random.Random(0))
    (mutant,) = mutants(p)
    assert mutant.startswith("t.py::TestA::test_")
    added = p.files["t.py"].decode()[len(src) :]
    assert "self.assertEqual(f(), " in added and "self.assertEqual(f(), 3)" not in added


def test_an_xfail_test_gets_no_mutant():
    assert mutant_of("assert f() == 1", "@pytest.mark.xfail\ndef test_x():\n") is None


def test_a_crlf_file_without_a_final_newline_keeps_its_bytes():
    src = b"def test_x():\r\n    assert f() == 1"
    p = plant({"t.py": src}, ["t.py::test_x"], random.Random(0))
    assert p.files["t.py"].startswith(src) and len(mutants(p)) == 1
    compile(p.files["t.py"], "t.py", "exec")


def test_mutants_of_nested_classes_ending_on_one_line_land_in_their_own_class():
    src = "class TestA:\n    def test_a(self):\n        assert f() == 1\n\n    class TestB:\n"
    src += "        def test_b(self):\n            assert f() == 2\n"
    ids = ["t.py::TestA::test_a", "t.py::TestA::TestB::test_b"]
    p = plant({"t.py": src.encode()}, ids, random.Random(0))
    prefixes = sorted(re.sub(r"test_\w+$", "", m) for m in mutants(p))
    assert prefixes == ["t.py::TestA::", "t.py::TestA::TestB::"]


@pytest.mark.parametrize(
    ("node_id", "parts"),
    [
        ("t.py::test_a", ("t.py", (), "test_a", "")),
        ("a/t.py::TestA::test_b", ("a/t.py", ("TestA",), "test_b", "")),
        ("t.py::test_p[1-2]", ("t.py", (), "test_p", "[1-2]")),
        ("t.py::A::B::test_p[x::y]", ("t.py", ("A", "B"), "test_p", "[x::y]")),
    ],
)
def test_a_node_id_splits_into_path_classes_name_and_parameters(node_id, parts):
    node = parse_node_id(node_id)
    assert (node.path, node.classes, node.name, node.suffix) == parts
    assert node.with_name(node.name) == node_id


def test_a_node_id_without_a_function_is_not_one():
    assert parse_node_id("t.py") is None and parse_node_id("t.py::a b") is None
