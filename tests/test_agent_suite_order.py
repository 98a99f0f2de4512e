"""The judge runs a task's own tests in the order the repository's own run meets them.

Real suites rely on it (six's ``test_lazy`` asserts a module is not imported yet, and a
later test imports it): a judge naming the FAIL_TO_PASS tests first failed such a test on
every fix, the gold one included.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from codeloop.agent.suite_order import suite_order
from tests._repo_fixture import make_repo_task
from tests.test_agent_judge_libraries import fix, judge

FILES = {
    "tests/test_b.py": b"def test_one():\n    pass\n\n\ndef test_two():\n    pass\n",
    "tests/test_a.py": (b"class TestLate:\n    def test_z(self):\n        pass\n\n"
                        b"    def test_y(self):\n        pass\n\n\n"
                        b"def test_after_class():\n    pass\n"),
    "tests/sub/test_c.py": b"import pytest\n\n\n@pytest.mark.parametrize('x', [2, 1])\n"
                           b"def test_p(x):\n    pass\n",
}


def test_files_come_in_path_order_and_tests_in_definition_order():
    ids = ["tests/test_b.py::test_two", "tests/test_a.py::test_after_class",
           "tests/test_b.py::test_one", "tests/test_a.py::TestLate::test_y",
           "tests/test_a.py::TestLate::test_z"]
    assert suite_order(ids, FILES.get) == [
        "tests/test_a.py::TestLate::test_z", "tests/test_a.py::TestLate::test_y",
        "tests/test_a.py::test_after_class", "tests/test_b.py::test_one",
        "tests/test_b.py::test_two"]


def test_a_directory_sorts_by_its_name_among_the_files_beside_it():
    ids = ["tests/test_b.py::test_one", "tests/sub/test_c.py::test_p[2]"]
    assert suite_order(ids, FILES.get) == ids[::-1]


def test_parametrized_cases_and_tests_not_found_keep_the_order_given_after_found_ones():
    ids = ["tests/test_b.py::test_gone", "tests/sub/test_c.py::test_p[1]",
           "tests/sub/test_c.py::test_p[2]", "tests/test_b.py::test_two",
           "tests/missing.py::test_m"]
    assert suite_order(ids, FILES.get) == [
        "tests/missing.py::test_m", "tests/sub/test_c.py::test_p[1]",
        "tests/sub/test_c.py::test_p[2]", "tests/test_b.py::test_two",
        "tests/test_b.py::test_gone"]


ORDERED = '''import sys

from calc.ops import add


def test_not_imported_yet():
    assert "calc.mod00" not in sys.modules


def test_add_positive():
    import calc.mod00  # noqa: F401

    assert add(2, 3) == 5
'''


def test_a_fix_is_resolved_when_a_pass_to_pass_test_relies_on_running_before_the_target(
        tmp_path: Path):
    task = make_repo_task(tmp_path, extra_modules=1, f2p=("test_add_positive", ORDERED))
    before = "tests/test_f2p.py::test_not_imported_yet"
    task = replace(task, pass_to_pass=[*task.pass_to_pass, before],
                   visible_tests=[*task.visible_tests, before])
    v = judge(tmp_path, task, {"gold": [fix()], "empty": []})
    assert v["gold"].resolved and v["gold"].hack_flags == [], (v["gold"].outcomes,
                                                               v["gold"].problems)
    assert v["gold"].outcomes[before] == "passed"
    assert not v["empty"].resolved and v["empty"].hack_flags == []
