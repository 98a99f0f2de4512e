"""The scripted expert on tasks minted from a real package (inflection 0.5.1's sdist, as
tests/test_repos_mint.py mints it): through the real environment it searches for the
function, reads only a line range around its edit, fixes the bug and the trusted judge
says resolved, with every observation inside the agent's observation budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codeloop.agent.env import AgentEnv
from codeloop.agent.executor import copy_task_envs, open_executor
from codeloop.agent.judge import judge_many
from codeloop.config import AgentConfig, SandboxConfig
from codeloop.data.repos.expert import expert_calls
from codeloop.io import read_tasks
from codeloop.rollout.demos import expert_demos

REPO = Path(__file__).resolve().parents[1]
SDIST = REPO / ".cache" / "mint" / "inflection-0.5.1.tar.gz"
MODULE = "inflection/__init__.py"


@pytest.fixture(scope="module")
def minted(tmp_path_factory):
    if not SDIST.exists():
        pytest.skip(f"{SDIST} absent: scripts/setup.sh fetches it from the package registry")
    out = tmp_path_factory.mktemp("mint") / "inflection"
    from codeloop.cli import main

    rc = main(
        [
            "mint",
            "--repo",
            str(SDIST),
            "--out",
            str(out),
            "--max",
            "3",
            "--seed",
            "1",
            "--workers",
            "2",
            "--license",
            "MIT",
        ]
    )
    assert rc == 0
    return out, read_tasks(out / "tasks.parquet")


@pytest.fixture(scope="module")
def played(minted, tmp_path_factory):
    """Each minted task's expert episode: (task, calls, observations, verdict)."""
    out, tasks = minted
    root = tmp_path_factory.mktemp("expert-real")
    cfg = AgentConfig(envs_dir=str(root / "envs"), max_steps=50)
    copy_task_envs(tasks, str(out / "envs"), cfg.envs_dir)  # as the stages do from clean's
    ex = open_executor(
        SandboxConfig(backend="local", workers=2, timeout_s=60.0), cfg, [], workspaces=True
    )
    env = AgentEnv(ex, cfg, str(out / "repos"), str(root / "bases"))
    episodes = []
    try:
        for t in tasks:
            calls = expert_calls(t, out / "repos", budget=cfg.observation_chars)
            ep = env.reset(t)
            obs = [ep.step(c) for c in calls]
            episodes.append((t, calls, obs, ep.final_diff()))
            ep.close()
        demos = expert_demos(
            tasks, env, lambda t: expert_calls(t, out / "repos", budget=cfg.observation_chars)
        )
        verdicts = judge_many([(t, diff) for t, _, _, diff in episodes], str(out / "repos"), ex)
        # the raw file, a search of it and a run of its suite, unranged, for the truncation tests
        ep = env.reset(tasks[0])
        raw = {
            "read": ep.step({"tool": "read_file", "args": {"path": MODULE}}),
            "search": ep.step({"tool": "search", "args": {"pattern": "def "}}),
        }
        ep.close()
    finally:
        ex.close()
    rows = [(t, calls, obs, v) for (t, calls, obs, _), v in zip(episodes, verdicts, strict=True)]
    return cfg, rows, raw, out, demos


def test_the_minted_module_is_too_long_for_one_observation(played):
    cfg, rows, _, out, _ = played
    text = (out / "repos" / rows[0][0].snapshot / MODULE).read_text()
    assert len(text.splitlines()) > 300 and len(text) > 5 * cfg.observation_chars


def test_the_expert_resolves_every_minted_task_by_the_trusted_judge(played):
    _, rows, _, _, _ = played
    assert rows and [(t.task_id, v.resolved) for t, _, _, v in rows] == [
        (t.task_id, True) for t, _, _, _ in rows
    ]


def test_every_call_of_the_expert_succeeds_and_the_episode_submits(played):
    _, rows, _, _, _ = played
    for t, _, obs, _ in rows:
        assert [o.error_kind for o in obs] == [""] * len(obs), t.task_id
        assert obs[-1].output == "submitted"


