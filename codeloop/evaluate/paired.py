"""Paired comparison of two policies on one frozen set, task by task.

Both policies are sampled on the same tasks with the same seeds (evaluation's seed stream
does not depend on the night), so each task gives one difference d_i = candidate rate −
promoted rate. The gate asks: is the candidate worse?

The test is the exact one-sided sign-flip (randomization) test on the d_i: under "no
difference" each task's two policies are exchangeable, so every sign pattern of the d_i
is equally likely, and p is the share of patterns whose sum is at most the observed sum.
Why this test: it is exact at any set size (no normal approximation, which 20 agent tasks
or a handful of discordant tasks do not support), deterministic (a bootstrap would give
another p on a rerun of the same night), and with one sample per task it is McNemar's
exact test. When every rate is a multiple of 1/L (L the least common multiple of the
sample counts) the sum is counted exactly over integers; otherwise a fixed-seed Monte
Carlo draw stands in (said in ``method``).

The minimum detectable drop (MDD) is what the set could have caught: the larger of the
normal power bound (z_{1−α} + z_{power}) · SE of the paired differences and the exact
test's floor — with one sample per task, ⌈log2(1/α)⌉ tasks must all flip for p < α. When
every task's samples agree (near-greedy evaluation), more samples do not make a task's rate
move more finely, and the floor counts whole tasks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import reduce
from statistics import NormalDist
from typing import Any

# The power the MDD is stated at: the drop that a test at level alpha catches 4 times in 5.
POWER = 0.8
# Most work (tasks × lattice states) the exact count may take; beyond it: Monte Carlo.
_EXACT_STATES = 2_000_000
_MC_DRAWS = 100_000


@dataclass(frozen=True)
class PairedResult:
    """One set's paired comparison (rates in [0, 1]; ``delta`` < 0 means worse)."""

    n_tasks: int
    samples: int  # most samples any task had
    delta: float  # mean per-task difference, candidate − promoted
    se: float  # standard error of that mean
    p_value: float  # one-sided: P(a sum this low | no difference)
    mdd: float  # minimum detectable drop at (alpha, POWER)
    method: str  # "sign-flip exact" or "sign-flip monte carlo"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rates(counts: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """{task_id: [passed, n]} as (passed, n) pairs, tasks with no sample left out."""
    out = {}
    for tid, pair in counts.items():
        passed, n = int(pair[0]), int(pair[1])
        if not 0 <= passed <= n:
            raise ValueError(f"task {tid!r}: passed {passed} of {n} samples is impossible")
        if n:
            out[str(tid)] = (passed, n)
    return out


def compare(
    promoted: dict[str, Any], candidate: dict[str, Any], alpha: float
) -> PairedResult | None:
    """The paired comparison on the tasks both were measured on; None when none are shared."""
    base, cand = rates(promoted), rates(candidate)
    shared = sorted(set(base) & set(cand))
    if not shared:
        return None
    pairs = [(cand[t], base[t]) for t in shared]
    diffs = [c[0] / c[1] - b[0] / b[1] for c, b in pairs]
    m = len(diffs)
    delta = sum(diffs) / m
    sd = math.sqrt(sum((d - delta) ** 2 for d in diffs) / (m - 1)) if m > 1 else 0.0
    se = sd / math.sqrt(m)
    grid = reduce(math.lcm, {n for pair in pairs for _, n in pair}, 1)
    p, method = sign_flip_p(diffs, grid)
    k = max(n for pair in pairs for _, n in pair)
    return PairedResult(m, k, delta, se, p, min_detectable_drop(se, m, _resolution(pairs), alpha),
                        method)


def _resolution(pairs: list[tuple[tuple[int, int], ...]]) -> int:
    """How finely a task's rate can move: its sample count, unless every task's samples
    agree (all passed or all failed, as near-greedy evaluation makes them), in which case a
    task moves by whole flips only and its samples are worth one."""
    if all(passed in (0, n) for pair in pairs for passed, n in pair):
        return 1
    return max(n for pair in pairs for _, n in pair)


def sign_flip_p(diffs: list[float], grid: int) -> tuple[float, str]:
    """One-sided p of sum(diffs) under random signs: exact on the 1/grid lattice when it
    is small enough, else a fixed-seed Monte Carlo estimate."""
    ints = [round(d * grid) for d in diffs]
    on_grid = all(abs(i - d * grid) < 1e-6 for i, d in zip(ints, diffs, strict=True))
    mags = [abs(i) for i in ints if i]
    if on_grid and len(mags) * sum(mags) <= _EXACT_STATES:
        return _exact_p(mags, sum(ints)), "sign-flip exact"
    return _monte_carlo_p(diffs), "sign-flip monte carlo"


def _exact_p(magnitudes: list[int], observed: int) -> float:
    """P(sum of ±magnitudes ≤ observed) with independent fair signs, counted exactly."""
    total = sum(magnitudes)
    # ways[s] = patterns whose sum of the positive-signed magnitudes is s; the signed sum
    # is then 2s − total.
    ways = [1] + [0] * total
    for mag in magnitudes:
        for s in range(total, mag - 1, -1):
            ways[s] += ways[s - mag]
    hits = sum(w for s, w in enumerate(ways) if 2 * s - total <= observed)
    return hits / 2 ** len(magnitudes)


def _monte_carlo_p(diffs: list[float]) -> float:
    """The same p from _MC_DRAWS random sign patterns (seed 0: a rerun gives the same p);
    the observed pattern counts as one draw, so p is never 0."""
    import numpy as np

    d = np.asarray(diffs, dtype=float)
    signs = np.random.default_rng(0).choice([-1.0, 1.0], size=(_MC_DRAWS, d.size))
    hits = int(np.count_nonzero(signs @ d <= d.sum() + 1e-12))
    return (hits + 1) / (_MC_DRAWS + 1)


def min_detectable_drop(se: float, m: int, k: int, alpha: float) -> float:
    """The smallest drop the set would likely catch: the normal power bound on the paired
    SE, and never below the exact test's floor (the fewest all-one-way flips with p < alpha,
    each worth 1/(k·m) of the mean)."""
    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(POWER)
    floor = math.ceil(math.log2(1 / alpha)) / (k * m)
    return max(z * se, floor)


def cluster_se(values: list[float], clusters: list[str]) -> float:
    """Standard error of the mean of ``values`` when tasks of one cluster (a repository)
    are not independent: the cluster-robust (CR1) sandwich estimate

        sqrt( G/(G−1) · Σ_g (Σ_{i∈g} (v_i − mean))² ) / n

    with n values in G clusters. With one value per cluster it is exactly the task-level
    SE (G/(G−1) = n/(n−1) is then the sample variance's own correction); tasks whose
    values move together within a cluster make it larger. 0.0 with fewer than two clusters,
    where no spread between clusters can be measured."""
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} cluster labels")
    n = len(values)
    sums: dict[str, float] = {}
    mean = sum(values) / n if n else 0.0
    for v, g in zip(values, clusters, strict=True):
        sums[g] = sums.get(g, 0.0) + (v - mean)
    k = len(sums)
    if k < 2:
        return 0.0
    return math.sqrt(k / (k - 1) * sum(s * s for s in sums.values())) / n
