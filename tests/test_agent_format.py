"""The agent's action format (codeloop.policy.agent_format): compact grammar round trips,
parse failures are errors the rollout can show, chat templates render and parse calls."""

from __future__ import annotations

import pytest

from codeloop.policy import prompts as P
from codeloop.policy.agent_format import (
    TOOL_SCHEMAS,
    AgentParseError,
    ChatAgentFormat,
    CompactAgentFormat,
    agent_format_for,
    call_of,
    observation_text,
    parse_chat,
    parse_compact,
    render_compact,
)
from codeloop.policy.model import train_tokenizer
from codeloop.policy.tiny import build_tokenizer
from codeloop.schema import TOOLS, Observation, Task

TASK = Task("repo-1", "synthetic_repo", "add(2, 3) returns -1; expected 5.", kind="repo")

CALLS = [
    call_of("run_tests"),
    call_of("submit"),
    call_of("run_tests", selection=["tests/test_a.py::test_add", "tests/test_b.py::test_x"]),
    call_of("read_file", path="pkg/a.py"),
    call_of("read_file", path="pkg/a.py", start=3, end=12),
    call_of("list_files", path=".", depth=2),
    call_of("search", pattern=r"def add\(", path="pkg"),
    call_of("search", pattern='say "hi"'),
    call_of("edit", path="pkg/a.py", old="    return a - b\n", new="    return a + b\n"),
    call_of("edit", path="pkg/a.py", old="x = 1", new=""),
    call_of("write_file", path="pkg/new.py", content="def f():\n    return 1\n"),
    call_of("write_file", path="p.py", content="a\n<<<new\nb\n"),  # a block line inside
    call_of("bash", command="ls -la && echo 'x y'"),
    call_of("edit", path="a b.py", old="\n\n", new="\t"),
]


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c["tool"])
def test_agent_format_compact_render_then_parse_gives_the_same_call(call):
    assert parse_compact(render_compact(call) + P.END) == call


def test_agent_format_compact_edit_blocks_keep_code_verbatim():
    text = render_compact(CALLS[8])
    assert text == "edit path=pkg/a.py\n<<<old\n    return a - b\n\n<<<new\n    return a + b\n"


def test_agent_format_compact_integers_are_coerced_by_the_schema():
    assert parse_compact("read_file path=a.py start=2 end=5")["args"] == {
        "path": "a.py",
        "start": 2,
        "end": 5,
    }


def test_agent_format_compact_a_digit_path_stays_a_string():
    assert parse_compact("read_file path=123")["args"] == {"path": "123"}


@pytest.mark.parametrize(
    "text",
    ["", "   ", "read_file path", "read_file start=abc", 'search pattern="unclosed', "1tool x=1"],
)
def test_agent_format_compact_malformed_text_is_a_parse_error(text):
    with pytest.raises(AgentParseError):
        parse_compact(text)


def test_agent_format_compact_text_after_the_end_marker_is_ignored():
    assert parse_compact("submit<|end|>read_file path=x") == call_of("submit")


def test_agent_format_tool_schemas_cover_every_tool_in_order():
    assert [s["function"]["name"] for s in TOOL_SCHEMAS] == list(TOOLS)


def test_agent_format_observation_text_names_the_error_kind():
    obs = Observation(output="old text not found in pkg/a.py", error_kind="no_match")
    assert observation_text(obs) == "error: no_match: old text not found in pkg/a.py"


@pytest.fixture(scope="module")
def compact():
    tok = train_tokenizer([Task("t", "s", "x", reference_solution="def f():\n    pass\n")], 300)
    return CompactAgentFormat(tok)


def test_agent_format_embedded_tokenizer_gets_the_compact_agent_format(compact):
    assert isinstance(agent_format_for(compact.tok), CompactAgentFormat)


def test_agent_format_compact_markers_are_single_tokens(compact):
    assert len(compact.encode(P.TOOL)) == 1 and len(compact.encode(P.OBS)) == 1


def test_agent_format_compact_call_ids_decode_to_the_call_and_end_on_a_stop_token(compact):
    ids = compact.call_ids(TASK, CALLS[8])
    assert ids[-1] in compact.stop_ids()
    assert compact.parse(compact.tok.decode(ids)) == CALLS[8]


def test_agent_format_compact_prompt_ends_where_the_model_writes_its_call(compact):
    assert compact.prompt(TASK) == f"{P.TASK}{TASK.prompt}\n{P.TOOL}"


def test_agent_format_compact_observation_ids_open_the_next_call(compact):
    ids = compact.observation_ids(TASK, Observation(output="1 failed"))
    assert compact.tok.decode(ids) == f"\n{P.OBS}1 failed\n{P.TOOL}"


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def chat(request):
    return ChatAgentFormat(build_tokenizer(request.param))


def test_agent_format_chat_tokenizer_gets_the_chat_agent_format(chat):
    assert isinstance(agent_format_for(chat.tok), ChatAgentFormat)


def test_agent_format_chat_prompt_carries_the_tool_schemas(chat):
    text = chat.prompt(TASK)
    assert all(f'"name": "{name}"' in text for name in TOOLS)


@pytest.mark.parametrize("call", CALLS[:10], ids=lambda c: c["tool"])
def test_agent_format_chat_rendered_call_parses_back(chat, call):
    assert chat.parse(chat.call_text(call, TASK)) == call


def test_agent_format_chat_call_ids_end_on_an_end_of_turn_token(chat):
    assert chat.call_ids(TASK, CALLS[3])[-1] in chat.stop_ids()


def test_agent_format_chat_tool_result_is_the_templates_tool_turn(chat):
    text = chat.tok.decode(chat.observation_ids(TASK, Observation(output="2 passed")))
    assert "2 passed" in text and ("tool_response" in text or "ipython" in text)


def test_agent_format_chat_arguments_may_be_a_json_string():
    reply = '<tool_call>{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}</tool_call>'
    assert parse_chat(reply) == call_of("read_file", path="a.py")


def test_agent_format_chat_reply_without_a_call_is_a_parse_error():
    with pytest.raises(AgentParseError):
        parse_chat("I think the bug is in add().")
