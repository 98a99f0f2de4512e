"""`codeloop export` and `codeloop archive query` on agent episodes (repository tasks).

The slow tests read the trajectories of one real `dvc repro` in a temp git copy of the repo
on tiny params that teach the SFT policy the expert's tool calls (so the rollout resolves
some repository tasks and, at temperature 1.2, fails others), function episodes included.
TRL's trainers tokenize the SFT and DPO exports with the repro's own policy (models/init) and a
tool-calling chat template (TRL's own Qwen2.5 template: the repro's tokenizer has none). The fast tests build
trajectory rows by hand where a layout the repro does not produce is needed.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
import yaml

from codeloop.cli import main
from codeloop.data.export import export
from codeloop.io import read_tasks, read_trajectories
from codeloop.paths import Paths
from codeloop.policy.agent_format import TOOL_SCHEMAS, episode_messages
from codeloop.schema import (
    Action,
    Observation,
    Task,
    Trajectory,
    TrajectoryMetadata,
    is_agent_episode,
    model_turns,
    resolved_episode,
)
from tests._tiny_repo import copy_repo, git, merge
from tests.test_pipeline_agent_e2e import AGENT_TINY
from tests.test_pipeline_e2e import _dvc

# AGENT_TINY plus what makes the rollout resolve some tasks and fail others: a policy large
# enough to learn the expert's calls, SFT long enough to learn them, every repository task
# in the bucket, and a sampling temperature that still makes mistakes.
AGENT_EXPORT = merge(
    AGENT_TINY,
    {
        "policy_init": {"n_embd": 64, "n_layer": 2},
        "clean": {
            "sources": [{"kind": "synthetic", "n": 16, "seed": 1, "max_depth": 2}],
            "repo_tasks": {"n": 4, "heldout_n": 2},
        },
        "bucket": {"tasks_per_iteration": 24},
        # plain expert demos (no slips): the tiny model must learn the calls to resolve some
        "sft": {"steps": 400, "agent_fraction": 0.6, "batch_size": 8, "slip_fraction": 0.0},
        "rollout": {"temperature": 1.2, "samples_per_task": 4, "agent_max_new_tokens": 96},
        "agent": {"max_steps": 8},
    },
)


@pytest.fixture(scope="module")
def repro(tmp_path_factory, repo_root, prefect_harness):
    work = tmp_path_factory.mktemp("repo")
    copy_repo(repo_root, work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(merge(params, AGENT_EXPORT), sort_keys=False))
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "tiny agent export")
    _dvc(work, "repro")
    return work


@pytest.fixture(scope="module")
def trajs(repro) -> list[Trajectory]:
    rows = read_trajectories(Paths(repro).trajectories_dir)
    agent = [t for t in rows if is_agent_episode(t)]
    won = {t.prompt_key for t in agent if resolved_episode(t)}
    lost = {t.prompt_key for t in agent if not resolved_episode(t)}
    # what the tests below need of the repro; if this fails, the tiny params above no
    # longer teach the expert (or no longer sample its mistakes)
    assert won & lost, f"no group with resolved and unresolved episodes: {len(agent)} agent rows"
    assert len(agent) < len(rows), "the repro ran no function episodes"
    return rows


@pytest.fixture(scope="module")
def tasks(repro) -> dict[str, Task]:
    return {t.task_id: t for t in read_tasks(Paths(repro).clean_tasks)}


def _export(repro, tmp_path: Path, fmt: str, *extra: str) -> Path:
    out = tmp_path / fmt
    argv = ["export", "--trajectories", str(Paths(repro).trajectories_dir), "--format", fmt]
    argv += ["--tasks", str(Paths(repro).clean_tasks), "--out", str(out), *extra]
    assert main(argv) == 0
    return out / "train.parquet"


def _load(path: Path):
    import datasets

    return datasets.load_dataset("parquet", data_files=str(path), split="train")


def _by_id(trajs) -> dict[str, Trajectory]:
    return {t.trajectory_id: t for t in trajs}


def _chat_tokenizer(repro):
    """The repro's tokenizer with TRL's Qwen2.5 chat template (tool calls, tool role)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(Paths(repro).init_model)
    tok.chat_template = (resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()
    return tok


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["sft", "grpo", "transitions", "dpo"])
def test_datasets_reads_every_export_of_a_repro_with_agent_rows(repro, trajs, tmp_path, fmt):
    extra = ("--kind", "repo") if fmt == "dpo" else ()
    ds = _load(_export(repro, tmp_path, fmt, *extra))
    agent_ids = {t.trajectory_id for t in trajs if is_agent_episode(t)}
    ids = {
        "sft": lambda r: [r["trajectory_id"]],
        "grpo": lambda r: r["trajectory_ids"],
        "transitions": lambda r: [r["trajectory_id"]],
        "dpo": lambda r: [r["chosen_id"], r["rejected_id"]],
    }[fmt]
    assert any(i in agent_ids for r in ds for i in ids(r))


