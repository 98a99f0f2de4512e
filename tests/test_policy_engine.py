"""policy.engine: vllm for real on the CPU: a tiny embedded Llama served by vLLM samples
function and agent episodes through the one episode loop (codeloop.policy.engine,
codeloop.policy.vllm_engine, codeloop.rollout.loop)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from codeloop.config import (
    AgentConfig,
    Params,
    PolicyInitConfig,
    RolloutConfig,
    TrainConfig,
)
from codeloop.data.repos.expert import expert_calls
from codeloop.io import read_trajectories, write_trajectories
from codeloop.policy.agent_format import repo_corpus
from codeloop.policy.engine import EngineError, EngineSettings, SamplingSpec
from codeloop.policy.engine_policy import open_engine_policy
from codeloop.policy.model import Policy, build_embedded
from codeloop.policy.sft import run_sft
from codeloop.policy.vllm_engine import CPU_BATCHED_TOKENS, ServerVllm
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.demos import expert_demos
from codeloop.rollout.envs import run_episodes
from codeloop.train.trainer import train_grpo
from tests._engine import require_engine, task_world

AGENT = AgentConfig(max_steps=4, invalid_call_limit=3, observation_chars=300, test_timeout_s=30)
SETTINGS = EngineSettings(device="cpu", seed=0, temperature=1.0)


def _policy(root, fn_tasks, repo_tasks, repos, env):
    """A tiny Llama-shaped embedded policy (head size 32: vLLM's CPU kernels need >= 32),
    briefly taught the function references and the expert's tool calls."""
    torch.manual_seed(0)
    shape = PolicyInitConfig(vocab_size=500, n_layer=2, n_head=2, n_embd=64, n_positions=1024)
    pol = build_embedded(Params(policy_init=shape), fn_tasks + repo_tasks,
                         repo_corpus(repo_tasks, repos))
    demos, _ = expert_demos(repo_tasks, env, lambda t: expert_calls(t, repos))
    sft = SimpleNamespace(steps=40, batch_size=4, lr=1e-2, warmup_steps=5, max_len=1024,
                          revise_fraction=0.0, agent_fraction=0.5, seed=0)
    run_sft(pol, fn_tasks, sft, demos=demos)
    pol.save(root / "policy")
    return root / "policy"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_engine()
    root = tmp_path_factory.mktemp("engine")
    w = task_world(root, AGENT)
    fn_tasks, repo_tasks, repos, ex, env = w.fn_tasks, w.repo_tasks, w.repos, w.ex, w.env
    path = _policy(root, fn_tasks, repo_tasks, repos, env)
    engine = open_engine_policy(path, SETTINGS)
    yield SimpleNamespace(root=root, tasks=fn_tasks + repo_tasks, repos=repos, ex=ex,
                          env=env, path=path, engine=engine, hf=Policy.load(path))
    engine.close()
    ex.close()


def _ctx(world, **kw):
    cfg = RolloutConfig(**{**dict(samples_per_task=2, max_steps=2, temperature=1.0, top_p=1.0,
                                  max_new_tokens=32, agent_max_new_tokens=48, seed=3,
                                  async_turns=False), **kw})
    return EpisodeContext(cfg, "dv-engine", 1, 10.0, agent=AGENT, repos_dir=world.repos)


def _rollout(world, policy, **kw):
    return run_episodes(world.tasks, policy, world.ex, _ctx(world, **kw), agent_env=world.env)


@pytest.fixture(scope="module")
def lockstep(world):
    return _rollout(world, world.engine)


def _layout_ok(t) -> bool:
    n = len(t.token_ids)
    gen = [i for i, m in enumerate(t.loss_mask) if m]
    return (
        len(t.loss_mask) == n == len(t.sample_logprobs)
        and all(t.sample_logprobs[i] == 0.0 for i, m in enumerate(t.loss_mask) if not m)
        and all(t.sample_logprobs[i] < 0.0 for i in gen)
        and bool(gen)
    )


def test_engine_episodes_cover_every_task_of_both_kinds_in_complete_groups(world, lockstep):
    assert [t.task_id for t in lockstep] == [t.task_id for t in world.tasks for _ in range(2)]
    kinds = {t.kind for t in world.tasks}
    assert kinds == {"function", "repo"}
    assert not [t.infra_error for t in lockstep if t.infra_error]
    assert {t.metadata.engine for t in lockstep} == {"vllm"}


def test_engine_rows_have_the_columns_and_token_layout_of_hf_rows(world, lockstep, tmp_path):
    hf_rows = _rollout(world, world.hf)
    assert [sorted(t.to_row()) for t in lockstep] == [sorted(t.to_row()) for t in hf_rows]
    assert all(_layout_ok(t) for t in lockstep)
    agent = [t for t in lockstep if t.actions and t.actions[0].action_type == "tool"]
    assert agent and all(a.raw for t in agent for a in t.actions)
    write_trajectories(tmp_path / "rows", lockstep)
    back = read_trajectories(tmp_path / "rows")
    assert [t.to_row() for t in back] == [t.to_row() for t in lockstep]


def test_the_same_seeds_give_the_same_episodes(world, lockstep):
    again = _rollout(world, world.engine)
    assert [t.token_ids for t in again] == [t.token_ids for t in lockstep]


def test_another_rollout_seed_gives_other_samples(world, lockstep):
    other = _rollout(world, world.engine, seed=4)
    assert [t.token_ids for t in other] != [t.token_ids for t in lockstep]


def test_asynchronous_turns_give_the_lock_step_episodes(world, lockstep):
    free = _rollout(world, world.engine, async_turns=True)
    assert [t.token_ids for t in free] == [t.token_ids for t in lockstep]
    assert [t.terminal_reason for t in free] == [t.terminal_reason for t in lockstep]
    gaps = [abs(a - b) for x, y in zip(free, lockstep, strict=True)
            for a, b in zip(x.sample_logprobs, y.sample_logprobs, strict=True)]
    assert max(gaps) < 1e-3  # other batch-mates: float rounding only


def _hf_logps(policy: Policy, ids: list[int]) -> list[float]:
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1))
    return [0.0, *lp.squeeze(-1).tolist()]


