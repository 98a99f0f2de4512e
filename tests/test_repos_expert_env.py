"""The scripted expert through the real agent environment (codeloop.agent.env): every
call is valid, the episode submits, its final diff resolves the task with the hidden
tests restored, and the whole episode fits the tiny model's 1024 positions."""

from __future__ import annotations

import json

import pytest

from codeloop.agent.env import AgentEnv
from codeloop.agent.envdirs import env_paths
from codeloop.agent.executor import open_executor
from codeloop.agent.patches import apply_patch
from codeloop.agent.testrun import run_pytest
from codeloop.agent.workspace import copy_tree
from codeloop.config import AgentConfig, SandboxConfig
from codeloop.data.repos.expert import expert_calls
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import generate_repo_tasks

N_POSITIONS = 1024  # policy_init.n_positions of the embedded default


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("expert-env")
    tasks, trees = generate_repo_tasks(10, seed=41)
    for files in trees.values():
        store_files(files, root / "repos")
    cfg = AgentConfig(envs_dir=str(root / "envs"))
    sandbox = SandboxConfig(backend="local", workers=2, timeout_s=30.0)
    ex = open_executor(sandbox, cfg, [], workspaces=True)
    env = AgentEnv(ex, cfg, str(root / "repos"), str(root / "bases"))
    played = []
    for t in tasks:
        ep = env.reset(t)
        obs = [ep.step(c) for c in expert_calls(t, root / "repos")]
        played.append((t, ep, obs, ep.final_diff()))
        ep.close()
    yield root, ex, played
    ex.close()


def test_every_expert_call_is_a_valid_tool_call(episodes):
    _, _, played = episodes
    for t, _, obs, _ in played:
        assert [o.error_kind for o in obs] == [""] * len(obs), t.task_id


def test_the_expert_episode_submits_after_its_tests_pass(episodes):
    _, _, played = episodes
    for t, ep, obs, _ in played:
        assert ep.terminal_reason == "submitted"
        assert obs[0].tests_passed < obs[0].tests_total  # the first run shows the failure
        assert obs[-2].tests_passed == obs[-2].tests_total, t.task_id


def test_the_final_diff_resolves_the_task_with_hidden_tests_restored(episodes):
    root, ex, played = episodes
    for t, _, _, diff in played:
        assert diff, t.task_id
        fresh = ex.workspaces.new_workspace()
        copy_tree(str(root / "repos" / t.snapshot), fresh)
        apply_patch(fresh, t.bug_patch)
        apply_patch(fresh, diff)
        ids = [*t.fail_to_pass, *t.pass_to_pass, *t.hidden_tests]
        report = run_pytest(ex, fresh, ids, env_paths(t, str(root / "envs")), 30)
        assert report.outcomes and set(report.outcomes.values()) == {"passed"}, t.task_id


def test_a_whole_expert_episode_fits_the_tiny_models_context(episodes):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    _, _, played = episodes
    eps = [
        t.prompt
        + "".join(
            "\n" + json.dumps({"tool": a.tool, "args": json.loads(a.args)}) + "\n" + o.output
            for a, o in zip(_actions(t, played), obs, strict=True)
        )
        for t, _, obs, _ in played
    ]
    # the tokenizer learns from task text (other seeds' statements and repositories), not
    # from these episodes or their observations
    tasks, trees = generate_repo_tasks(200, seed=0)
    corpus = [t.prompt for t in tasks] + [v for f in trees.values() for v in f.values()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=2048, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    lengths = [len(tok.encode(e).ids) for e in eps]
    print(f"expert episode tokens: mean {sum(lengths) / len(lengths):.0f}, max {max(lengths)}")
    assert max(lengths) <= N_POSITIONS


def _actions(task, played):
    return next(ep.actions for t, ep, _, _ in played if t is task)
