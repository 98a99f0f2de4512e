"""Each tool does what it says on the workspace, and every misuse is an observation."""

from __future__ import annotations

from pathlib import Path

import pytest

from codeloop.agent.lines import truncate
from tests._repo_fixture import open_agent_env


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    env, ex, task = open_agent_env(tmp_path_factory.mktemp("tools"), bash=True,
                                   observation_chars=2000, invalid_call_limit=500,
                                   max_steps=500)
    yield env, task
    ex.close()


@pytest.fixture
def ep(agent):
    env, task = agent
    episode = env.reset(task)
    yield episode
    episode.close()


def call(ep, tool, **args):
    return ep.step({"tool": tool, "args": args})


def test_list_files_shows_the_tree_without_hidden_tests(ep):
    obs = call(ep, "list_files")
    assert "calc/ops.py" in obs.output.splitlines() and "test_hidden" not in obs.output


def test_read_file_numbers_the_requested_lines(ep):
    obs = call(ep, "read_file", path="calc/ops.py", start=4, end=5)
    assert obs.output.splitlines() == ["    4  def add(a, b):", "    5      return a - b"]


def test_search_finds_a_regex_with_file_and_line(ep):
    obs = call(ep, "search", pattern=r"def \w+\(a, b\)", path="calc")
    assert sorted(obs.output.splitlines()) == ["calc/ops.py:4:def add(a, b):",
                                               "calc/ops.py:8:def mul(a, b):"]


def test_an_invalid_regex_is_a_bad_args_observation(ep):
    assert call(ep, "search", pattern="(unclosed").error_kind == "bad_args"


def test_edit_replaces_one_exact_match(ep):
    obs = call(ep, "edit", path="calc/ops.py", old="return a - b", new="return a + b")
    assert (
        obs.error_kind == ""
        and "return a + b" in Path(ep.workspace.path, "calc/ops.py").read_text()
    )


def test_edit_of_missing_text_is_no_match(ep):
    assert call(ep, "edit", path="calc/ops.py", old="return 42", new="x").error_kind == "no_match"


def test_a_failed_edit_shows_the_lines_most_like_its_old_text(ep):
    obs = call(ep, "edit", path="calc/ops.py", old="    return a - c", new="x")
    assert obs.error_kind == "no_match"
    assert obs.output.splitlines()[1:] == ["    5      return a - b"]


def test_closest_lines_span_as_many_lines_as_the_old_text():
    from codeloop.agent.tools import closest_lines

    text = "def f(a):\n    b = a\n    return b\n\ndef g(x):\n    y = x + 1\n    return y\n"
    assert closest_lines(text, "    y = x - 1\n    return y") == (
        "    6      y = x + 1\n    7      return y"
    )


def test_closest_lines_show_at_most_a_dozen_lines_however_long_the_old_text():
    from codeloop.agent.tools import HINT_LINES, closest_lines

    text = "\n".join(f"v{i} = {i}" for i in range(3000))
    shown = closest_lines(text, "\n".join(f"v{i} = {i + 1}" for i in range(100, 160)))
    assert len(shown.splitlines()) == HINT_LINES and shown.split()[0] == "101"


def test_edit_of_repeated_text_is_not_unique(ep):
    assert (
        call(ep, "edit", path="calc/ops.py", old="    return", new="x").error_kind == "not_unique"
    )


def test_write_file_creates_parents(ep):
    call(ep, "write_file", path="calc/sub/new.py", content="X = 1\n")
    assert Path(ep.workspace.path, "calc/sub/new.py").read_text() == "X = 1\n"


def test_run_tests_reports_each_visible_test(ep):
    obs = call(ep, "run_tests")
    assert (
        obs.tests_passed == 3
        and obs.tests_total == 4
        and "FAILED   tests/test_f2p.py" in obs.output
    )


def test_run_tests_refuses_an_option_as_a_node_id(ep):
    assert call(ep, "run_tests", selection=["--collect-only"]).error_kind == "bad_args"


