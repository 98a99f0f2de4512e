"""Episode modes through the one loop, with tiny real policies taught in each mode's layout
and the real sandbox: rubber_duck (explain a failure in prose, then fix) on function and
repository tasks, and tdd (write the tests first, then the code) on function tasks."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from codeloop.agent.env import AgentEnv
from codeloop.agent.executor import copy_task_envs
from codeloop.config import (
    AgentConfig,
    Params,
    PolicyInitConfig,
    RolloutConfig,
    SandboxConfig,
)
from codeloop.data.generator import generate_tasks
from codeloop.data.repos.expert import expert_calls
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import generate_repo_tasks
from codeloop.policy import prompts as P
from codeloop.policy.agent_format import EXPLAIN_FAILURE, repo_corpus
from codeloop.policy.model import Policy, build_embedded, train_tokenizer
from codeloop.policy.sft import run_sft, sft_examples
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.demos import expert_demos
from codeloop.rollout.envs import run_episodes
from codeloop.sandbox import make_executor

AGENT = AgentConfig(max_steps=6, invalid_call_limit=3, observation_chars=400, test_timeout_s=30)
SFT = SimpleNamespace(steps=80, batch_size=2, lr=1e-2, warmup_steps=5, max_len=512, seed=0,
                      revise_fraction=1.0)


@pytest.fixture(scope="module")
def tasks():
    t = generate_tasks(1, seed=3, max_depth=1)[0]
    t = dataclasses.replace(t, visible_tests=t.visible_tests[:3], hidden_tests=t.visible_tests[3:])
    wrong = t.visible_tests[2].rsplit("==", 1)[0] + "== 'not this'"
    broken = dataclasses.replace(t, task_id="t/broken", visible_tests=[*t.visible_tests[:2], wrong])
    return t, broken


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(timeout_s=5.0, workers=2))
    yield ex
    ex.close()


def _taught(task, mode):
    torch.manual_seed(0)
    tiny = PolicyInitConfig(vocab_size=400, n_layer=2, n_head=2, n_embd=64, n_positions=512)
    pol = build_embedded(Params(policy_init=tiny), [task])
    pol.model_version = f"taught-{mode}"
    run_sft(pol, [task], SFT, mode=mode)
    return pol


def _roll(policy, tasks, executor, mode, max_steps=2):
    cfg = RolloutConfig(samples_per_task=2, max_steps=max_steps, temperature=0.05,
                        max_new_tokens=64, seed=1, mode=mode)
    return run_episodes(list(tasks), policy, executor, EpisodeContext(cfg, "dv", 0, 5.0))


@pytest.fixture(scope="module")
def duck(tasks, executor):
    policy = _taught(tasks[0], "rubber_duck")
    return policy, _roll(policy, tasks, executor, "rubber_duck")


@pytest.fixture(scope="module")
def tdd(tasks, executor):
    policy = _taught(tasks[0], "tdd")
    return policy, _roll(policy, tasks, executor, "tdd")


def test_rubber_duck_explains_a_failed_run_before_the_fix(duck):
    _, trajs = duck
    broken = [t for t in trajs if t.task_id == "t/broken"]
    assert broken and all(
        [a.action_type for a in t.actions] == ["generate", "explain", "revise"] for t in broken
    )
    assert all(t.actions[1].content.strip() for t in broken)


def test_rubber_duck_explanation_is_trained_like_any_generated_text(duck):
    policy, trajs = duck
    t = next(t for t in trajs if t.task_id == "t/broken")
    generated = policy.decode([i for i, m in zip(t.token_ids, t.loss_mask, strict=True) if m])
    assert t.actions[1].content in generated
    context = policy.decode([i for i, m in zip(t.token_ids, t.loss_mask, strict=True) if not m])
    assert P.EXPLAIN_CUE in context


def test_rubber_duck_episodes_passing_first_need_no_explanation(duck):
    _, trajs = duck
    solved = [t for t in trajs if t.task_id != "t/broken"]
    assert solved and all(t.terminal_reason == "all_tests_passed" for t in solved)
    assert all(a.action_type != "explain" for t in solved for a in t.actions)


def test_rubber_duck_rows_record_their_mode_and_a_group_key_of_their_own(duck, tasks, executor):
    policy, trajs = duck
    assert {t.metadata.episode_mode for t in trajs} == {"rubber_duck"}
    plain = _roll(policy, tasks[:1], executor, "self_debug", max_steps=1)
    assert plain[0].metadata.episode_mode == ""
    assert plain[0].prompt_key != trajs[0].prompt_key


def test_tdd_writes_tests_first_and_keeps_them_apart_from_the_task_tests(tdd, tasks):
    _, trajs = tdd
    assert all(t.actions[0].action_type == "write_tests" for t in trajs)
    assert all(t.actions[1].action_type == "generate" for t in trajs if len(t.actions) > 1)
    first = [t for t in trajs if t.task_id == tasks[0].task_id]
    assert all(t.model_tests.startswith("assert ") for t in first)
    assert all(line not in tasks[0].hidden_tests for t in first for line in t.model_tests.splitlines())


def test_tdd_prompt_holds_the_statement_and_no_visible_test(tdd, tasks):
    _, trajs = tdd
    assert trajs[0].prompt == P.tests_prompt(tasks[0])
    assert not any(test in trajs[0].prompt for test in tasks[0].visible_tests)


def test_tdd_code_still_runs_on_the_visible_tests(tdd, tasks):
    _, trajs = tdd
    solved = [t for t in trajs if t.task_id == tasks[0].task_id]
    assert all(t.terminal_reason == "all_tests_passed" for t in solved)
    assert all(t.final_code.strip() for t in solved)


def test_sft_in_tdd_mode_trains_the_visible_asserts_then_the_code(tasks):
    policy = _taught(tasks[0], "self_debug")
    [(ids, mask), *_] = sft_examples(policy, [tasks[0]], 512, mode="tdd")
    trained = policy.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert tasks[0].visible_tests[0] in trained
    assert P.TESTS_CUE in policy.decode(ids)


def test_sft_in_rubber_duck_mode_trains_an_explanation_naming_the_failing_test(tasks):
    policy = _taught(tasks[0], "self_debug")
    examples = sft_examples(policy, [tasks[0]], 512, revise_fraction=1.0, mode="rubber_duck")
    ids, mask = examples[1]
    trained = policy.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert "fails: the code returns" in trained


@pytest.fixture(scope="module")
def agent_duck(tmp_path_factory):
    root = tmp_path_factory.mktemp("duck")
    repo_tasks, trees = generate_repo_tasks(2, seed=5, max_modules=2, tasks_per_repo=1)
    repos = root / "repos"
    for files in trees.values():
        store_files(files, repos)
    envs = copy_task_envs(repo_tasks, str(root / "clean_envs"), str(root / "envs"))
    ex = make_executor(SandboxConfig(workers=2, timeout_s=30.0), workspaces=True, envs_root=envs)
    try:
        demos, _ = expert_demos(repo_tasks, AgentEnv(ex, AGENT, str(repos)),
                                lambda t: expert_calls(t, str(repos)))
        tok = train_tokenizer(repo_tasks, 500, repo_corpus(repo_tasks, str(repos)))
        policy = _agent_policy(tok)
        sft = SimpleNamespace(steps=120, batch_size=2, lr=3e-3, warmup_steps=5, max_len=1024,
                              revise_fraction=0.0, agent_fraction=0.5, seed=0)
        run_sft(policy, [], sft, demos=demos, agent_mode="rubber_duck")
        cfg = RolloutConfig(samples_per_task=2, temperature=0.05, agent_max_new_tokens=96,
                            seed=3, agent_mode="rubber_duck")
        ctx = EpisodeContext(cfg, "dv", 0, 5.0, agent=AGENT, repos_dir=str(repos))
        yield policy, run_episodes(repo_tasks, policy, ex, ctx)
    finally:
        ex.close()


def _agent_policy(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=64, n_layer=2, n_head=2,
                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return Policy(GPT2LMHeadModel(cfg), tok, name="duck-agent", model_version="duck-agent")


def test_agent_rubber_duck_explains_after_a_failing_test_run(agent_duck):
    _, trajs = agent_duck
    for t in trajs:
        kinds = [(a.action_type, a.tool) for a in t.actions]
        for k, (kind, _) in enumerate(kinds):
            if kind == "explain":
                assert kinds[k - 1] == ("tool", "run_tests")
    assert any(a.action_type == "explain" for t in trajs for a in t.actions)


def test_agent_rubber_duck_counts_only_tool_calls(agent_duck):
    _, trajs = agent_duck
    for t in trajs:
        assert t.tool_calls == sum(a.action_type == "tool" for a in t.actions)


def test_agent_rubber_duck_still_submits_a_diff(agent_duck):
    policy, trajs = agent_duck
    done = [t for t in trajs if t.terminal_reason == "submitted"]
    assert done and all(t.final_diff.startswith("diff --git") for t in done)
    context = policy.decode([i for i, m in zip(done[0].token_ids, done[0].loss_mask,
                                                strict=True) if not m])
    assert EXPLAIN_FAILURE in context


def test_agent_tdd_keeps_the_test_files_the_model_wrote():
    import json

    from codeloop.rollout.repo_env import model_test_files
    from codeloop.schema import Action, Observation

    def write(path, content, error=""):
        args = json.dumps({"path": path, "content": content})
        return Action(step=0, action_type="tool", content="", tool="write_file", args=args,
                      observation=Observation(error_kind=error))

    acts = [write("tests/test_model.py", "v1"), write("pkg/a.py", "code"),
            write("tests/test_model.py", "v2"), write("tests/test_other.py", "x", "denied")]
    assert json.loads(model_test_files(acts)) == {"tests/test_model.py": "v2"}
    assert model_test_files(acts[1:2]) == ""


def test_agent_tdd_prompt_asks_for_a_test_file_first(agent_duck):
    from codeloop.policy.agent_format import TDD_ASK, agent_format_for
    from codeloop.schema import Task

    policy, _ = agent_duck
    fmt = agent_format_for(policy.tokenizer)
    task = Task("r", "synthetic_repo", "Fix the bug.", kind="repo")
    assert TDD_ASK in fmt.tdd_prompt(task) and TDD_ASK not in fmt.prompt(task)
    assert fmt.tdd_prompt(task).endswith(fmt.prompt(task)[-len("<|tool|>"):])
