"""Reward v2 (RLTF partial credit + process + anti-hack) versus the v1 baseline.

Run: ``python bench/reward_versions.py [--tasks 150] [--group 4] [--seed 0]``

GRPO learns nothing from a group whose rewards all tie. On synthetic tasks, groups of
``--group`` candidates drawn from the reference solution and its mutants (a stand-in for
an early policy's samples) are scored by the real sandbox under v1 and under v2, in the
same run. Printed side by side: the share of zero-std groups, the reward std inside
groups, and the scoring time per trajectory (v2's static checks are its extra cost).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import SandboxConfig  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.rewards import score_trajectories  # noqa: E402
from codeloop.rewards.critic import mutants  # noqa: E402
from codeloop.rewards.summary import zero_std_group_fraction  # noqa: E402
from codeloop.sandbox import make_executor  # noqa: E402
from codeloop.schema import Action, Observation, Trajectory  # noqa: E402


def _groups(n_tasks: int, group: int, seed: int):
    rng = random.Random(seed)
    tasks, trajs = [], []
    for t in generate_tasks(n_tasks, seed=seed):
        k = max(1, len(t.visible_tests) // 2)  # visible/hidden split as clean would do
        t.visible_tests, t.hidden_tests = t.visible_tests[:k], t.visible_tests[k:]
        pool = [t.reference_solution, *mutants(t.reference_solution)]
        for i in range(group):
            code = rng.choice(pool)
            act = Action(0, "generate", code, Observation(status="failed", tests_total=k))
            trajs.append(
                Trajectory(
                    f"{t.task_id}-{i}",
                    t.task_id,
                    t.task_id,
                    t.prompt,
                    actions=[act],
                    final_code=code,
                )
            )
        tasks.append(t)
    return {t.task_id: t for t in tasks}, trajs


def _within_group_std(trajs) -> float:
    by: dict[str, list[float]] = {}
    for t in trajs:
        by.setdefault(t.prompt_key, []).append(t.reward)
    stds = [(sum((r - sum(rs) / len(rs)) ** 2 for r in rs) / len(rs)) ** 0.5 for rs in by.values()]
    return sum(stds) / len(stds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=150)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tasks, trajs = _groups(args.tasks, args.group, args.seed)
    ex = make_executor(SandboxConfig(timeout_s=2.0))
    rows = {}
    try:
        score_trajectories(trajs[:8], tasks, "v1", ex)  # warm the workers
        for version in ("v1", "v2"):
            t0 = time.perf_counter()
            scored = score_trajectories(trajs, tasks, version, ex)
            ms = 1000 * (time.perf_counter() - t0) / len(trajs)
            rows[version] = (zero_std_group_fraction(scored), _within_group_std(scored), ms)
    finally:
        ex.close()
    print(f"{len(trajs)} trajectories in {len(tasks)} groups of {args.group}")
    print(
        f"{'version':10s} {'zero-std groups':>16s} {'mean group std':>15s} {'ms/trajectory':>14s}"
    )
    for v, (z, s, ms) in rows.items():
        print(f"{v:10s} {z:16.3f} {s:15.3f} {ms:14.2f}")
    (z1, _, m1), (z2, _, m2) = rows["v1"], rows["v2"]
    print(
        f"v2 leaves {z2 / max(z1, 1e-9):.2f}x the tied groups of v1 (baseline); "
        f"scoring time ratio v1/v2 = {m1 / m2:.2f}"
    )


if __name__ == "__main__":
    main()
