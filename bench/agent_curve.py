"""Does GRPO learn agent episodes on repository tasks? The held-out resolved rate per iteration.

Run: ``.venv/bin/python bench/agent_curve.py [--iterations 20] [--demo-cache DIR] [--out F]``
(the defaults are the run in metrics/agent_curve.csv: 500 expert demos, half of them slipping
on an edit and mending it from the error's closest lines (sft.slip_fraction 0.5), 1,000 SFT
steps at agent fraction 0.7 of the llama-architecture tiny model, then GRPO (train params as
in params.yaml: lr 2e-4, 2 steps, RFT on resolved episodes) with 64 tasks an iteration from a
pool of 1,280 that SFT never saw, 360 held-out tasks evaluated every 5 iterations; the
``seconds`` column is each iteration's wall time. The results are the CSVs themselves (the
README's results table quotes them): metrics/agent_curve.csv rises beyond two paired SEs
from the SFT policy, as does a rerun from a fresh SFT (run r1 in
metrics/agent_curve_variants.csv). What one update sees matters: metrics/agent_curve_pool24.csv
is 24 tasks an iteration (flat), and runs a1, b1, c2 of agent_curve_variants.csv took larger
steps on 24 tasks (lr 1e-3 x4 steps, or LoRA r16 at lr 3e-3) and fell by iteration 5: the
tiny model learns the trained repositories' names and writes them into unseen repos' edits.
metrics/agent_curve_noslip.csv is a plain-demo run (no slipping demos);
agent_curve_gpt2.csv is ``--arch gpt2``, which resolves far fewer, as it copied an edit's
digits at chance (bench/agent_copy.py)

Everything is the library the stages call, in process: synthetic repositories
(``codeloop.data.repos.synth``: training repos from seed=0, held-out repos from seed=1000,
never the same repository), the embedded tokenizer trained on them
(``codeloop.policy.agent_format.repo_corpus``), SFT on function tasks plus the scripted
expert's episodes played through the real ``AgentEnv`` (``codeloop.rollout.demos``), then
per iteration: agent rollout (``codeloop.rollout.agent_episodes``) on a slice of training
repo tasks, scoring by the trusted judge with reward v3 (``codeloop.rewards.repo``), one
``train_grpo`` update, and evaluation of the held-out tasks at ``evaluate.temperature``:
resolved rate (judge on the final diff) and the paired per-task change since the SFT
policy, each with two SEs side by side: ``*_se`` treats the tasks as independent, and
``*_se_repo`` clusters them by repository (``codeloop.evaluate.paired.cluster_se``; tasks
planted in one repository share its difficulty, so they are not independent draws and the
clustered SE is the honest one when it is larger), plus average steps, tool-call success
rate and the share of episodes that ran the tests before submitting. Each held-out task's
repository (its snapshot) is written beside the CSV (``<out>.repos.json``) for
bench/mode_variants.py. Every seed is fixed; r1's SFT policy was the
committed run's bit for bit, yet their GRPO iterations drift apart (cause not found), and the
2,000-demo SFT differed between two sessions: compare iterations within one run. The
baseline in the same run is iteration 0 (the SFT policy); a rise counts only beyond two paired
standard errors.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._curve_measure import write_rates  # noqa: E402
from codeloop.agent.env import AgentEnv  # noqa: E402
from codeloop.agent.executor import copy_task_envs  # noqa: E402
from codeloop.agent.judge import judge_many  # noqa: E402
from codeloop.config import load_params  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.data.repos.expert import expert_calls, slipped  # noqa: E402
from codeloop.data.repos.store import store_files  # noqa: E402
from codeloop.data.repos.synth import REPAIRABLE, generate_repo_tasks  # noqa: E402
from codeloop.evaluate.agent_metrics import (  # noqa: E402
    agent_set_metrics,
    failure_steps,
    render_episode,
)
from codeloop.evaluate.paired import cluster_se  # noqa: E402
from codeloop.policy.agent_format import repo_corpus  # noqa: E402
from codeloop.policy.model import Policy, build_embedded  # noqa: E402
from codeloop.policy.sft import run_sft  # noqa: E402
from codeloop.rewards.repo import score_repo_trajectories  # noqa: E402
from codeloop.rollout.context import EpisodeContext  # noqa: E402
from codeloop.rollout.demos import expert_demos  # noqa: E402
from codeloop.rollout.envs import run_episodes  # noqa: E402
from codeloop.sandbox import make_executor  # noqa: E402
from codeloop.train.trainer import train_grpo  # noqa: E402

KNOB = ("min_modules", "max_modules", "max_depth", "max_distance")
FIELDS = (
    "iteration", "train_reward_mean", "train_resolved_rate", "heldout_resolved", "heldout_resolved_se",
    "heldout_resolved_se_repo", "heldout_delta", "heldout_delta_se", "heldout_delta_se_repo", "avg_steps", "tool_call_success_rate",
    "tests_before_submit_rate", "submitted_rate", "kl", "frac_reward_zero_std", "rft_examples",
    "seconds",
)


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--train-repo-tasks", type=int, default=500)
    ap.add_argument("--heldout", type=int, default=360, help="held-out repo tasks (generated with seed=1000)")
    ap.add_argument("--show", type=int, default=1, help="SFT episodes printed (diagnosis)")
    ap.add_argument(
        "--knob",
        default="",
        help="training repos' difficulty: "
        "min_modules,max_modules,max_depth,max_distance (default: params)",
    )
    ap.add_argument(
        "--operators",
        default="",
        help="planted bugs' mutation operators for training and held-out repos: 'repairable' "
        "(synth.REPAIRABLE), 'all', a comma list, or empty for params (clean.repo_tasks.operators)",
    )
    ap.add_argument("--demo-cache", default="", help="directory keeping expert demos between runs")
    ap.add_argument(
        "--grpo-tasks",
        type=int,
        default=1280,
        help="training repo tasks kept out of SFT's demos for the GRPO pool (0: the SFT tasks)",
    )
    ap.add_argument("--temperature", type=float, default=0.7, help="rollout T (0: params)")
    ap.add_argument("--pool", type=int, default=64, help="repo tasks rolled out per iteration")
    ap.add_argument(
        "--arch",
        choices=["gpt2", "llama"],
        default="llama",
        help="policy_init.arch of the SFT model (gpt2 copied an edit's digits at chance)",
    )
    ap.add_argument("--functions", type=int, default=600, help="function tasks for SFT")
    ap.add_argument("--sft-steps", type=int, default=1000)
    ap.add_argument("--agent-fraction", type=float, default=0.7)
    ap.add_argument(
        "--slip-fraction",
        type=float,
        default=0.5,
        help="sft.slip_fraction: demos that mend a wrong edit (negative: params)",
    )
    ap.add_argument("--eval-samples", type=int, default=1)
    ap.add_argument(
        "--eval-every",
        type=int,
        default=5,
        help="evaluate the held-out set every N iterations (and after the last one)",
    )
    ap.add_argument(
        "--train",
        default="",
        help="overrides of params' train section, e.g. lr=0.001,steps=4,rft_steps=8",
    )
    ap.add_argument("--init", default="", help="start from this checkpoint, skip SFT")
    ap.add_argument("--save-init", default="", help="also save the iteration-0 policy here")
    ap.add_argument("--out", default="metrics/agent_curve.csv")
    ap.add_argument("--agent-mode", default="", help="rollout.agent_mode (default: params)")
    return ap.parse_args()


def _se(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5


def _eval(policy, heldout, env, ex, repos, p, a, base=None, show=0) -> dict:
    """Held-out resolved rate at evaluate.temperature; paired change per task vs base."""
    cfg = p.rollout.model_copy(update={
        "samples_per_task": a.eval_samples, "temperature": p.evaluate.temperature,
        "top_p": 1.0, "agent_max_new_tokens": p.evaluate.agent_max_new_tokens, "seed": 0,
    })
    ctx = EpisodeContext(cfg, "agent-curve", 0, p.sandbox.timeout_s, agent=p.agent)
    trajs = run_episodes(heldout, policy, ex, ctx, agent_env=env)
    by_id = {t.task_id: t for t in heldout}
    verdicts = judge_many([(by_id[t.task_id], t.final_diff) for t in trajs], repos, ex)
    resolved = [v.resolved for v in verdicts]
    m = agent_set_metrics(trajs, resolved, a.eval_samples)
    print(f"  held-out episodes by failure step: {failure_steps(trajs, resolved)}", flush=True)
    for t in trajs[: show * a.eval_samples : a.eval_samples]:
        print(by_id[t.task_id].prompt, "\n" + render_episode(t, 300), flush=True)
    rates: dict[str, list[bool]] = {}
    for t, r in zip(trajs, resolved, strict=True):
        rates.setdefault(t.task_id, []).append(r)
    per = {k: sum(v) / len(v) for k, v in rates.items()}
    ref = base or per
    diffs = [per[k] - ref[k] for k in per]
    # a task's repository is its snapshot: the generated tree its bug was planted in
    repo_of = [by_id[k].snapshot for k in per]
    return {
        "heldout_resolved": m["resolved_rate"], "heldout_resolved_se": _se(list(per.values())),
        "heldout_resolved_se_repo": cluster_se(list(per.values()), repo_of),
        "heldout_delta": sum(diffs) / len(diffs), "heldout_delta_se": _se(diffs),
        "heldout_delta_se_repo": cluster_se(diffs, repo_of),
        **{k: m[k] for k in ("avg_steps", "tool_call_success_rate", "tests_before_submit_rate",
                             "submitted_rate")},
        "_rates": per,
    }


def _init_policy(a, p, ex, repos, funcs, train) -> Policy:
    """The iteration-0 policy: --init's checkpoint (e.g. the nightly's models/init), else
    SFT here on function tasks plus the expert's episodes on the training repo tasks."""
    if a.init:
        print(f"iteration 0 policy: {a.init} (no SFT here)", flush=True)
        return Policy.load(a.init)
    t0 = time.perf_counter()
    demos, report = _demos(a, p, ex, repos, train)
    print(f"expert demos: {report}, {time.perf_counter() - t0:.0f}s", flush=True)
    policy = build_embedded(p, funcs + train, repo_corpus(train, repos))
    sft = run_sft(policy, funcs, p.sft, demos=demos, mode=p.rollout.mode, agent_mode=p.rollout.agent_mode)
    print(f"SFT {sft['steps']} steps, {sft['agent_examples']} agent examples of "
          f"{report['demos']} demos, loss {sft['loss_last']:.3f}, "
          f"{time.perf_counter() - t0:.0f}s", flush=True)
    return policy


