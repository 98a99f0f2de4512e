"""Agent episodes through the vLLM engine: lock-step turns vs asynchronous turns, one run.

    .venv/bin/python bench/agent_async.py [--tasks 12] [--samples 4] [--reps 2] [--out F]

``bash scripts/setup.sh --vllm`` first. The workload: repository tasks (synthetic repos,
two modules each) played by the embedded model of params.yaml's policy_init shape, taught
the scripted expert's tool calls on other repositories (``--sft-steps``) so its episodes
differ in length: some submit after a few calls, some run out of valid calls, some use
every step, and its turns stop anywhere up to ``--max-new-tokens``. The same engine, the
same seeds, the same sandbox (``--workers``) then play the workload both ways
(``rollout.async_turns``, codeloop.rollout.loop):

- lock-step: every live episode's turn is generated as one batch, then their tool calls
  run as one sandbox batch, so a turn lasts as long as its longest generation and its
  slowest call;
- asynchronous: each episode's next turn goes to the engine as soon as its observation is
  back, and its call to the sandbox as soon as its turn is generated.

Modes alternate ``--reps`` times (the first run of each also warms up). Printed: turns
(model calls), wall seconds and turns/s of each run, the tool calls' own seconds summed
over episodes (what each call took in the sandbox, as the environment timed it: it grows
when calls wait for a core), async / lock-step, and whether the
two modes gave the same trajectories (token ids, terminal reasons) and how far their
sampler log-probs differ (an episode's own seed decides its samples in both modes; its
batch-mates differ, so its log-probs may differ by float rounding).

On a CPU with few cores asynchronous turns are expected to gain little or lose: the
engine's decode steps and the episodes' tool calls then run at the same time on the same
cores (vLLM's CPU backend binds its threads to them), so what lock-step does one after the
other, async does contending, and each asynchronous call is a sandbox job of its own where
lock-step runs a turn's calls as one batch. Async pays where the engine has a device of
its own (a GPU) and a turn's longest generation or slowest call would otherwise hold up
every episode of the turn.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.agent.env import AgentEnv  # noqa: E402
from codeloop.agent.executor import copy_task_envs  # noqa: E402
from codeloop.config import AgentConfig, RolloutConfig, SandboxConfig, load_params  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.data.repos.expert import expert_calls  # noqa: E402
from codeloop.data.repos.store import store_files  # noqa: E402
from codeloop.data.repos.synth import generate_repo_tasks  # noqa: E402
from codeloop.policy.agent_format import repo_corpus  # noqa: E402
from codeloop.policy.engine import EngineSettings  # noqa: E402
from codeloop.policy.engine_policy import open_engine_policy  # noqa: E402
from codeloop.policy.model import build_embedded  # noqa: E402
from codeloop.policy.sft import run_sft  # noqa: E402
from codeloop.rollout.context import EpisodeContext  # noqa: E402
from codeloop.rollout.demos import expert_demos  # noqa: E402
from codeloop.rollout.envs import run_episodes  # noqa: E402
from codeloop.sandbox import make_executor  # noqa: E402


def _world(root: Path, a):
    """(workload tasks, training tasks, repos dir, executor, agent env, agent config)."""
    train, train_trees = generate_repo_tasks(a.train_tasks, seed=a.seed + 1, max_modules=2,
                                             tasks_per_repo=2)
    work, work_trees = generate_repo_tasks(a.tasks, seed=a.seed + 2, max_modules=2,
                                           tasks_per_repo=2)
    repos = root / "repos"
    for files in [*train_trees.values(), *work_trees.values()]:
        store_files(files, repos)
    envs = copy_task_envs(train + work, str(root / "clean_envs"), str(root / "envs"))
    ex = make_executor(SandboxConfig(workers=a.workers, timeout_s=30.0), workspaces=True,
                       envs_root=envs)
    cfg = AgentConfig(max_steps=a.max_steps, invalid_call_limit=3, observation_chars=400,
                      test_timeout_s=30)
    return work, train, str(repos), ex, AgentEnv(ex, cfg, str(repos)), cfg


def _policy(root: Path, a, train, repos: str, env) -> Path:
    """params.yaml's embedded shape (head size 32), taught the expert on other repos."""
    torch.manual_seed(a.seed)
    params = load_params(a.params)
    fn_tasks = generate_tasks(40, seed=a.seed, max_depth=1)
    policy = build_embedded(params, fn_tasks + train, repo_corpus(train, repos))
    demos, stats = expert_demos(train, env, lambda t: expert_calls(t, repos))
    sft = SimpleNamespace(steps=a.sft_steps, batch_size=4, lr=3e-3, warmup_steps=10,
                          max_len=policy.max_context, revise_fraction=0.0,
                          agent_fraction=0.8, seed=a.seed)
    print(f"sft: {stats['demos']} expert demos, {a.sft_steps} steps ...", flush=True)
    run_sft(policy, fn_tasks, sft, demos=demos)
    policy.save(root / "policy")
    return root / "policy"


