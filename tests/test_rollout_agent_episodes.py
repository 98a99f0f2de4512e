"""Agent episodes on repository tasks through the real environment (sealed workspaces):
the batched loop, its token layout, terminal reasons, and an expert-taught policy that
resolves a task (codeloop.rollout.agent_episodes, codeloop.rollout.demos)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from codeloop.agent.env import AgentEnv
from codeloop.agent.executor import copy_task_envs
from codeloop.config import AgentConfig, RolloutConfig, SandboxConfig
from codeloop.data.repos.expert import expert_calls
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import generate_repo_tasks
from codeloop.policy.agent_format import CompactAgentFormat, repo_corpus
from codeloop.policy.model import Policy, train_tokenizer
from codeloop.policy.sft import run_sft
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.demos import expert_demos
from codeloop.rollout.envs import run_episodes
from codeloop.sandbox import make_executor
from codeloop.schema import TERMINAL_REASONS

AGENT = AgentConfig(max_steps=6, invalid_call_limit=3, observation_chars=600, test_timeout_s=30)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("agent")
    tasks, trees = generate_repo_tasks(2, seed=5, max_modules=2, tasks_per_repo=1)
    repos = root / "repos"
    for files in trees.values():
        store_files(files, repos)
    envs = copy_task_envs(tasks, str(root / "clean_envs"), str(root / "envs"))
    ex = make_executor(SandboxConfig(workers=2, timeout_s=30.0), workspaces=True, envs_root=envs)
    env = AgentEnv(ex, AGENT, str(repos))
    yield SimpleNamespace(tasks=tasks, repos=str(repos), ex=ex, env=env, envs=envs)
    ex.close()


def _policy(world, n_positions=1024):
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = train_tokenizer(world.tasks, 500, repo_corpus(world.tasks, world.repos))
    cfg = GPT2Config(vocab_size=len(tok), n_positions=n_positions, n_embd=64, n_layer=2, n_head=2,
                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return Policy(GPT2LMHeadModel(cfg), tok, name="tiny-agent")


def _cfg(**kw):
    base = dict(samples_per_task=2, temperature=1.0, top_p=1.0, agent_max_new_tokens=24, seed=3)
    return RolloutConfig(**{**base, **kw})


def _ctx(world, cfg, iteration):
    return EpisodeContext(cfg, "dv", iteration, 30.0, agent=AGENT, repos_dir=world.repos)


@pytest.fixture(scope="module")
def untrained(world):
    policy = _policy(world)
    trajs = run_episodes(world.tasks, policy, world.ex, _ctx(world, _cfg(), 2),
                         agent_env=world.env)
    return policy, trajs


def test_rollout_agent_every_task_gets_a_complete_group(untrained, world):
    _, trajs = untrained
    assert [t.task_id for t in trajs] == [t.task_id for t in world.tasks for _ in range(2)]
    assert len({t.prompt_key for t in trajs}) == len(world.tasks)


def test_rollout_agent_terminal_reasons_are_known_agent_reasons(untrained):
    _, trajs = untrained
    reasons = {t.terminal_reason for t in trajs}
    assert reasons <= set(TERMINAL_REASONS)
    assert reasons <= {"submitted", "max_steps", "invalid_action_limit", "context_full"}


def test_rollout_agent_loss_mask_covers_exactly_the_sampled_calls(untrained):
    policy, trajs = untrained
    for t in trajs:
        gen = [i for i, m in zip(t.token_ids, t.loss_mask, strict=True) if m]
        assert len(t.token_ids) == len(t.loss_mask) == len(t.sample_logprobs)
        assert policy.decode(gen) == "".join(a.raw for a in t.actions)


def test_rollout_agent_log_probs_only_on_sampled_tokens(untrained):
    _, trajs = untrained
    for t in trajs:
        assert all(lp == 0.0 for lp, m in zip(t.sample_logprobs, t.loss_mask, strict=True) if not m)
        assert any(lp != 0.0 for lp in t.sample_logprobs)


def test_rollout_agent_observations_follow_each_call_in_the_token_ids(untrained):
    policy, trajs = untrained
    fmt = CompactAgentFormat(policy.tokenizer)
    t = max(trajs, key=lambda t: len(t.actions))
    a = t.actions[0]
    obs_ids = fmt.observation_ids(None, a.observation)
    flat = t.token_ids
    assert any(flat[i : i + len(obs_ids)] == obs_ids for i in range(len(flat)))


def test_rollout_agent_unparseable_turns_are_parse_error_observations(untrained):
    _, trajs = untrained
    bad = [a for t in trajs for a in t.actions if not a.tool]
    assert bad and all(a.observation.error_kind == "parse_error" for a in bad)


def test_rollout_agent_counts_match_the_actions(untrained):
    _, trajs = untrained
    for t in trajs:
        assert t.tool_calls == len(t.actions)
        assert t.tool_errors == sum(bool(a.observation.error_kind) for a in t.actions)


def test_rollout_agent_episodes_leave_no_workspace_behind(untrained, world):
    import os

    assert [d for d in os.listdir(world.ex.workspaces.path) if not d.startswith(".")] == []


@pytest.fixture(scope="module")
def taught(world):
    """A tiny policy SFT'd on the expert's real episodes, then rolled out near-greedily."""
    demos, report = expert_demos(world.tasks, world.env, lambda t: expert_calls(t, world.repos))
    policy = _policy(world)
    sft = SimpleNamespace(steps=120, batch_size=2, lr=3e-3, warmup_steps=5, max_len=1024,
                          revise_fraction=0.0, agent_fraction=0.5, seed=0)
    run_sft(policy, [], sft, demos=demos)
    trajs = run_episodes(world.tasks, policy, world.ex,
                         _ctx(world, _cfg(temperature=0.05, agent_max_new_tokens=96), 0),
                         agent_env=world.env)
    return demos, report, trajs


def test_rollout_agent_expert_demos_play_through_the_real_env(taught, world):
    demos, report, _ = taught
    assert report["demos"] == len(world.tasks), report
    assert all(steps[-1][0]["tool"] == "submit" for _, steps in demos)


def test_rollout_agent_a_policy_taught_by_the_expert_replays_its_calls(taught, world):
    demos, _, trajs = taught
    want = {task.task_id: [c["tool"] for c, _ in steps] for task, steps in demos}
    assert any([a.tool for a in t.actions] == want[t.task_id] for t in trajs)


def test_rollout_agent_a_submitted_episode_carries_the_fix_as_final_diff(taught):
    _, _, trajs = taught
    done = [t for t in trajs if t.terminal_reason == "submitted"]
    assert done and all(t.final_diff.startswith("diff --git") for t in done)


def test_rollout_agent_mixed_chunk_keeps_task_order(world):
    from codeloop.data.generator import generate_tasks

    funcs = generate_tasks(2, seed=1)
    tasks = [funcs[0], world.tasks[0], funcs[1]]
    policy = _policy(world, n_positions=1024)
    ctx = EpisodeContext(_cfg(samples_per_task=1, max_new_tokens=8), "dv", 0, 5.0, agent=AGENT,
                         repos_dir=world.repos)
    trajs = run_episodes(tasks, policy, world.ex, ctx)
    assert [t.task_id for t in trajs] == [t.task_id for t in tasks]
    assert [bool(t.actions and t.actions[0].action_type == "tool") for t in trajs] == [
        False, True, False,
    ]