def _demos(a, p, ex, repos, train):
    """The expert's episodes on the training tasks; those --demo-cache already holds are
    read from it (the same task gives the same episode: the environment is deterministic)."""

    frac = p.sft.slip_fraction

    def key(t, slip: bool) -> str:
        # a slipped demo differs from the plain one; the plain key stays as it was (old caches)
        tag = ["slip"] if slip else []
        return hashlib.sha256(
            json.dumps([t.task_id, t.snapshot, t.patch, *tag]).encode()
        ).hexdigest()

    def want(t) -> str:
        return key(t, slipped(t, frac))

    cached: dict = {}
    cache = Path(a.demo_cache) if a.demo_cache else None
    for f in sorted(cache.glob("demos-*.pkl")) if cache and cache.exists() else []:
        kept, _ = pickle.loads(f.read_bytes())
        cached.update({key(t, any(c.get("slip") for c, _ in st)): (t, st) for t, st in kept})
    todo = [t for t in train if want(t) not in cached]
    demo_env = AgentEnv(ex, p.agent.model_copy(update={"max_steps": 500}), repos)
    new, report = expert_demos(
        todo, demo_env,
        lambda t: expert_calls(t, repos, slip=slipped(t, frac), budget=p.agent.observation_chars),
    )
    if cache is not None and new:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / f"demos-{want(todo[0])[:16]}.pkl").write_bytes(pickle.dumps((new, report)))
    # a task whose edit has no name to swap gets its plain demo even when it was to slip
    cached.update({want(t): (t, st) for t, st in new})
    demos = [cached[want(t)] for t in train if want(t) in cached]
    slips = sum(any(c.get("slip") for c, _ in st) for _, st in demos)
    report = {**report, "demos": len(demos), "slipped": slips, "from_cache": len(train) - len(todo)}
    return demos, report