def _run(tasks, engine, ex, env, agent, repos, a, async_turns: bool):
    cfg = RolloutConfig(samples_per_task=a.samples, max_steps=1, temperature=1.0, top_p=1.0,
                        agent_max_new_tokens=a.max_new_tokens, seed=a.seed,
                        async_turns=async_turns)
    ctx = EpisodeContext(cfg, "bench-async", 0, 30.0, agent=agent, repos_dir=repos)
    t0 = time.perf_counter()
    rows = run_episodes(tasks, engine, ex, ctx, agent_env=env)
    return rows, time.perf_counter() - t0


def _compare(lock, free) -> dict:
    same_ids = [x.token_ids == y.token_ids for x, y in zip(lock, free, strict=True)]
    same_end = [x.terminal_reason == y.terminal_reason for x, y in zip(lock, free, strict=True)]
    gaps = [abs(p - q) for x, y in zip(lock, free, strict=True) if x.token_ids == y.token_ids
            for p, q in zip(x.sample_logprobs, y.sample_logprobs, strict=True)]
    return {"episodes": len(lock), "same_token_ids": sum(same_ids),
            "same_terminal_reason": sum(same_end),
            "max_logprob_gap": max(gaps, default=0.0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--tasks", type=int, default=12, help="workload repository tasks")
    ap.add_argument("--train-tasks", type=int, default=16, help="repository tasks for SFT")
    ap.add_argument("--samples", type=int, default=4, help="episodes per task")
    ap.add_argument("--max-steps", type=int, default=8, help="agent.max_steps")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="per turn")
    ap.add_argument("--sft-steps", type=int, default=150)
    ap.add_argument("--workers", type=int, default=2, help="sandbox workers")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="write the figures here (JSON)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="codeloop-agent-async-") as tmp:
        root = Path(tmp)
        work, train, repos, ex, env, agent = _world(root, a)
        engine = None
        try:
            path = _policy(root, a, train, repos, env)
            engine = open_engine_policy(path, EngineSettings(device="cpu", seed=a.seed))
            runs, first = [], {}
            print(f"{'mode':<10}{'rep':>4}{'episodes':>10}{'turns':>7}{'tokens':>8}"
                  f"{'s':>8}{'turns/s':>9}{'tool call s':>13}", flush=True)
            for rep in range(a.reps):
                for mode in ("lockstep", "async"):
                    rows, dt = _run(work, engine, ex, env, agent, repos, a, mode == "async")
                    turns = sum(len(t.actions) for t in rows)
                    tokens = sum(sum(t.loss_mask) for t in rows)
                    tool_s = sum(x.duration_ms for t in rows for x in t.actions) / 1000
                    runs.append({"mode": mode, "rep": rep, "episodes": len(rows),
                                 "turns": turns, "tokens": tokens, "seconds": round(dt, 2),
                                 "turns_per_s": round(turns / dt, 2),
                                 "tool_call_s": round(tool_s, 2)})
                    first.setdefault(mode, rows)
                    print(f"{mode:<10}{rep:>4}{len(rows):>10}{turns:>7}{tokens:>8}{dt:>8.2f}"
                          f"{turns / dt:>9.2f}{tool_s:>13.2f}", flush=True)
        finally:
            if engine is not None:
                engine.close()
            ex.close()
    lock, free = first["lockstep"], first["async"]
    rate = {m: statistics.median(r["turns_per_s"] for r in runs if r["mode"] == m)
            for m in ("lockstep", "async")}
    steps = sorted(len(t.actions) for t in lock)
    per_turn = sorted(n for t in lock for n in _turn_lengths(t))
    same = _compare(lock, free)
    summary = {
        "bench": "agent_async", "runs": runs, "median_turns_per_s": rate,
        "lockstep_turns_per_s": rate["lockstep"], "async_turns_per_s": rate["async"],
        "async_over_lockstep": round(rate["async"] / rate["lockstep"], 2),
        "episode_turns": {"min": steps[0], "median": statistics.median(steps),
                          "max": steps[-1]},
        "turn_tokens": {"min": per_turn[0], "median": statistics.median(per_turn),
                        "max": per_turn[-1]},
        "terminal_reasons": _count(t.terminal_reason for t in lock),
        "identity": same,
    }
    print(f"median turns/s: lock-step {rate['lockstep']:.2f}, async {rate['async']:.2f}, "
          f"async / lock-step {summary['async_over_lockstep']:.2f}x")
    print(f"workload: turns per episode {summary['episode_turns']}, tokens per turn "
          f"{summary['turn_tokens']}, endings {summary['terminal_reasons']}")
    print(f"same trajectories: token ids {same['same_token_ids']}/{same['episodes']}, "
          f"terminal reasons {same['same_terminal_reason']}/{same['episodes']}, "
          f"largest sampler log-prob difference {same['max_logprob_gap']:.2e}")
    if a.out:
        Path(a.out).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def _turn_lengths(t) -> list[int]:
    out, n = [], 0
    for m in t.loss_mask:
        if m:
            n += 1
        elif n:
            out.append(n)
            n = 0
    return out + ([n] if n else [])


def _count(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())