def test_engine_log_probs_agree_with_a_cpu_forward_pass(world, lockstep):
    gaps = []
    for t in lockstep[:4] + lockstep[-2:]:
        ref = _hf_logps(world.hf, t.token_ids)
        gaps += [abs(ref[i] - t.sample_logprobs[i]) for i, m in enumerate(t.loss_mask) if m]
    # float32 on both sides (policy.engine_dtype auto: the checkpoint's), another kernel and
    # summation order: rounding only
    assert gaps and sum(gaps) / len(gaps) < 1e-4 and max(gaps) < 1e-3


def test_a_stopped_generation_ends_on_one_of_the_formats_stop_tokens(world):
    prompt = world.engine.encode(world.tasks[0].prompt)
    gens = world.engine.generate([prompt], n=8, max_new_tokens=64, seed=1)[0]
    stopped = [g for g in gens if g.finish_reason == "stop"]
    assert stopped and all(g.token_ids[-1] in world.engine.stop_ids() for g in stopped)
    assert all(len(g.token_ids) == 64 for g in gens if g.finish_reason == "length")


def test_more_prompt_tokens_than_one_engine_step_holds_sample_as_each_prompt_alone(world):
    # each prompt is prefilled whole on a CPU (codeloop.policy.vllm_engine.llm_kwargs)
    size = world.engine.max_context - 24
    n = CPU_BATCHED_TOKENS // size + 2
    task_ids = world.engine.encode(world.tasks[0].prompt)
    rows = [[(k + i) % 400 + 4 for i in range(size - len(task_ids))] + task_ids
            for k in range(n)]
    spec = SamplingSpec(1.0, 1.0, 1.0, 8)
    together = world.engine.sample_rows(rows, list(range(n)), spec)
    alone = world.engine.sample_rows(rows[-1:], [n - 1], spec)
    assert all(g.token_ids for g in together)
    assert together[-1].token_ids == alone[0].token_ids


