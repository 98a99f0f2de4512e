"""Difficulty buckets (the bucket stage's steps) and this iteration's sampling plan.

Difficulty starts from proxies (prompt length, number of tests, solution AST size, and
the generator's composition depth when known), each turned into a percentile rank and
averaged. Once trajectories exist, ``history/pass_rates.json`` (the promoted policy's
empirical pass rate per task) takes over with weight ``bucket.pass_rate_weight``: what
the current policy actually solves is the better measure. Buckets are equal-frequency
cuts of that score, 0 = easiest. The plan samples ``tasks_per_iteration`` task ids by
per-bucket proportions, taken from the curriculum stage for the current iteration.

With ``bucket.repo_tasks_per_iteration`` > 0 the two kinds are planned apart: function and
repository tasks are bucketed each among their own kind and the plan takes
``tasks_per_iteration`` function tasks plus that many repository tasks, each by the same
proportions. Why: in one plan over both kinds the repository tasks' share of the plan is
their share of the pool, a few tasks a night, and GRPO on a few agent tasks an iteration
left the agent where SFT put it (bench/agent_curve.py).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import numpy as np

from codeloop import io
from codeloop.schema import Task


def proxies(task: Task) -> dict[str, float]:
    """Cheap difficulty proxies of one task."""
    try:
        nodes = sum(1 for _ in ast.walk(ast.parse(task.reference_solution)))
    except (SyntaxError, ValueError):
        nodes = len(task.reference_solution) // 4
    out = {
        "prompt_chars": float(len(task.prompt)),
        "n_tests": float(len(task.all_tests())),
        "solution_nodes": float(nodes),
    }
    if task.source in ("synthetic", "synthetic_repo") and task.difficulty >= 0:
        out["generator_depth"] = float(task.difficulty)  # the generator's own knob
    return out


def _ranks(values: np.ndarray) -> np.ndarray:
    """Percentile ranks in [0, 1], ties averaged (stable under reordering)."""
    n = len(values)
    if n <= 1:
        return np.zeros(n)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(n)
    for v in np.unique(values):  # average ties so equal proxies get equal ranks
        m = values == v
        ranks[m] = ranks[m].mean()
    return ranks / (n - 1)


def difficulty_scores(tasks: list[Task], pass_rates: dict[str, float], weight: float) -> np.ndarray:
    """Score in [0, 1] per task: mean proxy rank, blended with 1 - pass rate where known."""
    if not tasks:
        return np.zeros(0)
    px = [proxies(t) for t in tasks]
    keys = sorted({k for p in px for k in p})
    cols = [_ranks(np.array([p.get(k, 0.0) for p in px])) for k in keys]
    score = np.mean(cols, axis=0)
    for i, t in enumerate(tasks):
        if t.task_id in pass_rates:
            score[i] = weight * (1.0 - float(pass_rates[t.task_id])) + (1 - weight) * score[i]
    return score


def assign_buckets(scores: np.ndarray, n_buckets: int) -> np.ndarray:
    """Equal-frequency bucket ids by score (ties broken by position, deterministic)."""
    order = np.argsort(scores, kind="stable")
    ids = np.empty(len(scores), dtype=int)
    ids[order] = (np.arange(len(scores)) * n_buckets) // max(len(scores), 1)
    return ids


def proportions_for(cfg, iteration: int) -> list[float]:
    """The curriculum stage's proportions for this iteration, normalised to sum 1."""
    props = list(cfg.proportions)
    for stage in sorted(cfg.curriculum, key=lambda s: s.until):
        if iteration <= stage.until:
            props = list(stage.proportions)
            break
    props = (props + [0.0] * cfg.n_buckets)[: cfg.n_buckets]
    total = sum(props)
    if total <= 0:
        raise ValueError("bucket proportions sum to 0; give at least one bucket a share")
    return [p / total for p in props]


def _counts(props: list[float], sizes: list[int], n: int) -> list[int]:
    """Per-bucket sample sizes: largest remainder, capped by bucket size, spill redistributed."""
    n = min(n, sum(sizes))
    want = np.array(props) * n
    counts = np.minimum(np.floor(want).astype(int), sizes)
    while counts.sum() < n:
        room = np.array(sizes) - counts
        gap = np.where(room > 0, want - counts + np.array(props) * 1e-9, -np.inf)
        if not np.isfinite(gap).any():
            break
        counts[int(np.argmax(gap))] += 1
    return counts.tolist()