@pytest.mark.slow
def test_transitions_of_a_repro_are_one_row_per_tool_call(repro, trajs, tmp_path):
    ds = _load(_export(repro, tmp_path, "transitions"))
    agent = [t for t in trajs if is_agent_episode(t) and not t.infra_error]
    calls = {t.trajectory_id: [(a.step, a.tool) for a in model_turns(t)] for t in agent}
    rows: dict[str, list] = {}
    for r in ds:
        if r["trajectory_id"] in calls:
            rows.setdefault(r["trajectory_id"], []).append((r["step"], r["tool"]))
    assert rows == calls


@pytest.mark.slow
def test_agent_transition_reward_shares_sum_to_the_episode_reward(repro, trajs, tmp_path):
    ds = _load(_export(repro, tmp_path, "transitions"))
    sums: dict[str, float] = {}
    for r in ds:
        if r["kind"] == "repo":
            sums[r["trajectory_id"]] = sums.get(r["trajectory_id"], 0.0) + r["reward"]
    by_id = _by_id(trajs)
    assert sums and all(s == pytest.approx(by_id[i].reward, abs=1e-9) for i, s in sums.items())


@pytest.mark.slow
def test_agent_transitions_chain_states_through_each_call(repro, trajs, tmp_path):
    ds = _load(_export(repro, tmp_path, "transitions"))
    t = next(t for t in trajs if is_agent_episode(t) and len(model_turns(t)) > 2)
    rows = [r for r in ds if r["trajectory_id"] == t.trajectory_id]
    for a, b in zip(rows, rows[1:], strict=False):
        took = a["state_ids"] + a["action_ids"]
        assert a["next_state_ids"][: len(took)] == took and b["state_ids"] == a["next_state_ids"]
    assert rows[-1]["done"] and rows[-1]["next_state_ids"] == t.token_ids


@pytest.mark.slow
def test_an_agent_transition_observes_the_previous_calls_tool_output(repro, trajs, tmp_path):
    ds = _load(_export(repro, tmp_path, "transitions"))
    t = next(t for t in trajs if is_agent_episode(t) and len(model_turns(t)) > 1)
    first, second = [r for r in ds if r["trajectory_id"] == t.trajectory_id][:2]
    out = model_turns(t)[0].observation.output
    assert first["observation"] == t.prompt and out and out in second["observation"]


@pytest.mark.slow
def test_the_sft_export_holds_each_resolved_agent_episode_once(repro, trajs, tmp_path):
    ds = _load(_export(repro, tmp_path, "sft"))
    resolved = {(t.task_id, t.final_diff) for t in trajs if resolved_episode(t)}
    by_id = _by_id(trajs)
    rows = [by_id[r["trajectory_id"]] for r in ds if r["kind"] == "repo"]
    assert all(resolved_episode(t) for t in rows)
    assert sorted((t.task_id, t.final_diff) for t in rows) == sorted(resolved)


@pytest.mark.slow
def test_an_agent_sft_row_is_the_episodes_tool_calls_and_observations(repro, trajs, tmp_path):
    ds = _load(_export(repro, tmp_path, "sft"))
    row = next(r for r in ds if r["kind"] == "repo")
    t = _by_id(trajs)[row["trajectory_id"]]
    msgs = row["messages"]
    calls = [m["tool_calls"][0]["function"] for m in msgs if m.get("tool_calls")]
    seen = [m["content"] for m in msgs if m["role"] == "tool"]
    turns = model_turns(t)
    assert [m["role"] for m in msgs[:2]] == ["system", "user"]
    assert calls == [{"name": a.tool, "arguments": json.loads(a.args)} for a in turns]
    assert seen == [a.observation.output for a in turns[:-1]]