def test_a_prompt_that_fills_the_context_is_answered_without_the_engine(world):
    full = [5] * world.engine.max_context
    (g,) = world.engine.generate([full], n=1, max_new_tokens=8)[0]
    assert (g.finish_reason, g.token_ids) == ("context", [])


def _scored(rows):
    """Rewards that split every group (first sample 1, second 0): every group trains."""
    out = []
    for i, t in enumerate(rows):
        meta = dataclasses.replace(t.metadata, reward_fn_version="test")
        out.append(dataclasses.replace(t, reward=float(i % 2 == 0), metadata=meta))
    return out


def test_a_grpo_update_then_a_sync_changes_what_the_engine_samples(world, lockstep, tmp_path):
    cfg = TrainConfig(steps=2, lr=5e-3, micro_batch_size=4, grad_accum=2, beta=0.0, rft="off")
    summary = train_grpo(world.path, _scored(lockstep), cfg, tmp_path / "candidate")
    assert summary["engine_rows"] == len(lockstep)
    assert 0.0 <= summary["engine_logp_gap"] < 1e-4
    assert summary["engine_is_truncated"] == 0.0
    probe = lockstep[0].token_ids
    spec = SamplingSpec(1.0, 1.0, 1.0, 16)
    before = world.engine.sample_rows([probe[:40]] * 2, [7, 8], spec)
    seconds = world.engine.sync(tmp_path / "candidate")
    try:
        after = world.engine.sample_rows([probe[:40]] * 2, [7, 8], spec)
        assert world.engine.model_version == summary["model_version"] and seconds >= 0.0
        assert [g.logprobs for g in after] != [g.logprobs for g in before]
        new = Policy.load(tmp_path / "candidate")
        ref = _hf_logps(new, probe[:40] + after[0].token_ids)[40:]
        # the new weights everywhere, the output head tied to the embeddings included
        assert max(abs(a - b) for a, b in zip(ref, after[0].logprobs, strict=True)) < 1e-3
    finally:
        world.engine.sync(world.path)
    back = world.engine.sample_rows([probe[:40]] * 2, [7, 8], spec)
    assert [g.token_ids for g in back] == [g.token_ids for g in before]


def test_an_engine_interpreter_without_vllm_is_an_error_naming_the_key(world, monkeypatch):
    import sys

    monkeypatch.setenv("CODELOOP_ENGINE_PYTHON", sys.executable)  # our venv: no vllm in it
    with pytest.raises(EngineError, match=r"policy\.engine: vllm did not start"):
        open_engine_policy(world.path, SETTINGS)


def test_a_model_the_engine_cannot_load_is_an_error_naming_the_key(world, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in world.path.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "architectures": ["NoSuchLM"]}))
    with pytest.raises(EngineError, match=r"policy\.engine: vllm did not start") as err:
        open_engine_policy(bad, SETTINGS)
    log = re.search(r"engine log (\S+):", str(err.value)).group(1)
    assert "NoSuchLM" in Path(log).read_text()  # the log it names is kept


def test_a_server_that_is_down_is_an_error_naming_policy_engine_url(world):
    with pytest.raises(EngineError, match=r"policy\.engine_url: no vLLM server answers"):
        ServerVllm("http://127.0.0.1:9", world.path, "v")


def test_a_quantized_base_is_refused_not_sampled_in_full_precision(world):
    with pytest.raises(EngineError, match=r"train\.lora\.quantize"):
        open_engine_policy(world.path, SETTINGS, quantize="4bit")
