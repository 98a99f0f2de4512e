"""A chat model through the engine: a tiny Qwen2 (ChatML template, tools in the system
turn; head size 32 for vLLM's CPU kernels), briefly taught reference solutions and the
expert's tool calls, samples function and agent episodes with vLLM. Its prompts are the
template's, token for token what the hf path builds, and its turns end on the template's
end-of-turn token."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from codeloop.config import AgentConfig, RolloutConfig
from codeloop.data.repos.expert import expert_calls
from codeloop.policy.agent_format import agent_format_for
from codeloop.policy.engine import EngineSettings
from codeloop.policy.engine_policy import open_engine_policy
from codeloop.policy.model import Policy
from codeloop.policy.sft import run_sft
from codeloop.policy.tiny import save_tiny
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.demos import expert_demos
from codeloop.rollout.envs import run_episodes
from tests._engine import require_engine, task_world

# room for the expert's whole plan (its demos are rejected when the episode ends first)
AGENT = AgentConfig(max_steps=8, invalid_call_limit=3, observation_chars=300, test_timeout_s=30)
SHAPE = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=4096)  # the tools' schemas alone are ~2k tiny-BPE tokens
ROLLOUT = dict(samples_per_task=2, max_steps=2, temperature=1.0, top_p=1.0, max_new_tokens=32,
               agent_max_new_tokens=48, seed=3, async_turns=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_engine()
    root = tmp_path_factory.mktemp("chat-engine")
    w = task_world(root, AGENT)
    fn_tasks, repo_tasks, repos, ex, env = w.fn_tasks, w.repo_tasks, w.repos, w.ex, w.env
    policy = Policy.load(save_tiny(root / "base", "qwen2", seed=0, **SHAPE))
    demos, _ = expert_demos(repo_tasks, env, lambda t: expert_calls(t, repos))
    torch.manual_seed(0)
    sft = SimpleNamespace(steps=30, batch_size=2, lr=1e-2, warmup_steps=3, max_len=4096,
                          revise_fraction=0.0, agent_fraction=0.5, seed=0)
    stats = run_sft(policy, fn_tasks, sft, demos=demos)
    assert stats["agent_demos"] == len(repo_tasks)  # the agent turns were taught too
    policy.save(root / "policy")
    engine = open_engine_policy(root / "policy", EngineSettings(device="cpu", seed=0))
    ctx = EpisodeContext(RolloutConfig(**ROLLOUT), "dv-chat", 1, 10.0, agent=AGENT,
                         repos_dir=repos)
    tasks = fn_tasks + repo_tasks
    yield SimpleNamespace(tasks=tasks, engine=engine, hf=Policy.load(root / "policy"),
                          rows=run_episodes(tasks, engine, ex, ctx, agent_env=env),
                          hf_rows=run_episodes(tasks, policy, ex, ctx, agent_env=env))
    engine.close()
    ex.close()


def _prompt(t) -> list[int]:
    return t.token_ids[: t.loss_mask.index(1)]


def _turns(t) -> list[list[int]]:
    """The generated spans of an episode, one per model turn."""
    spans, cur = [], []
    for i, m in zip(t.token_ids, t.loss_mask, strict=True):
        if m:
            cur.append(i)
        elif cur:
            spans.append(cur)
            cur = []
    return spans + ([cur] if cur else [])


def _kinds(world) -> dict[str, str]:
    return {t.task_id: t.kind for t in world.tasks}


def test_chat_engine_episodes_cover_both_kinds_without_errors(world):
    assert {_kinds(world)[t.task_id] for t in world.rows} == {"function", "repo"}
    assert not [t.infra_error for t in world.rows if t.infra_error]
    assert {t.metadata.engine for t in world.rows} == {"vllm"}


def test_chat_engine_prompts_are_the_hf_paths_prompt_ids(world):
    assert [_prompt(t) for t in world.rows] == [_prompt(t) for t in world.hf_rows]


def test_chat_engine_prompts_are_the_chat_templates_turns(world):
    for t in world.rows:
        text = world.engine.tokenizer.decode(_prompt(t))
        assert text.startswith("<|im_start|>system\n")
        assert text.endswith("<|im_start|>assistant\n")
    repo = [t for t in world.rows if _kinds(world)[t.task_id] == "repo"]
    assert all("# Tools\n<tools>" in world.engine.tokenizer.decode(_prompt(t)) for t in repo)


def test_every_chat_engine_turn_ends_on_an_end_of_turn_id_or_fills_its_budget(world):
    stops = set(world.engine.stop_ids())
    budget = {"function": ROLLOUT["max_new_tokens"], "repo": ROLLOUT["agent_max_new_tokens"]}
    stopped = set()
    for t in world.rows:
        kind = _kinds(world)[t.task_id]
        for turn in _turns(t):
            assert turn[-1] in stops or len(turn) == budget[kind]
            if turn[-1] in stops:
                stopped.add(kind)
    assert stopped == {"function", "repo"}  # both kinds really stopped: not a vacuous check


def test_the_chat_formats_end_of_turn_id_is_among_the_engines_stop_ids(world):
    im_end = world.engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in world.engine.stop_ids() and im_end in world.hf.stop_ids()


@pytest.mark.parametrize("kind", ["function", "repo"])
def test_a_chat_generation_that_stops_ends_on_an_end_of_turn_id(world, kind):
    task = next(t for t in world.tasks if t.kind == kind)
    fmt = agent_format_for(world.engine.tokenizer) if kind == "repo" else world.engine.format
    prompt = fmt.encode(fmt.prompt(task)) if kind == "repo" else fmt.prompt_ids(task)
    gens = world.engine.generate([prompt], n=8, max_new_tokens=64, seed=1)[0]
    stopped = [g for g in gens if g.finish_reason == "stop"]
    assert stopped and all(g.token_ids[-1] in world.engine.stop_ids() for g in stopped)
    assert all(len(g.token_ids) == 64 for g in gens if g.finish_reason == "length")