@pytest.mark.slow
def test_sft_trainer_tokenizes_the_agent_sft_export_as_the_chat_template_renders_it(
    repro, trajs, tasks, tmp_path
):
    from trl import SFTConfig, SFTTrainer

    path = _export(repro, tmp_path, "sft", "--kind", "repo")
    tok = _chat_tokenizer(repro)
    args = SFTConfig(output_dir=str(tmp_path / "o"), report_to=[], max_length=None, use_cpu=True)
    trainer = SFTTrainer(
        model=str(Paths(repro).init_model),
        args=args,
        train_dataset=_load(path),
        processing_class=tok,
    )
    row = trainer.train_dataset[0]
    t = _by_id(trajs)[_load(path)[0]["trajectory_id"]]
    msgs = episode_messages(tasks[t.task_id], model_turns(t), t.metadata.episode_mode)
    text = tok.apply_chat_template(msgs, tools=TOOL_SCHEMAS, tokenize=False)
    assert row["input_ids"] == tok(text)["input_ids"]


@pytest.mark.slow
def test_the_dpo_export_pairs_resolved_with_unresolved_episodes_of_one_group(
    repro, trajs, tmp_path
):
    ds = _load(_export(repro, tmp_path, "dpo", "--kind", "repo"))
    by_id = _by_id(trajs)
    pairs = [(by_id[r["chosen_id"]], by_id[r["rejected_id"]]) for r in ds]
    assert pairs and all(
        resolved_episode(c) and not resolved_episode(r) and c.prompt_key == r.prompt_key
        for c, r in pairs
    )


@pytest.mark.slow
def test_dpo_pairs_use_no_episode_twice(repro, trajs, tmp_path):
    ds = _load(_export(repro, tmp_path, "dpo", "--kind", "repo"))
    used = [i for r in ds for i in (r["chosen_id"], r["rejected_id"])]
    assert len(used) == len(set(used))


@pytest.mark.slow
def test_dpo_trainer_tokenizes_the_agent_dpo_export(repro, tmp_path):
    from trl import DPOConfig, DPOTrainer

    path = _export(repro, tmp_path, "dpo", "--kind", "repo")
    tok = _chat_tokenizer(repro)
    args = DPOConfig(output_dir=str(tmp_path / "o"), report_to=[], max_length=None, use_cpu=True)
    trainer = DPOTrainer(
        model=str(Paths(repro).init_model),
        args=args,
        train_dataset=_load(path),
        processing_class=tok,
    )
    row, first = trainer.train_dataset[0], _load(path)[0]
    text = tok.apply_chat_template(
        first["prompt"], tools=TOOL_SCHEMAS, tokenize=False, add_generation_prompt=True
    )
    assert row["prompt_ids"] == tok(text)["input_ids"] and row["chosen_ids"] != row["rejected_ids"]