def repo_share(cfg) -> int:
    """Repository tasks planned apart each iteration (0: one plan over every kind)."""
    return getattr(cfg, "repo_tasks_per_iteration", 0)  # (a plain namespace lacks it)


def _sample(tasks: list[Task], cfg, props: list[float], n: int, rng) -> tuple[list, list, list]:
    """(bucket sizes, counts, chosen ids) of ``n`` tasks drawn per bucket by ``props``."""
    members = [sorted(t.task_id for t in tasks if t.difficulty == b) for b in range(cfg.n_buckets)]
    counts = _counts(props, [len(m) for m in members], n)
    chosen: list[str] = []
    for m, c in zip(members, counts, strict=True):
        if c:
            chosen += [m[i] for i in sorted(rng.choice(len(m), size=c, replace=False))]
    return [len(m) for m in members], counts, chosen


def make_plan(tasks: list[Task], cfg, iteration: int) -> dict:
    """Sample task ids per bucket (seeded by bucket.seed and the iteration); with
    ``repo_tasks_per_iteration`` the repository tasks are drawn apart (a stream of their
    own), after the function tasks, and ``repo_tasks`` counts them."""
    props = proportions_for(cfg, iteration)
    rng = np.random.default_rng([cfg.seed, iteration])
    n_repo = repo_share(cfg)
    if not n_repo:
        sizes, counts, chosen = _sample(tasks, cfg, props, cfg.tasks_per_iteration, rng)
        return {"iteration": iteration, "proportions": props, "bucket_sizes": sizes,
                "counts": counts, "task_ids": chosen, "seed": cfg.seed}
    funcs = [t for t in tasks if t.kind != "repo"]
    repos = [t for t in tasks if t.kind == "repo"]
    sizes, counts, chosen = _sample(funcs, cfg, props, cfg.tasks_per_iteration, rng)
    rng_repo = np.random.default_rng([cfg.seed, iteration, 1])
    r_sizes, r_counts, r_chosen = _sample(repos, cfg, props, n_repo, rng_repo)
    return {
        "iteration": iteration,
        "proportions": props,
        "bucket_sizes": [a + b for a, b in zip(sizes, r_sizes, strict=True)],
        "counts": [a + b for a, b in zip(counts, r_counts, strict=True)],
        "task_ids": chosen + r_chosen,
        "repo_tasks": len(r_chosen),
        "seed": cfg.seed,
    }


def read_rates(path: str | Path) -> dict[str, float]:
    """history/pass_rates.json as {task_id: rate}; {} when the file is absent."""
    if not Path(path).exists():
        return {}
    return {str(k): float(v) for k, v in (io.read_json(path) or {}).items()}


def assign_difficulty(tasks: list[Task], rates: dict[str, float], cfg) -> list[Task]:
    """The tasks with ``difficulty`` = bucket id (0 = easiest) and the score's inputs
    recorded in metadata (proxies, score, pass rate when known). With
    ``repo_tasks_per_iteration`` each kind is cut into buckets among its own tasks."""
    groups = [list(range(len(tasks)))]
    if repo_share(cfg):
        groups = [[i for i, t in enumerate(tasks) if (t.kind == "repo") == repo]
                  for repo in (False, True)]
    scores, ids = np.zeros(len(tasks)), np.zeros(len(tasks), dtype=int)
    for g in groups:
        if g:
            part = difficulty_scores([tasks[i] for i in g], rates, cfg.pass_rate_weight)
            scores[g], ids[g] = part, assign_buckets(part, cfg.n_buckets)
    out_tasks = []
    for t, s, b in zip(tasks, scores, ids, strict=True):
        meta = {
            **t.metadata,
            "difficulty_proxies": proxies(t),
            "difficulty_score": round(float(s), 6),
        }
        if t.task_id in rates:
            meta["pass_rate"] = rates[t.task_id]
        out_tasks.append(replace(t, difficulty=int(b), metadata=meta))
    return out_tasks
