"""Prompt templates and code extraction."""

from __future__ import annotations

from codeloop.policy import prompts as P
from codeloop.schema import Task


def _task() -> Task:
    return Task(
        task_id="t/1",
        source="synthetic",
        prompt="Write a function add_one(x) that adds 1 to it.",
        entry_point="add_one",
        visible_tests=["assert add_one(1) == 2", "assert add_one(2) == 3"],
        hidden_tests=["assert add_one(9) == 10"],
    )


def test_task_prompt_ends_with_the_code_marker():
    assert P.task_prompt(_task()).endswith(P.CODE)


def test_task_prompt_shows_visible_tests_but_never_hidden_ones():
    text = P.task_prompt(_task())
    assert "assert add_one(1) == 2" in text
    assert "add_one(9)" not in text


def test_fenced_python_block_is_extracted():
    text = "Here you go:\n```python\ndef f(x):\n    return x\n```\nDone."
    assert P.extract_code(text) == "def f(x):\n    return x\n"


def test_fenced_block_with_a_def_wins_over_an_example_block():
    text = "```\nf(1)\n```\n```python\ndef f(x):\n    return x\n```"
    assert P.extract_code(text).startswith("def f")


def test_raw_text_is_cut_at_the_end_marker():
    text = f"def f(x):\n    return x\n{P.END}garbage after"
    assert P.extract_code(text) == "def f(x):\n    return x\n"


def test_raw_text_truncated_mid_line_keeps_the_parseable_prefix():
    text = "def f(x):\n    return x\nprint(f(1"
    assert P.extract_code(text) == "def f(x):\n    return x\n"


def test_empty_completion_gives_no_code():
    assert P.extract_code("   \n" + P.END) == ""


def test_unparseable_text_is_kept_for_the_sandbox_to_judge():
    assert P.extract_code("def f(:\n  1") != ""


def test_feedback_names_status_failing_test_and_ends_with_revise_marker():
    fb = P.feedback_text("failed", "assert f(1) == 2", got="3")
    assert "status: failed" in fb and "assert f(1) == 2" in fb and "got: 3" in fb
    assert fb.endswith(P.REVISE)


def test_feedback_is_capped_in_length():
    fb = P.feedback_text("runtime_error", error="x" * 10_000)
    assert len(fb) < P.MAX_FEEDBACK_CHARS + 50


def _synthetic_task() -> Task:
    t = _task()
    t.reference_solution = "def add_one(x):\n    x = x + 1\n    return x\n"
    return t


def test_prompt_ends_with_the_reference_signature_when_it_leads_the_solution():
    assert P.task_prompt(_synthetic_task()).endswith(P.CODE + "def add_one(x):\n")


def test_no_signature_when_the_solution_does_not_start_with_the_entry_point():
    t = _synthetic_task()
    t.reference_solution = "import math\n" + t.reference_solution
    assert P.signature(t) == ""


def test_sft_completion_omits_the_signature_the_prompt_already_has():
    t = _synthetic_task()
    body = P.completion_text(t.reference_solution, P.signature(t))
    assert body == "    x = x + 1\n    return x\n" + P.END


def test_completion_continues_the_signature_prefix():
    code = P.extract_code("    return x + 1\n" + P.END, prefix="def f(x):\n")
    assert code == "def f(x):\n    return x + 1\n"


def test_an_empty_completion_after_a_signature_is_no_code():
    assert P.extract_code(P.END, prefix="def f(x):\n") == ""
