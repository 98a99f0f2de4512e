"""Score metrics: reward and per-component distributions, pass rates, the visible-hidden gap.

Log every component's distribution, not only the total reward, so
a rising reward with a falling pass rate is visible. Only trajectories without an
infra_error count (they are excluded from training too).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from codeloop.rewards import HIDDEN_KEY, HIDDEN_OWN_KEY
from codeloop.schema import Trajectory

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def distribution(values: list[float]) -> dict[str, float]:
    """mean/std/min/max/quantiles of a list (all 0 with count 0 when empty)."""
    if not values:
        return {"count": 0, "mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0} | {
            f"q{int(q * 100)}": 0.0 for q in QUANTILES
        }
    a = np.asarray(values, dtype=np.float64)
    out = {
        "count": int(a.size),
        "mean": float(a.mean()),
        "std": float(a.std()),
        "min": float(a.min()),
        "max": float(a.max()),
    }
    for q in QUANTILES:
        out[f"q{int(q * 100)}"] = float(np.quantile(a, q))
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in out.items()}


def zero_std_group_fraction(trajs: list[Trajectory]) -> float:
    """Share of GRPO groups (prompt_key) whose rewards all tie: they carry no gradient."""
    groups: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        groups[t.prompt_key].append(t.reward)
    if not groups:
        return 0.0
    ties = sum(1 for rs in groups.values() if max(rs) - min(rs) < 1e-9)
    return ties / len(groups)


def false_pass_rates(rows: list[Trajectory]) -> dict[str, float | int]:
    """Among rows that pass every visible test and have hidden tests: the share that fail
    a hidden test (``false_pass_rate``) and the share that fail one of the task's own
    hidden tests, the augmented ones left out (``false_pass_rate_own``)."""
    paid = [t.reward_components for t in rows
            if t.reward_components.get("pass_rate") == 1.0 and HIDDEN_KEY in t.reward_components]
    if not paid:
        return {"false_pass_n": 0, "false_pass_rate": 0.0, "false_pass_rate_own": 0.0}
    fails = sum(c[HIDDEN_KEY] < 1.0 for c in paid)
    fails_own = sum(c.get(HIDDEN_OWN_KEY, c[HIDDEN_KEY]) < 1.0 for c in paid)
    return {"false_pass_n": len(paid), "false_pass_rate": round(fails / len(paid), 6),
            "false_pass_rate_own": round(fails_own / len(paid), 6)}


def summarize(trajs: list[Trajectory], version: str) -> dict:
    """The metrics/score.json body for one scored batch."""
    ok = [t for t in trajs if not t.infra_error]
    comps: dict[str, list[float]] = defaultdict(list)
    for t in ok:
        for k, v in t.reward_components.items():
            comps[k].append(float(v))
    vis = comps.get("pass_rate", [])
    hid = comps.get(HIDDEN_KEY, [])
    visible_rate = float(np.mean(vis)) if vis else 0.0
    # The gap is measured on the same trajectories (those whose task has hidden tests).
    paired_vis = [t.reward_components["pass_rate"] for t in ok if HIDDEN_KEY in t.reward_components]
    hidden_rate = float(np.mean(hid)) if hid else 0.0
    gap = (float(np.mean(paired_vis)) - hidden_rate) if hid else 0.0
    rewards = [t.reward for t in ok]
    return {
        "reward_version": version,
        "n_trajectories": len(trajs),
        "n_scored": len(ok),
        "infra_errors": len(trajs) - len(ok),
        "mean_reward": round(float(np.mean(rewards)) if rewards else 0.0, 6),
        "reward_std": round(float(np.std(rewards)) if rewards else 0.0, 6),
        "reward": distribution(rewards),
        "visible_pass_rate": round(visible_rate, 6),
        "hidden_pass_rate": round(hidden_rate, 6),
        "visible_hidden_gap": round(gap, 6),
        **false_pass_rates(ok),
        "zero_std_group_fraction": round(zero_std_group_fraction(ok), 6),
        "components": {k: distribution(v) for k, v in sorted(comps.items())},
    }