@pytest.mark.slow
def test_a_dpo_export_of_function_and_agent_episodes_at_once_is_refused(repro, tmp_path, capsys):
    argv = ["export", "--trajectories", str(Paths(repro).trajectories_dir), "--format", "dpo"]
    argv += ["--tasks", str(Paths(repro).clean_tasks), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "--kind function or --kind repo" in capsys.readouterr().err


@pytest.mark.slow
def test_the_function_dpo_export_of_a_mixed_repro_keeps_the_text_layout(repro, trajs, tmp_path):
    ds = _load(_export(repro, tmp_path, "dpo", "--kind", "function"))
    agent_keys = {t.prompt_key for t in trajs if is_agent_episode(t)}
    assert all(isinstance(r["prompt"], str) and r["prompt_key"] not in agent_keys for r in ds)


@pytest.mark.slow
def test_grpo_agent_rows_carry_final_diffs_and_the_judge_spec(repro, trajs, tasks, tmp_path):
    ds = _load(_export(repro, tmp_path, "grpo"))
    row = next(r for r in ds if r["kind"] == "repo")
    task, by_id = tasks[row["task_id"]], _by_id(trajs)
    assert row["completions"] == [by_id[i].final_diff for i in row["trajectory_ids"]]
    assert (row["snapshot"], row["fail_to_pass"], row["pass_to_pass"], row["bug_patch"]) == (
        task.snapshot,
        task.fail_to_pass,
        task.pass_to_pass,
        task.bug_patch,
    )


@pytest.mark.slow
def test_grpo_rows_never_carry_the_reference_patch(repro, tasks, tmp_path):
    ds = _load(_export(repro, tmp_path, "grpo"))
    rows = [r for r in ds if r["kind"] == "repo"]
    assert rows and not any(tasks[r["task_id"]].patch in json.dumps(r) for r in rows)


@pytest.mark.slow
def test_an_agent_export_without_its_tasks_file_names_the_missing_file(repro, tmp_path, capsys):
    argv = ["export", "--trajectories", str(Paths(repro).trajectories_dir), "--format", "sft"]
    argv += ["--tasks", str(tmp_path / "none.parquet"), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "none.parquet" in capsys.readouterr().err


@pytest.fixture(scope="module")
def archive(repro, trajs, tmp_path_factory) -> Path:
    from codeloop.config import RetentionConfig
    from codeloop.data.archive import append_night

    path = tmp_path_factory.mktemp("archive") / "archive"
    append_night(path, trajs, RetentionConfig())
    return path


@pytest.mark.slow
def test_archive_query_passing_matches_exactly_the_resolved_agent_episodes(archive, trajs):
    from codeloop.data.archive import query

    got = {t.trajectory_id for t in query(archive, passing=True) if is_agent_episode(t)}
    assert got == {t.trajectory_id for t in trajs if resolved_episode(t)}


@pytest.mark.slow
def test_archive_query_prints_an_agent_episodes_final_diff(archive, capsys):
    assert main(["archive", "query", "--archive", str(archive), "--passing"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    agent = [x for x in lines if x["kind"] == "repo"]
    assert agent and all(x["final_diff"].startswith("diff --git") for x in agent)


@pytest.mark.slow
def test_the_sft_export_of_the_archive_holds_its_resolved_agent_episodes(archive, repro, tmp_path):
    argv = ["export", "--trajectories", str(archive), "--format", "sft", "--kind", "repo"]
    argv += ["--tasks", str(Paths(repro).clean_tasks), "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    assert len(_load(tmp_path / "o" / "train.parquet")) > 0


# ---------------------------------------------------------------- hand-built rows (fast)


def _agent_row(actions: list[Action], mask: list[int], **kw) -> Trajectory:
    n = len(mask)
    return Trajectory(
        trajectory_id=kw.pop("trajectory_id", "e1"),
        task_id="repo/t1",
        prompt_key="repo/t1#k@0",
        prompt="<|task|>fix it\n<|tool|>",
        actions=actions,
        metadata=TrajectoryMetadata(prompt_template_version="agent-v1"),
        token_ids=list(range(n)),
        loss_mask=mask,
        sample_logprobs=[-0.5 * m for m in mask],
        **kw,
    )


def _call(step: int, tool: str, args: str = "{}", reward: float = 0.0) -> Action:
    obs = Observation(status="ok", output=f"{tool} ran")
    return Action(step, "tool", tool, observation=obs, reward=reward, tool=tool, args=args)


def _repo_task() -> Task:
    return Task("repo/t1", "synthetic-repo", "fix it", kind="repo", snapshot="abc")


def test_a_turn_cut_by_the_context_is_the_last_transition(tmp_path):
    t = _agent_row(
        [_call(0, "run_tests")], [0, 1, 1, 0, 1, 1], terminal_reason="context_full", reward=0.5
    )
    export([t], "transitions", tmp_path)
    rows = _load(tmp_path / "train.parquet")
    assert [(r["action_type"], r["done"], r["reward"]) for r in rows] == [
        ("tool", False, 0.0),
        ("cut", True, 0.5),
    ]


def test_step_rewards_inside_the_episode_reward_are_not_counted_twice(tmp_path):
    acts = [_call(0, "run_tests", reward=0.05), _call(1, "submit", reward=-0.002)]
    t = _agent_row(acts, [0, 1, 0, 1], reward=1.0)
    export([t], "transitions", tmp_path)
    assert _load(tmp_path / "train.parquet")["reward"] == pytest.approx([0.05, 0.95])


def test_a_function_episodes_process_rewards_are_not_counted_twice(tmp_path):
    acts = [
        Action(0, "generate", "x", observation=Observation(status="failed"), reward=0.1),
        Action(1, "revise", "y", observation=Observation(status="passed"), reward=0.0),
    ]
    t = _agent_row(acts, [0, 1, 0, 1], reward=0.9, terminal_reason="all_tests_passed")
    t.metadata.prompt_template_version = "cl-v3"
    export([t], "transitions", tmp_path)
    assert _load(tmp_path / "train.parquet")["reward"] == pytest.approx([0.1, 0.8])


def test_a_corrupt_token_layout_names_the_trajectory_and_field(tmp_path):
    t = _agent_row([_call(0, "run_tests")], [0, 1, 0, 1], trajectory_id="bad1")
    with pytest.raises(ValueError, match=r"trajectory bad1: 1 model steps .* field loss_mask"):
        export([t], "transitions", tmp_path)


def test_an_agent_episode_whose_task_is_missing_names_the_row_and_field(tmp_path):
    t = _agent_row([_call(0, "submit")], [0, 1], trajectory_id="lost1")
    t.reward_components = {"resolved": 1.0}
    with pytest.raises(ValueError, match=r"trajectory lost1: field task_id 'repo/t1'"):
        export([t], "sft", tmp_path, tasks={})


def test_tool_call_arguments_that_are_not_json_name_the_row_action_and_field(tmp_path):
    t = _agent_row([_call(0, "read_file", args="{path")], [0, 1], trajectory_id="argbad")
    t.reward_components = {"resolved": 1.0}
    with pytest.raises(ValueError, match=r"trajectory argbad: action 0: field args is not JSON"):
        export([t], "sft", tmp_path, tasks={"repo/t1": _repo_task()})


def test_an_unparsed_agent_turn_is_an_assistant_message_with_its_raw_text(tmp_path):
    bad = Action(0, "tool", "read it", observation=Observation(status="parse_error"), raw="read it")
    t = _agent_row([bad, _call(1, "submit")], [0, 1, 0, 1])
    t.reward_components = {"resolved": 1.0}
    export([t], "sft", tmp_path, tasks={"repo/t1": _repo_task()})
    msgs = _load(tmp_path / "train.parquet")[0]["messages"]
    assert msgs[2] == {"role": "assistant", "content": "read it"}


def test_tool_call_arguments_keep_only_their_own_keys_through_parquet(tmp_path):
    acts = [_call(0, "read_file", '{"path": "a.py"}'), _call(1, "search", '{"pattern": "x"}')]
    t = _agent_row(acts, [0, 1, 0, 1])
    t.reward_components = {"resolved": 1.0}
    export([t], "sft", tmp_path, tasks={"repo/t1": _repo_task()})
    msgs = _load(tmp_path / "train.parquet")[0]["messages"]
    args = [m["tool_calls"][0]["function"]["arguments"] for m in msgs if m.get("tool_calls")]
    assert args == [{"path": "a.py"}, {"pattern": "x"}]


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def chat(request):
    from codeloop.policy.agent_format import ChatAgentFormat
    from codeloop.policy.tiny import build_tokenizer

    return ChatAgentFormat(build_tokenizer(request.param))


def _played(chat, task: Task, turns: list[tuple[Action, str]]) -> str:
    """The text of an episode as a chat agent's rollout builds its ids, piece by piece."""
    ids = chat.encode(chat.prompt(task))
    for a, then in turns:
        if a.action_type == "explain":
            ids += chat.explanation_ids(task, a.content) + chat.next_call_ids(task)
            continue
        ids += chat.call_ids(task, {"tool": a.tool, "args": json.loads(a.args)})
        if then == "observe":
            ids += chat.observation_ids(task, a.observation)
        elif then == "explain":
            ids += chat.explain_observation_ids(task, a.observation)
    return chat.tok.decode(ids)


def test_agent_messages_render_to_what_a_chat_model_read_and_wrote(chat):
    task = _repo_task()
    played = [
        (_call(0, "run_tests"), "observe"),
        (_call(1, "read_file", '{"path": "a.py"}'), "observe"),
        (_call(2, "submit"), ""),
    ]
    msgs = episode_messages(task, [a for a, _ in played])
    whole = chat.tok.apply_chat_template(msgs, tools=TOOL_SCHEMAS, tokenize=False)
    text = _played(chat, task, played)
    assert whole.startswith(text) and not whole[len(text) :].strip()


def test_a_rubber_duck_explanation_renders_between_its_asks(chat):
    task = _repo_task()
    played = [
        (_call(0, "run_tests"), "explain"),
        (Action(1, "explain", "add() subtracts."), ""),
        (_call(2, "submit"), ""),
    ]
    msgs = episode_messages(task, [a for a, _ in played], "rubber_duck")
    whole = chat.tok.apply_chat_template(msgs, tools=TOOL_SCHEMAS, tokenize=False)
    text = _played(chat, task, played)
    assert whole.startswith(text) and not whole[len(text) :].strip()


def test_a_tdd_episodes_messages_open_with_the_tests_first_prompt(chat):
    task = _repo_task()
    msgs = episode_messages(task, [], "tdd")
    text = chat.tok.apply_chat_template(
        msgs, tools=TOOL_SCHEMAS, tokenize=False, add_generation_prompt=True
    )
    assert text == chat.tdd_prompt(task)
