"""Prompting by model kind: chat templates for chat tokenizers, compact markers for the
embedded model, completion prompts for base models (codeloop.policy.formats)."""

from __future__ import annotations

import pytest

from codeloop.policy import prompts as P
from codeloop.policy.formats import (
    BASE_VERSION,
    CHAT_VERSION,
    BaseFormat,
    ChatFormat,
    CompactFormat,
    extract_fenced,
    format_for,
)
from codeloop.policy.tiny import build_tokenizer
from codeloop.schema import Task

TASK = Task(
    task_id="t1",
    source="synthetic",
    prompt="Return the double of x.",
    reference_solution="def double(x):\n    return 2 * x\n",
    visible_tests=["assert double(2) == 4"],
    hidden_tests=["assert double(3) == 6"],
    entry_point="double",
)
FEEDBACK = {"status": "failed", "failing_test": "assert double(2) == 4", "got": "5"}


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def tok(request):
    return build_tokenizer(request.param)


def test_a_chat_tokenizer_gets_the_chat_format(tok):
    assert isinstance(format_for(tok), ChatFormat)


def test_a_tokenizer_without_template_gets_the_base_format(tok):
    tok2 = build_tokenizer("qwen2")
    tok2.chat_template = None
    assert isinstance(format_for(tok2), BaseFormat) and format_for(tok2).version == BASE_VERSION


def test_the_embedded_tokenizer_keeps_the_compact_format():
    from codeloop.policy.model import train_tokenizer

    fmt = format_for(train_tokenizer([TASK], 300))
    assert isinstance(fmt, CompactFormat) and fmt.version == P.PROMPT_TEMPLATE_VERSION
    assert fmt.prompt(TASK) == P.task_prompt(TASK)


def test_the_chat_prompt_is_the_templates_rendering_of_system_and_task(tok):
    fmt = ChatFormat(tok)
    msgs = [
        {"role": "system", "content": fmt.messages(TASK)[0]["content"]},
        {"role": "user", "content": fmt.messages(TASK)[1]["content"]},
    ]
    expected = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert fmt.prompt(TASK) == expected and TASK.prompt in expected


def test_prompt_reply_and_feedback_ids_equal_the_whole_conversation_rendered(tok):
    fmt = ChatFormat(tok)
    reply = f"```python\n{TASK.reference_solution.strip()}\n```"
    fb_text = "status: failed\nfailing test: assert double(2) == 4\ngot: 5\n\n" + (
        "Fix the code. Reply with exactly one ```python code block."
    )
    msgs = fmt.messages(TASK) + [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": fb_text},
    ]
    whole = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = (
        fmt.prompt_ids(TASK)
        + fmt.answer_ids(TASK, TASK.reference_solution)
        + fmt.feedback_ids(TASK, FEEDBACK, stopped=True)
    )
    assert tok.decode(ids) == whole


def test_a_reply_cut_by_the_length_cap_gets_its_turn_closed_before_feedback(tok):
    fmt = ChatFormat(tok)
    end = tok.convert_ids_to_tokens(fmt.answer_ids(TASK, "x")[-1])
    assert tok.decode(fmt.feedback_ids(TASK, FEEDBACK, stopped=False)).startswith(end)


def test_the_chat_answer_ends_with_an_end_of_turn_token(tok):
    fmt = ChatFormat(tok)
    assert fmt.answer_ids(TASK, TASK.reference_solution)[-1] in fmt.stop_ids()


def test_tool_schemas_reach_the_template_and_tool_results_use_the_tool_role(tok):
    schema = {"type": "function", "function": {"name": "run_tests", "parameters": {}}}
    fmt = ChatFormat(tok, tools=[schema])
    assert "run_tests" in fmt.prompt(TASK)
    assert "RESULT-42" in tok.decode(fmt.tool_result_ids(TASK, "RESULT-42"))


def test_extract_takes_the_first_python_block():
    text = (
        "Here:\n```text\nnot code\n```\n```python\ndef f():\n    return 1\n```\n```python\nx=2\n```"
    )
    assert extract_fenced(text) == "def f():\n    return 1\n"


def test_extract_falls_back_to_any_fenced_block():
    assert extract_fenced("```\ndef g():\n    pass\n```") == "def g():\n    pass\n"


def test_extract_keeps_an_unclosed_block_cut_by_the_length_cap():
    assert extract_fenced("```python\ndef h():\n    return 3") == "def h():\n    return 3\n"


def test_extract_falls_back_to_the_parseable_prefix_of_raw_text():
    assert extract_fenced("def k():\n    return 4\nthis is ( not") == "def k():\n    return 4\n"


def test_extract_of_an_empty_reply_is_no_code():
    assert extract_fenced("  \n") == ""


def test_the_base_format_prompts_with_comments_and_the_signature():
    tok = build_tokenizer("qwen2")
    tok.chat_template = None
    prompt = BaseFormat(tok).prompt(TASK)
    assert prompt.startswith("# Task: Return") and prompt.endswith("def double(x):\n")


def test_the_base_format_cuts_code_at_a_new_task_line():
    tok = build_tokenizer("qwen2")
    fmt = BaseFormat(tok)
    assert (
        fmt.extract(TASK, "    return 2 * x\n# Task: next") == "def double(x):\n    return 2 * x\n"
    )


def test_chat_version_is_stamped_by_the_chat_format(tok):
    assert ChatFormat(tok).version == CHAT_VERSION
