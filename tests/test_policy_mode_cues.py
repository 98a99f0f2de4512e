"""The episode modes' extra turns in every prompt format: what the model is asked before an
explanation, a fix, its tests and its code, and the ids it would emit for them
(codeloop.policy.formats, codeloop.policy.agent_format)."""

from __future__ import annotations

import pytest

from codeloop.policy import prompts as P
from codeloop.policy.agent_format import EXPLAIN_FAILURE, agent_format_for
from codeloop.policy.formats import BaseFormat, ChatFormat, format_for
from codeloop.policy.tiny import build_tokenizer
from codeloop.schema import Observation, Task

TASK = Task(
    task_id="t1",
    source="synthetic",
    prompt="Return the double of x.",
    reference_solution="def double(x):\n    return 2 * x\n",
    visible_tests=["assert double(2) == 4"],
    entry_point="double",
)
FEEDBACK = {"status": "failed", "failing_test": "assert double(2) == 4", "got": "5"}


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def chat(request):
    return format_for(build_tokenizer(request.param))


def test_chat_explain_turn_shows_the_failure_and_asks_for_prose(chat):
    text = chat.tok.decode(chat.explain_ids(TASK, FEEDBACK))
    assert "assert double(2) == 4" in text and "explain" in text and "No code" in text


def test_chat_explanation_and_tests_end_with_the_templates_end_of_turn(chat):
    for ids in (chat.explanation_ids(TASK, "It adds one."),
                chat.tests_answer_ids(TASK, "assert double(1) == 2\n")):
        assert ids[-1] in chat.stop_ids()


def test_chat_tdd_prompt_asks_for_tests_without_showing_the_visible_one(chat):
    prompt = chat.tests_prompt(TASK)
    assert "assert statements" in prompt and "assert double(2) == 4" not in prompt


def test_chat_extracts_the_asserts_of_a_fenced_reply(chat):
    reply = "Here:\n```python\nassert double(1) == 2\nx = 1\nassert double(0) == 0\n```"
    assert chat.extract_tests(TASK, reply) == "assert double(1) == 2\nassert double(0) == 0\n"


def test_base_format_tdd_prompt_primes_one_assert():
    tok = build_tokenizer("qwen2")
    tok.chat_template = None
    fmt = format_for(tok)
    assert isinstance(fmt, BaseFormat)
    assert fmt.tests_prompt(TASK).endswith("\nassert ")
    assert fmt.extract_tests(TASK, "double(1) == 2\nassert more") == "assert double(1) == 2\n"


def test_compact_explain_cue_replaces_the_revise_marker():
    from codeloop.policy.model import train_tokenizer

    fmt = format_for(train_tokenizer([TASK], 300))
    text = fmt.tok.decode(fmt.explain_ids(TASK, FEEDBACK))
    assert P.EXPLAIN_CUE in text and P.REVISE not in text
    assert fmt.tok.decode(fmt.fix_ids(TASK)).strip().startswith(P.REVISE)


def test_agent_formats_ask_for_an_explanation_after_failing_tests():
    obs = Observation(output="FAILED tests/test_a.py::test_x", status="exited")
    for tok in (build_tokenizer("qwen2"),):
        fmt = agent_format_for(tok)
        assert isinstance(fmt, ChatFormat)
        assert EXPLAIN_FAILURE in fmt.tok.decode(fmt.explain_observation_ids(TASK, obs))
        assert "next tool call" in fmt.tok.decode(fmt.next_call_ids(TASK))