def _operators(a, params_ops: list[str]) -> tuple[str, ...] | None:
    if a.operators == "repairable":
        return REPAIRABLE
    if a.operators == "all":
        return None
    ops = a.operators.split(",") if a.operators else params_ops
    return tuple(ops) or None


def main() -> int:
    a = _args()
    p = load_params(a.params)
    over = dict(kv.split("=", 1) for kv in a.train.split(",")) if a.train else {}
    train_cfg = type(p.train)(**{**p.train.model_dump(), **over})  # validated as params are
    p = p.model_copy(update={"train": train_cfg, "sft": p.sft.model_copy(update={
        "steps": a.sft_steps, "agent_fraction": a.agent_fraction,
        **({"slip_fraction": a.slip_fraction} if a.slip_fraction >= 0 else {})}),
        "policy_init": p.policy_init.model_copy(update={"arch": a.arch})})
    if a.agent_mode:
        p = p.model_copy(update={"rollout": p.rollout.model_copy(update={"agent_mode": a.agent_mode})})
    r = p.clean.repo_tasks
    frozen = {k: getattr(r, k) for k in KNOB}
    knob = dict(zip(KNOB, map(int, a.knob.split(",")), strict=True)) if a.knob else frozen
    ops = _operators(a, r.operators)
    train, trees = generate_repo_tasks(
        a.train_repo_tasks + a.grpo_tasks,
        seed=r.seed,
        tasks_per_repo=r.tasks_per_repo,
        operators=ops,
        **knob,
    )
    # The held-out set keeps the nightly frozen set's knob (params), whatever training uses.
    heldout, htrees = generate_repo_tasks(
        a.heldout, seed=r.heldout_seed, tasks_per_repo=r.tasks_per_repo, operators=ops, **frozen
    )
    # The GRPO pool: later repositories of the training seed, none of whose tasks SFT saw.
    train, grpo = train[: a.train_repo_tasks], train[a.train_repo_tasks :] or train
    funcs = generate_tasks(a.functions, seed=0, max_depth=2)
    rows, out = [], Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.repos.json").write_text(
        json.dumps({t.task_id: t.snapshot for t in heldout}, sort_keys=True)
    )
    with tempfile.TemporaryDirectory() as tmp:
        repos = f"{tmp}/repos"
        for files in {**trees, **htrees}.values():
            store_files(files, repos)
        envs = copy_task_envs(train + grpo + heldout, f"{tmp}/none", f"{tmp}/envs")
        ex = make_executor(p.sandbox, workspaces=True, envs_root=envs)
        env = AgentEnv(ex, p.agent, repos)
        policy = _init_policy(a, p, ex, repos, funcs, train)
        current = Path(tmp) / "iter-0000"
        policy.save(current)
        if a.save_init:
            policy.save(a.save_init)
        row = {"iteration": 0, **_eval(policy, heldout, env, ex, repos, p, a, show=a.show)}
        base = row["_rates"]
        rows.append(row)
        print(_fmt(row), flush=True)
        _write(rows, out)
        by_id = {t.task_id: t for t in grpo}
        history: list = []
        for it in range(1, a.iterations + 1):
            t0 = time.perf_counter()
            start = (it - 1) * a.pool % len(grpo)
            pool = (grpo + grpo)[start : start + a.pool]
            rcfg = p.rollout.model_copy(update={"seed": p.rollout.seed + it, "iteration": it,
                                                "temperature": a.temperature or p.rollout.temperature})
            ctx = EpisodeContext(rcfg, "agent-curve", it, p.sandbox.timeout_s, agent=p.agent)
            trajs = run_episodes(pool, policy, ex, ctx, agent_env=env)
            scored = score_repo_trajectories(trajs, by_id, "v3", ex, repos)
            ok = [t for t in scored if not t.infra_error]
            nxt = Path(tmp) / f"iter-{it:04d}"
            # earlier iterations' episodes stand for the nightly's archive (train.rft_source)
            m = train_grpo(current, scored, p.train, nxt, archived=list(history), iteration=it)
            history += ok
            policy, current = Policy.load(nxt), nxt
            row = {
                "iteration": it,
                "train_reward_mean": sum(t.reward for t in ok) / max(1, len(ok)),
                "train_resolved_rate": sum(t.reward_components.get("resolved", 0) for t in ok)
                / max(1, len(ok)),
                "kl": m.get("kl"), "frac_reward_zero_std": m.get("frac_reward_zero_std"),
                "rft_examples": m.get("rft_examples"),
            }
            if it % a.eval_every == 0 or it == a.iterations:
                row.update(_eval(policy, heldout, env, ex, repos, p, a, base))
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(_fmt(row), flush=True)
            _write(rows, out)
        ex.close()
    r0, r1 = rows[0], rows[-1]
    print(f"held-out resolved: {r0['heldout_resolved']:.3f} +- {r0['heldout_resolved_se']:.3f} "
          f"(SFT) -> {r1['heldout_resolved']:.3f} +- {r1['heldout_resolved_se']:.3f} after "
          f"{a.iterations} GRPO iterations (paired change {r1['heldout_delta']:+.3f} +- "
          f"{r1['heldout_delta_se']:.3f} over tasks, +- {r1['heldout_delta_se_repo']:.3f} "
          f"clustered by repository)")
    print(f"wrote {out}")
    return 0


def _write(rows: list[dict], out: Path) -> None:
    """The table so far (after every iteration: a stopped run keeps its rows)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    write_rates(out, rows)


def _fmt(row: dict) -> str:
    return "  ".join(
        f"{k}={row[k]:.4f}" if isinstance(row[k], float) else f"{k}={row[k]}"
        for k in FIELDS
        if k in row and row[k] is not None
    )


if __name__ == "__main__":
    sys.exit(main())
