"""Rollout rows are pinned: a function group and an agent group sampled by fixed tiny
policies in the real sandbox must come out byte for byte as they did when the golden file
was written (trajectory ids, prompt keys, token layout, actions, observations). Wall-clock
fields are left out: they measure the machine, not the episode.

The two policies are trained once, when the golden file is written, and kept beside it
(float16 weights, tests/data/golden_policies/): SFT is not the same on every CPU (AVX2 and
AVX-512 kernels round float32 sums differently and sixty steps at a high learning rate
amplify that into different samples), while sampling from fixed weights is. The sampled
tokens' log-probabilities still carry the last bits of the CPU's kernels, so floats match to
1e-4; every token, action and observation is compared exactly.

Rewrite the golden file (only when a change to the rows is meant):
    CODELOOP_WRITE_GOLDEN=1 pytest tests/test_rollout_golden.py"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
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
from codeloop.policy.agent_format import repo_corpus
from codeloop.policy.model import Policy, build_embedded, train_tokenizer
from codeloop.policy.sft import run_sft
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.demos import expert_demos
from codeloop.rollout.envs import run_episodes
from codeloop.sandbox import make_executor

GOLDEN = Path(__file__).parent / "data" / "rollout_golden.jsonl"
POLICIES = Path(__file__).parent / "data" / "golden_policies"
WRITE = os.environ.get("CODELOOP_WRITE_GOLDEN") == "1"
AGENT = AgentConfig(max_steps=5, invalid_call_limit=3, observation_chars=400, test_timeout_s=30)
CLOCK = {"duration_ms", "execution_time_ms"}


def _without_clock(value):
    if isinstance(value, dict):
        return {k: 0 if k in CLOCK else _without_clock(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


def _rows(trajs) -> list[str]:
    return [json.dumps(_without_clock(t.to_row()), sort_keys=True) for t in trajs]


def _function_tasks():
    t = generate_tasks(1, seed=3, max_depth=1)[0]
    t = dataclasses.replace(t, visible_tests=t.visible_tests[:3], hidden_tests=t.visible_tests[3:])
    wrong = t.visible_tests[2].rsplit("==", 1)[0] + "== 'not this'"
    broken = dataclasses.replace(t, task_id="t/broken", visible_tests=[*t.visible_tests[:2], wrong])
    return t, broken


def _function_policy(task):
    torch.manual_seed(0)
    tiny = PolicyInitConfig(vocab_size=400, n_layer=2, n_head=2, n_embd=64, n_positions=512)
    pol = build_embedded(Params(policy_init=tiny), [task])
    sft = SimpleNamespace(steps=60, batch_size=2, lr=1e-2, warmup_steps=5, max_len=512, seed=0)
    run_sft(pol, [task], sft)
    return pol


def _agent_policy(tasks, repos, env):
    from transformers import GPT2Config, GPT2LMHeadModel

    demos, _ = expert_demos(tasks, env, lambda t: expert_calls(t, repos))
    tok = train_tokenizer(tasks, 500, repo_corpus(tasks, repos))
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=64, n_layer=2, n_head=2,
                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    pol = Policy(GPT2LMHeadModel(cfg), tok, name="golden-agent", model_version="golden-agent")
    sft = SimpleNamespace(steps=120, batch_size=2, lr=3e-3, warmup_steps=5, max_len=1024,
                          revise_fraction=0.0, agent_fraction=0.5, seed=0)
    run_sft(pol, [], sft, demos=demos)
    return pol


def _kept(name: str, train) -> Policy:
    """The golden group's policy: trained and saved in float16 when the golden file is
    rewritten, loaded from tests/data/golden_policies/ otherwise."""
    path = POLICIES / name
    if WRITE:
        pol = train()
        pol.model.half()
        pol.save(path)
    pol = Policy.load(path)
    pol.model.float()
    pol.model_version = f"golden-{name}"
    return pol


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    repo_tasks, trees = generate_repo_tasks(2, seed=5, max_modules=2, tasks_per_repo=1)
    repos = root / "repos"
    for files in trees.values():
        store_files(files, repos)
    envs = copy_task_envs(repo_tasks, str(root / "clean_envs"), str(root / "envs"))
    ex = make_executor(SandboxConfig(workers=2, timeout_s=30.0), workspaces=True, envs_root=envs)
    try:
        task, broken = _function_tasks()
        func_policy = _kept("function", lambda: _function_policy(task))
        cfg = RolloutConfig(samples_per_task=2, max_steps=3, temperature=0.7, max_new_tokens=48,
                            agent_max_new_tokens=96, seed=3)
        ctx = EpisodeContext(cfg, "dv-golden", 4, 5.0, agent=AGENT, repos_dir=str(repos))
        out = run_episodes([task, broken], func_policy, ex, ctx)
        env = AgentEnv(ex, AGENT, str(repos))
        agent_policy = _kept("agent", lambda: _agent_policy(repo_tasks, str(repos), env))
        out += run_episodes(repo_tasks, agent_policy, ex, ctx)
    finally:
        ex.close()
    return _rows(out)


def test_golden_rows_are_written_when_asked(rows):
    if not WRITE:
        pytest.skip("CODELOOP_WRITE_GOLDEN=1 rewrites the golden rollout rows")
    GOLDEN.write_text("\n".join(rows) + "\n")


def _known(got, want):
    """``got`` cut to the fields the golden row has: fields added since keep their
    defaults in these episodes and are checked by their own tests."""
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: _known(got.get(k), v) for k, v in want.items()}
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        return [_known(g, w) for g, w in zip(got, want, strict=True)]
    return got


def _floats_off(got, want, path="row") -> list[str]:
    """Where ``got`` and ``want`` differ by more than the CPU's kernels explain: every
    non-float value must be equal, floats within 1e-4."""
    if isinstance(want, float) and isinstance(got, float):
        return [] if math.isclose(got, want, abs_tol=1e-4) else [f"{path}: {got} != {want}"]
    if isinstance(want, dict) and isinstance(got, dict) and got.keys() == want.keys():
        return [d for k in want for d in _floats_off(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True))
                for d in _floats_off(g, w, f"{path}[{i}]")]
    return [] if got == want and type(got) is type(want) else [f"{path}: {got!r} != {want!r}"]


def test_rollout_rows_match_the_golden_groups_token_for_token(rows):
    want = GOLDEN.read_text().splitlines()
    assert len(rows) == len(want)
    for i, (got, expected) in enumerate(zip(rows, want, strict=True)):
        cut = _known(json.loads(got), json.loads(expected))
        assert _floats_off(cut, json.loads(expected), f"row {i}") == []


def test_a_changed_token_or_a_drifted_logprob_is_reported_with_its_path():
    row = {"token_ids": [1, 2], "logprobs": [-0.5, -1.25], "actions": [{"code": "x"}]}
    assert _floats_off(row, row) == []
    near = {**row, "logprobs": [-0.5 + 3e-6, -1.25]}
    assert _floats_off(near, row) == []
    drift = {**row, "logprobs": [-0.5, -1.125]}
    assert _floats_off(drift, row) == ["row.logprobs[1]: -1.125 != -1.25"]
    token = {**row, "token_ids": [1, 3]}
    assert _floats_off(token, row) == ["row.token_ids[1]: 3 != 2"]
    assert _floats_off({**row, "token_ids": [1.0, 2]}, row) == ["row.token_ids[0]: 1.0 != 1"]


def test_the_golden_groups_hold_multi_turn_function_and_agent_episodes():
    kinds = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    func = [t for t in kinds if t["actions"] and t["actions"][0]["action_type"] != "tool"]
    agent = [t for t in kinds if t["actions"] and t["actions"][0]["action_type"] == "tool"]
    assert len(func) == 4 and len(agent) == 4
    assert any(len(t["actions"]) > 1 for t in func)
    assert any(a["tool"] == "run_tests" for t in agent for a in t["actions"])
