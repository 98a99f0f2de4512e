"""Rollout + score throughput: threads (baseline) vs Dask LocalCluster with 1 and 2 workers.

Run: ``python bench/runners.py [--tasks 16] [--samples 4] [--chunks 4] [--repeat 1]``

The same run four times — same tiny embedded policy, same synthetic tasks, same seed,
same chunking — through ``codeloop.rollout.scaleout.fan_out_rollout`` (codeloop.rollout.envs.run_episodes
then codeloop.rewards.score_trajectories v1 on the real sandbox, per chunk) on: one
thread (the baseline), two threads of this process (generation no longer serialised:
rows sample from their own generators), a Dask LocalCluster of 1 worker process, and
one of 2 worker processes. Printed side by side: wall seconds (LocalCluster start-up included, as a
stage pays it), trajectories/s, the speed-up over the baseline and the start-up alone
(measured separately: cluster up, workers import torch/transformers, down); and whether every
engine returned identical rows. On a 2-core machine the sandbox children compete with
the workers for the same cores, so expect well under a linear speed-up.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import (  # noqa: E402
    PolicyInitConfig,
    RewardConfig,
    RolloutConfig,
    RunnerConfig,
    SandboxConfig,
)
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.rewards.fanout import score_rows  # noqa: E402
from codeloop.rollout.context import EpisodeContext  # noqa: E402
from codeloop.rollout.runners import fan_out  # noqa: E402
from codeloop.rollout.scaleout import fan_out_rollout  # noqa: E402


def _rows(trajs) -> list:
    out = []
    for t in trajs:
        d = asdict(t)
        d.pop("metadata")
        d["actions"] = [(a.step, a.content, a.observation.status) for a in t.actions]
        out.append(d)
    return out


def _warm(policy_dir: str) -> int:
    """What a fresh worker pays before its first chunk: imports and a first policy load.

    (The first Policy.load in a process pulls in most of transformers lazily: most
    of a cold Dask worker's first chunk on a loaded machine.)
    """
    import codeloop.rewards  # noqa: F401
    from codeloop.policy.model import Policy

    Policy.load(policy_dir)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=1, help="runs per engine (best is kept)")
    args = ap.parse_args()
    logging.getLogger("distributed").setLevel(logging.ERROR)

    from codeloop.policy.model import build_embedded

    tasks = generate_tasks(args.tasks, seed=11, max_depth=2)
    pcfg = PolicyInitConfig(vocab_size=512, n_layer=2, n_head=2, n_embd=64, n_positions=512)
    policy_dir = tempfile.mkdtemp(prefix="bench-runners-policy-")
    build_embedded(SimpleNamespace(policy_init=pcfg), tasks).save(policy_dir)
    rollout = RolloutConfig(
        samples_per_task=args.samples, max_steps=2, max_new_tokens=args.max_new_tokens, seed=0
    )
    engines = [
        ("threads x1 (baseline)", RunnerConfig(kind="threads", workers=1)),
        ("threads x2", RunnerConfig(kind="threads", workers=2)),
        ("dask LocalCluster x1", RunnerConfig(kind="dask", workers=1)),
        ("dask LocalCluster x2", RunnerConfig(kind="dask", workers=2)),
    ]
    results = []
    for name, runner in engines:
        best, rows = float("inf"), None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            trajs = fan_out_rollout(
                tasks,
                policy_dir,
                EpisodeContext.of(rollout, SandboxConfig(), "bench"),
                sandbox=SandboxConfig(),
                score=partial(score_rows, reward=RewardConfig(version="v1")),
                runner=runner,
                n_chunks=args.chunks,
            )
            best = min(best, time.perf_counter() - t0)
            rows = _rows(trajs)
        fixed = 0.0
        if runner.kind == "dask":
            t0 = time.perf_counter()
            fan_out(_warm, [policy_dir] * runner.workers, runner)
            fixed = time.perf_counter() - t0
        results.append((name, best, len(rows), rows, fixed))

    base = results[0][1]
    print(f"rollout+score: {args.tasks} tasks x {args.samples} samples, {args.chunks} chunks")
    print(
        f"{'engine':<24}{'seconds':>9}{'traj/s':>9}{'vs baseline':>13}{'start-up':>10}"
        f"{'work s':>8}{'work vs baseline':>18}"
    )
    for name, secs, n, _, fixed in results:
        work = max(secs - fixed, 1e-9)
        print(
            f"{name:<24}{secs:>9.1f}{n / secs:>9.2f}{base / secs:>12.2f}x{fixed:>9.1f}s"
            f"{work:>8.1f}{base / work:>17.2f}x"
        )
    print(
        "start-up: a LocalCluster started, its workers importing torch/transformers and "
        "loading the policy once, closed (measured apart); work = seconds - start-up"
    )
    same = all(r[3] == results[0][3] for r in results[1:])
    print(f"identical trajectories and rewards across engines: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