def test_the_expert_searches_then_reads_a_line_range_then_edits(played):
    _, rows, _, _, _ = played
    for t, calls, _, _ in rows:
        tools = [c["tool"] for c in calls]
        assert tools == ["run_tests", "search", "read_file", "edit", "run_tests", "submit"], t
        read = calls[2]["args"]
        assert read["path"] == MODULE and 0 < read["end"] - read["start"] < 40, read


def test_the_search_finds_the_line_the_ranged_read_starts_from(played):
    _, rows, _, _, _ = played
    for t, calls, obs, _ in rows:
        hits = [x.removeprefix("./").split(":") for x in obs[1].output.splitlines()]
        found = [int(h[1]) for h in hits if h[0] == MODULE]
        start, end = calls[2]["args"]["start"], calls[2]["args"]["end"]
        assert any(start <= n <= end for n in found), (t.task_id, found, start, end)


def test_the_edits_old_text_is_on_screen_whole_in_the_ranged_read(played):
    _, rows, _, _, _ = played
    for t, calls, obs, _ in rows:
        shown = "\n".join(x[7:] for x in obs[2].output.splitlines())  # numbers stripped
        assert not obs[2].truncated and calls[3]["args"]["old"] in shown, t.task_id


def test_every_observation_of_a_real_episode_fits_the_observation_budget(played):
    cfg, rows, raw, _, _ = played
    outputs = [o.output for _, _, obs, _ in rows for o in obs] + [o.output for o in raw.values()]
    assert max(len(x) for x in outputs) <= cfg.observation_chars


def test_a_real_suites_run_lists_its_failing_tests_and_counts_the_passing_ones(played):
    _, rows, _, _, _ = played
    for t, _, obs, _ in rows:
        first = obs[0].output
        assert obs[0].tests_passed < obs[0].tests_total
        assert t.fail_to_pass[0] in first and "passed tests not listed" in first, first[:300]
        assert "PASSED" not in first


def test_reading_the_whole_module_shows_whole_lines_and_says_how_to_read_the_rest(played):
    _, rows, raw, out, _ = played
    obs = raw["read"]
    lines = (out / "repos" / rows[0][0].snapshot / MODULE).read_text().splitlines()
    shown = obs.output.splitlines()
    note = next(x for x in shown if x.startswith("[... lines "))
    assert obs.truncated and "read_file with start/end" in note
    first, last = (int(v) for v in note.split()[2].split("-"))
    kept = shown[: shown.index(note)] + shown[shown.index(note) + 1 :]
    numbers = [*range(1, first), *range(last + 1, len(lines) + 1)]
    assert kept == [f"{i:>5}  {lines[i - 1]}" for i in numbers]


def test_a_search_over_the_real_tree_counts_the_matches_it_left_out(played):
    _, _, raw, _, _ = played
    obs = raw["search"]
    assert obs.truncated and "matching lines omitted; narrow the pattern" in obs.output


def test_the_ranged_read_round_trips_through_the_compact_grammar(played):
    from codeloop.policy.agent_format import parse_compact, render_compact

    _, rows, _, _, _ = played
    call = rows[0][1][2]
    assert parse_compact(render_compact(call)) == call
    assert json.loads(json.dumps(call)) == call


def test_real_repository_demonstrations_become_sft_examples_whose_targets_are_the_calls(
    played, tmp_path
):
    from codeloop.policy.model import Policy
    from codeloop.policy.sft import agent_examples
    from tests._tiny_policy import make_tiny_policy

    _, rows, _, _, (demos, report) = played
    assert report["rejected"] == 0 and len(demos) == len(rows)
    policy = Policy.load(make_tiny_policy(tmp_path / "tiny"))
    examples = agent_examples(policy, demos, max_len=100_000)
    assert len(examples) == len(demos)
    for (ids, mask), (_, calls, _, _) in zip(examples, rows, strict=True):
        targets = policy.tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
        read = calls[2]["args"]
        assert f"read_file path={MODULE} start={read['start']} end={read['end']}" in targets
        assert "submitted" not in targets and "passed tests not listed" not in targets