def test_run_tests_refuses_the_hidden_tests(ep):
    obs = call(ep, "run_tests", selection="tests/test_hidden.py::test_add_negative")
    assert obs.error_kind == "bad_args"


def test_bash_runs_in_the_workspace(ep):
    obs = call(ep, "bash", command="ls calc && exit 3")
    assert "ops.py" in obs.output and obs.output.endswith("[exit 3]")


def test_bash_past_its_time_is_a_timeout_observation(agent):
    env, task = agent
    fast = env.cfg
    ep = env.reset(task)
    try:
        ep.tools.cfg = fast.model_copy(update={"command_timeout_s": 0.5})
        assert call(ep, "bash", command="sleep 30").error_kind == "timeout"
    finally:
        ep.close()


def test_bash_is_off_unless_switched_on(tmp_path):
    env, ex, task = open_agent_env(tmp_path, workers=1)
    try:
        ep = env.reset(task)
        assert call(ep, "bash", command="true").error_kind == "disabled"
        ep.close()
    finally:
        ex.close()


def test_a_long_output_is_cut_with_a_marker(ep):
    obs = call(ep, "bash", command="seq 5000")
    assert obs.truncated and len(obs.output) <= 2000 and "observation truncated" in obs.output


def test_a_long_file_read_whole_keeps_whole_head_and_tail_lines_and_names_the_range_left_out(ep):
    call(ep, "write_file", path="big.txt", content="".join(f"row {i}\n" for i in range(1, 5001)))
    obs = call(ep, "read_file", path="big.txt")
    lines = obs.output.splitlines()
    note = next(x for x in lines if x.startswith("[... lines "))
    first, last = (int(v) for v in note.split()[2].split("-"))
    head, tail = lines[: lines.index(note)], lines[lines.index(note) + 1 :]
    assert obs.truncated and len(obs.output) <= 2000 and "read_file with start/end" in note
    assert head == [f"{i:>5}  row {i}" for i in range(1, first)]
    assert tail == [f"{i:>5}  row {i}" for i in range(last + 1, 5001)]


def test_a_search_with_too_many_matches_keeps_whole_lines_and_counts_the_rest(ep):
    call(ep, "write_file", path="many.txt", content="needle here\n" * 150)
    obs = call(ep, "search", pattern="needle", path="many.txt")
    lines = obs.output.splitlines()
    note = next(x for x in lines if x.startswith("[... "))
    kept = [x for x in lines if x != note]
    assert obs.truncated and len(obs.output) <= 2000
    assert all(x == f"{i}:needle here" for x, i in zip(kept, _numbers(kept), strict=True))
    assert note.startswith(f"[... {150 - len(kept)} of 150 matching lines omitted")


def _numbers(hits: list[str]) -> list[int]:
    return [int(x.split(":", 1)[0]) for x in hits]


def test_truncate_keeps_short_text_whole():
    assert truncate("short", 100) == ("short", False)


@pytest.mark.parametrize(
    "bad,kind",
    [({"tool": "frobnicate", "args": {}}, "unknown_tool"), ("{not json", "parse_error"),
     ({"parse_error": "no call found in the model's text"}, "parse_error"),
     ({"tool": "read_file", "args": {}}, "bad_args"),
     ({"tool": "read_file", "args": {"path": 3}}, "bad_args"),
     ({"tool": "read_file", "args": {"path": "a", "mode": "x"}}, "bad_args"),
     ({"tool": "read_file", "args": {"path": "nope.py"}}, "not_found"),
     ({"tool": "read_file", "args": {"path": "calc"}}, "is_a_directory")],
)
def test_a_malformed_call_is_an_observation_and_counted(ep, bad, kind):
    obs = ep.step(bad)
    assert obs.error_kind == kind and ep.counters.tool_errors == 1 and ep.counters.tool_calls == 1
