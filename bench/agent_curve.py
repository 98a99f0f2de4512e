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

Real repositories (``codeloop mint`` output dirs: tasks.parquet, repos/<sha>/, envs/<hash>/):
``--real-heldout DIR ...`` adds a held-out real-repository set, evaluated with the synthetic
one at iteration 0 and at every evaluation point (``--real-heldout-max N``: the first N
tasks of each repository); its columns follow the synthetic ones
(REAL_FIELDS: ``real_resolved``, ``real_delta`` vs iteration 0, each with ``*_se`` over tasks
and ``*_se_repo`` clustered by the task's repository name, ``real_n_tasks``,
``real_n_repos``, and the episodes' metrics), its per-task rates in
``<out>.real.rates.json`` and each task's repository in ``<out>.real.repos.json``. Without
it the CSV's columns are exactly FIELDS. ``--real-train DIR ...`` names training
repositories: the scripted expert's episodes on their tasks join SFT's demos (each
``--real-repeat`` times), their files the tokenizer's corpus, and with ``--real-grpo`` their
tasks are spread through the GRPO pool too (tasks SFT saw, unlike the synthetic pool). A
training dir sharing a repository with a held-out dir is refused: the same name once a
trailing version is dropped (two versions of a project share most of their code), or the
same snapshot. Every dir's snapshots go into one repos dir (content-addressed) and its
environment dirs into the executor's envs root. A real episode is longer in tokens than a
synthetic one (its files are longer, and a tokenizer fitted to synthetic code splits real
code finer), so a real run wants ``--context`` above the embedded 1,024: SFT drops every
demo that does not fit (the run prints how many real ones fit) and a rollout that outgrows
the context ends there. metrics/agent_curve_real_synthonly.csv (``--heldout-seed 2000
--real-heldout`` on the minted held-out repositories, 10 tasks each, ``--context 2048
--iterations 3``) and metrics/agent_curve_real_mixed.csv (the same with ``--real-train`` on
the minted training repositories and ``--real-grpo``) are those two arms;
metrics/agent_curve_real_mixed_grpo.csv is the mixed arm rerun through its GRPO iterations
(``--heldout 120 --eval-every 2 --iterations 3``: a smaller synthetic held-out set, so both
real-repository evaluations fit one run; 28 of its 30 real held-out tasks are the
synthetic-only arm's: the re-mint of six kept two others among its first ten).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import pickle
import re
import shutil
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
from codeloop.data.repos.load import first_per_repo  # noqa: E402
from codeloop.data.repos.store import store_files  # noqa: E402
from codeloop.data.repos.synth import REPAIRABLE, generate_repo_tasks  # noqa: E402
from codeloop.evaluate.agent_metrics import (  # noqa: E402
    agent_set_metrics,
    failure_steps,
    render_episode,
)
from codeloop.evaluate.paired import cluster_se  # noqa: E402
from codeloop.io import read_tasks  # noqa: E402
from codeloop.policy.agent_format import repo_corpus  # noqa: E402
from codeloop.policy.model import Policy, build_embedded  # noqa: E402
from codeloop.policy.sft import agent_examples, run_sft  # noqa: E402
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
# The held-out real-repository set's columns (--real-heldout), after FIELDS: the same
# statistics, clustered by the task's repository name, and how many tasks and repositories.
STATS = ("resolved", "resolved_se", "resolved_se_repo", "delta", "delta_se", "delta_se_repo")
METRICS = ("avg_steps", "tool_call_success_rate", "tests_before_submit_rate", "submitted_rate")
REAL_FIELDS = tuple(f"real_{k}" for k in (*STATS, "n_tasks", "n_repos", *METRICS))


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--train-repo-tasks", type=int, default=500)
    ap.add_argument("--heldout", type=int, default=360, help="held-out repo tasks (generated with seed=1000)")
    ap.add_argument("--heldout-seed", type=int, default=None,
                    help="generator seed of the held-out repositories (default: params "
                    "clean.repo_tasks.heldout_seed, 1000): another seed is a fresh held-out "
                    "stream that chose none of the bench's settings")
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
    ap.add_argument(
        "--real-heldout",
        nargs="+",
        default=[],
        metavar="DIR",
        help="`codeloop mint` output dirs whose tasks are a held-out real-repository set, "
        "evaluated beside the synthetic one (the real_* columns)",
    )
    ap.add_argument(
        "--real-heldout-max",
        type=int,
        default=0,
        help="most tasks of each held-out real repository, the first in its dir's order (0: all)",
    )
    ap.add_argument(
        "--real-train",
        nargs="+",
        default=[],
        metavar="DIR",
        help="`codeloop mint` output dirs of training repositories (none of them a held-out "
        "one): the expert's episodes on their tasks join SFT's demos, their files the "
        "tokenizer's corpus",
    )
    ap.add_argument(
        "--real-grpo",
        action="store_true",
        help="also spread the --real-train tasks through the GRPO pool (SFT saw their demos)",
    )
    ap.add_argument(
        "--real-repeat",
        type=int,
        default=1,
        help="times each --real-train demo is in SFT's demo list (weight against the synthetic)",
    )
    ap.add_argument(
        "--context",
        type=int,
        default=0,
        help="policy_init.n_positions and sft.max_len (0: params): a real repository's "
        "episode is longer than a synthetic one's, and SFT drops a demo that does not fit",
    )
    return ap.parse_args()


def _se(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5


def _eval(policy, tasks, env, ex, repos, p, a, cluster, base=None, show=0, name="held-out") -> dict:
    """Resolved rate of ``tasks`` at evaluate.temperature and the paired change per task vs
    base, each with its SE over tasks and clustered by ``cluster(task)`` (STATS keys), the
    set's size, the episodes' METRICS, and the per-task rates (``_rates``)."""
    cfg = p.rollout.model_copy(update={
        "samples_per_task": a.eval_samples, "temperature": p.evaluate.temperature,
        "top_p": 1.0, "agent_max_new_tokens": p.evaluate.agent_max_new_tokens, "seed": 0,
    })
    ctx = EpisodeContext(cfg, "agent-curve", 0, p.sandbox.timeout_s, agent=p.agent)
    trajs = run_episodes(tasks, policy, ex, ctx, agent_env=env)
    by_id = {t.task_id: t for t in tasks}
    verdicts = judge_many([(by_id[t.task_id], t.final_diff) for t in trajs], repos, ex)
    resolved = [v.resolved for v in verdicts]
    m = agent_set_metrics(trajs, resolved, a.eval_samples)
    print(f"  {name} episodes by failure step: {failure_steps(trajs, resolved)}", flush=True)
    for t in trajs[: show * a.eval_samples : a.eval_samples]:
        print(by_id[t.task_id].prompt, "\n" + render_episode(t, 300), flush=True)
    rates: dict[str, list[bool]] = {}
    for t, r in zip(trajs, resolved, strict=True):
        rates.setdefault(t.task_id, []).append(r)
    per = {k: sum(v) / len(v) for k, v in rates.items()}
    ref = base or per
    diffs = [per[k] - ref[k] for k in per]
    repo_of = [cluster(by_id[k]) for k in per]
    return {
        "resolved": m["resolved_rate"], "resolved_se": _se(list(per.values())),
        "resolved_se_repo": cluster_se(list(per.values()), repo_of),
        "delta": sum(diffs) / len(diffs), "delta_se": _se(diffs),
        "delta_se_repo": cluster_se(diffs, repo_of),
        "n_tasks": len(per), "n_repos": len(set(repo_of)),
        **{k: m[k] for k in METRICS},
        "_rates": per,
    }


def _synthetic_cols(m: dict) -> dict:
    """The synthetic held-out set's columns of FIELDS (its metrics keep their bare names)."""
    return {**{f"heldout_{k}": m[k] for k in STATS}, **{k: m[k] for k in METRICS},
            "_rates": m["_rates"]}


def _real_cols(m: dict) -> dict:
    """The real held-out set's REAL_FIELDS, and its per-task rates as ``_real_rates``."""
    return {**{f"real_{k}": m[k] for k in (*STATS, "n_tasks", "n_repos", *METRICS)},
            "_real_rates": m["_rates"]}


def _snapshot(t) -> str:
    # a synthetic task's repository is its snapshot: the generated tree its bug was planted in
    return t.snapshot


def _repo(t) -> str:
    # a minted task's repository is the one it was minted from, whatever its version's tree
    return t.repo


def _base_name(repo: str) -> str:
    """A repository's name without a trailing version (``inflection-0.5.1``: inflection):
    two versions of one project are one repository for the train/held-out split."""
    return re.sub(r"-v?\d+(\.\d+)*([.-]?\w+)?$", "", repo.lower())


def _minted(dirs: list[str]) -> list[tuple[Path, list]]:
    """(dir, its tasks) per ``codeloop mint`` output dir; SystemExit naming a dir that is
    not one, or a task id that two dirs share."""
    out, seen = [], {}
    for d in map(Path, dirs):
        if not (d / "tasks.parquet").is_file() or not (d / "repos").is_dir():
            raise SystemExit(f"agent_curve: {d} is not a `codeloop mint` output dir "
                             "(tasks.parquet and repos/ expected)")
        tasks = read_tasks(d / "tasks.parquet")
        for t in tasks:
            if t.task_id in seen:
                raise SystemExit(f"agent_curve: task {t.task_id} is in both {seen[t.task_id]} "
                                 f"and {d}")
            seen[t.task_id] = d
        out.append((d, tasks))
    return out


def _refuse_overlap(train: list[tuple[Path, list]], heldout: list[tuple[Path, list]]) -> None:
    """SystemExit when a training dir shares a repository with a held-out dir: the same name
    (versions aside) or the same snapshot (one tree under two names)."""
    held = {}
    for d, tasks in heldout:
        for t in tasks:
            held.setdefault(_base_name(t.repo), (t.repo, d))
            held.setdefault(t.snapshot, (t.repo, d))
    for d, tasks in train:
        for t in tasks:
            hit = held.get(_base_name(t.repo)) or held.get(t.snapshot)
            if hit:
                raise SystemExit(
                    f"agent_curve: --real-train {d} has repository {t.repo!r}, and --real-heldout "
                    f"{hit[1]} has {hit[0]!r}: a held-out repository is never trained on"
                )


def _bring_minted(minted: list[tuple[Path, list]], repos: str, envs: str) -> None:
    """Each minted dir's snapshots into the one ``repos`` dir (content-addressed: a snapshot
    two dirs share is the same tree) and its tasks' environment dirs into ``envs``."""
    for d, tasks in minted:
        shutil.copytree(d / "repos", repos, dirs_exist_ok=True)
        copy_task_envs(tasks, str(d / "envs"), envs)


def _interleave(a: list, b: list) -> list:
    """``b``'s items spread evenly through ``a``, so that every slice of the result holds
    its share of both."""
    keyed = [((i + 0.5) / len(a), 0, x) for i, x in enumerate(a)]
    keyed += [((j + 0.5) / len(b), 1, x) for j, x in enumerate(b)]
    return [x for *_, x in sorted(keyed, key=lambda k: k[:2])]


def _init_policy(a, p, ex, repos, funcs, train, real_train=()) -> Policy:
    """The iteration-0 policy: --init's checkpoint (e.g. the nightly's models/init), else
    SFT here on function tasks plus the expert's episodes on the training repo tasks (the
    synthetic ones, then ``real_train``'s, each of these --real-repeat times)."""
    if a.init:
        print(f"iteration 0 policy: {a.init} (no SFT here"
              f"{', so no real demos' if real_train else ''})", flush=True)
        return Policy.load(a.init)
    t0 = time.perf_counter()
    demos, report = _demos(a, p, ex, repos, train)
    print(f"expert demos: {report}, {time.perf_counter() - t0:.0f}s", flush=True)
    real = list(real_train)
    real_demos: list = []
    if real:
        real_demos, real_report = _demos(a, p, ex, repos, real)
        print(f"real expert demos: {real_report}, {time.perf_counter() - t0:.0f}s", flush=True)
    policy = build_embedded(p, funcs + train + real, repo_corpus(train + real, repos))
    if real:
        max_len = min(policy.max_context, p.sft.max_len)
        fit = len(agent_examples(policy, real_demos, max_len, p.rollout.agent_mode))
        print(f"real demos that fit sft.max_len {max_len}: {fit} of {len(real_demos)}", flush=True)
    demos += real_demos * a.real_repeat
    sft = run_sft(policy, funcs, p.sft, demos=demos, mode=p.rollout.mode, agent_mode=p.rollout.agent_mode)
    print(f"SFT {sft['steps']} steps, {sft['agent_examples']} agent examples of "
          f"{len(demos)} demos, loss {sft['loss_last']:.3f}, "
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
    real_held, real_train = _minted(a.real_heldout), _minted(a.real_train)
    _refuse_overlap(real_train, real_held)
    real_held = [(d, first_per_repo(tasks, a.real_heldout_max)) for d, tasks in real_held]
    p = load_params(a.params)
    over = dict(kv.split("=", 1) for kv in a.train.split(",")) if a.train else {}
    train_cfg = type(p.train)(**{**p.train.model_dump(), **over})  # validated as params are
    p = p.model_copy(update={"train": train_cfg, "sft": p.sft.model_copy(update={
        "steps": a.sft_steps, "agent_fraction": a.agent_fraction,
        **({"slip_fraction": a.slip_fraction} if a.slip_fraction >= 0 else {})}),
        "policy_init": p.policy_init.model_copy(update={"arch": a.arch})})
    if a.context:
        p = p.model_copy(update={
            "policy_init": p.policy_init.model_copy(update={"n_positions": a.context}),
            "sft": p.sft.model_copy(update={"max_len": a.context})})
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
    hseed = r.heldout_seed if a.heldout_seed is None else a.heldout_seed
    if hseed == r.seed:
        raise SystemExit(f"--heldout-seed {hseed} is the training repositories' seed")
    heldout, htrees = generate_repo_tasks(
        a.heldout, seed=hseed, tasks_per_repo=r.tasks_per_repo, operators=ops, **frozen
    )
    # The GRPO pool: later repositories of the training seed, none of whose tasks SFT saw.
    train, grpo = train[: a.train_repo_tasks], train[a.train_repo_tasks :] or train
    rtrain = [t for _, tasks in real_train for t in tasks]
    rheld = [t for _, tasks in real_held for t in tasks]
    if a.real_grpo:
        grpo = _interleave(grpo, rtrain)
        print(f"GRPO pool: {len(grpo)} tasks, {len(rtrain)} of them real", flush=True)
    real_ids = {t.task_id for t in rtrain}
    funcs = generate_tasks(a.functions, seed=0, max_depth=2)
    rows, out = [], Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.repos.json").write_text(
        json.dumps({t.task_id: t.snapshot for t in heldout}, sort_keys=True)
    )
    if rheld:
        Path(f"{out}.real.repos.json").write_text(
            json.dumps({t.task_id: t.repo for t in rheld}, sort_keys=True)
        )
    with tempfile.TemporaryDirectory() as tmp:
        repos = f"{tmp}/repos"
        for files in {**trees, **htrees}.values():
            store_files(files, repos)
        envs = f"{tmp}/envs"
        # the minted dirs' env dirs first: a --real-grpo pool holds their tasks too
        _bring_minted(real_train + real_held, repos, envs)
        copy_task_envs(train + grpo + heldout, f"{tmp}/none", envs)
        ex = make_executor(p.sandbox, workspaces=True, envs_root=envs)
        env = AgentEnv(ex, p.agent, repos)
        policy = _init_policy(a, p, ex, repos, funcs, train, rtrain)
        current = Path(tmp) / "iter-0000"
        policy.save(current)
        if a.save_init:
            policy.save(a.save_init)
        row = {"iteration": 0, **_synthetic_cols(
            _eval(policy, heldout, env, ex, repos, p, a, _snapshot, show=a.show))}
        if rheld:
            row.update(_real_cols(_eval(policy, rheld, env, ex, repos, p, a, _repo,
                                        show=a.show, name="real held-out")))
        base, real_base = row["_rates"], row.get("_real_rates")
        rows.append(row)
        print(_fmt(row), flush=True)
        _write(rows, out)
        by_id = {t.task_id: t for t in grpo}
        history: list = []
        for it in range(1, a.iterations + 1):
            t0 = time.perf_counter()
            start = (it - 1) * a.pool % len(grpo)
            pool = (grpo + grpo)[start : start + a.pool]
            if a.real_grpo:
                real = sum(t.task_id in real_ids for t in pool)
                print(f"  iteration {it} pool: {len(pool)} tasks, {real} real", flush=True)
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
                row.update(_synthetic_cols(
                    _eval(policy, heldout, env, ex, repos, p, a, _snapshot, base)))
                if rheld:
                    row.update(_real_cols(_eval(policy, rheld, env, ex, repos, p, a, _repo,
                                                real_base, name="real held-out")))
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
    if rheld:
        print(f"real held-out resolved ({r1['real_n_tasks']} tasks of {r1['real_n_repos']} "
              f"repositories): {r0['real_resolved']:.3f} (SFT) -> {r1['real_resolved']:.3f} "
              f"(paired change {r1['real_delta']:+.3f} +- {r1['real_delta_se']:.3f} over tasks, "
              f"+- {r1['real_delta_se_repo']:.3f} clustered by repository)")
    print(f"wrote {out}")
    return 0


def _write(rows: list[dict], out: Path) -> None:
    """The table so far (after every iteration: a stopped run keeps its rows); with a real
    held-out set, its REAL_FIELDS too and its per-task rates in ``<out>.real.rates.json``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    real = "_real_rates" in rows[0]
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS + REAL_FIELDS * real, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    write_rates(out, rows)
    if real:
        write_rates(f"{out}.real", [{"iteration": r["iteration"], "_rates": r.get("_real_rates")}
                                    for r in rows])


def _fmt(row: dict) -> str:
    return "  ".join(
        f"{k}={row[k]:.4f}" if isinstance(row[k], float) else f"{k}={row[k]}"
        for k in FIELDS + REAL_FIELDS
        if k in row and row[k] is not None
    )


if __name__ == "__main__":
    sys.exit(main())
