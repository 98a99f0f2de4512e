"""Resumable rollout and the trajectory archive, measured against their baselines.

Run: ``python bench/trajectory_asset.py [--tasks 64] [--shard-tasks 4]``

A tiny embedded policy (random init) rolls out synthetic tasks in the real sandbox.
Printed side by side, measured in the same run:
- rollout wall time without resume vs with resume shards (the cost of the shard writes);
- after a SIGKILL at about half the shards: the rerun's wall time vs restarting from zero
  (the baseline today), and whether the rows equal the uninterrupted run's;
- bytes of one night as data/trajectories writes it (Parquet + JSONL) vs its archive
  partition under the default retention and with the rest dropped.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import (  # noqa: E402
    PolicyInitConfig,
    RetentionConfig,
    RewardConfig,
    RolloutConfig,
    RunnerConfig,
    SandboxConfig,
)
from codeloop.data.archive import append_night  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.io import read_trajectories, write_trajectories  # noqa: E402
from codeloop.rewards.fanout import fan_out_score  # noqa: E402
from codeloop.rollout.context import EpisodeContext  # noqa: E402
from codeloop.rollout.resume import ShardStore  # noqa: E402
from codeloop.rollout.scaleout import fan_out_rollout  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import sys
from codeloop.config import RolloutConfig, RunnerConfig, SandboxConfig
from codeloop.data.generator import generate_tasks
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.scaleout import fan_out_rollout
fan_out_rollout(generate_tasks(int(sys.argv[4]), seed=5, max_depth=1), sys.argv[1],
                EpisodeContext.of(RolloutConfig.model_validate_json(sys.argv[2]), SandboxConfig(),
                                  "bench"),
                sandbox=SandboxConfig(), runner=RunnerConfig(kind="threads", workers=1),
                resume_dir=sys.argv[3])
"""


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _essence(t) -> dict:
    d = asdict(t)
    d.pop("metadata")
    d["actions"] = [(a.step, a.content, a.observation.status) for a in t.actions]
    return d


def _timed_rollout(tasks, policy, cfg, resume_dir="") -> tuple[list, float]:
    t0 = time.perf_counter()
    rows = fan_out_rollout(
        tasks,
        policy,
        EpisodeContext.of(cfg, SandboxConfig(), "bench"),
        sandbox=SandboxConfig(),
        runner=RunnerConfig(kind="threads", workers=1),
        resume_dir=str(resume_dir),
    )
    return rows, time.perf_counter() - t0


def _kill_half_way(policy: str, cfg: RolloutConfig, n_tasks: int, store: ShardStore) -> int:
    argv = [sys.executable, "-c", CHILD, policy, cfg.model_dump_json(), str(store.root)]
    child = subprocess.Popen([*argv, str(n_tasks)], cwd=REPO)
    half = n_tasks // cfg.resume_shard_tasks // 2
    while child.poll() is None and len(store.shards()) < half:
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    return len(store.shards())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--shard-tasks", type=int, default=4)
    args = ap.parse_args()
    from codeloop.policy.model import build_embedded

    tmp = Path(tempfile.mkdtemp(prefix="bench-traj-"))
    tasks = generate_tasks(args.tasks, seed=5, max_depth=1)
    pcfg = PolicyInitConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, n_positions=512)
    build_embedded(SimpleNamespace(policy_init=pcfg), tasks).save(tmp / "policy")
    policy = str(tmp / "policy")
    cfg = RolloutConfig(
        samples_per_task=4, max_steps=2, max_new_tokens=24, resume_shard_tasks=args.shard_tasks
    )
    plain, t_plain = _timed_rollout(tasks, policy, cfg)
    whole, t_resume = _timed_rollout(tasks, policy, cfg, tmp / "fresh")
    store = ShardStore(tmp / "killed")
    n_done = _kill_half_way(policy, cfg, args.tasks, store)
    resumed, t_rerun = _timed_rollout(tasks, policy, cfg, store.root)
    on_disk = {}
    for name, rows in (("resumed", resumed), ("whole", whole), ("plain", plain)):
        write_trajectories(tmp / name, rows, jsonl_export=False)
        on_disk[name] = read_trajectories(tmp / name)
    same = [_essence(t) for t in on_disk["resumed"]] == [_essence(t) for t in on_disk["whole"]]
    same_tokens = [t.token_ids for t in on_disk["resumed"]] == [t.token_ids for t in plain]
    dlp = max(
        abs(x - y)
        for a, b in zip(on_disk["resumed"], on_disk["plain"], strict=True)
        for x, y in zip(a.sample_logprobs, b.sample_logprobs, strict=True)
    )
    n_shards = -(-args.tasks // args.shard_tasks)
    print(f"rollout of {args.tasks} tasks x {cfg.samples_per_task} (tiny policy, real sandbox)")
    print(f"  no resume            {t_plain:7.2f}s   (baseline)")
    print(f"  with resume shards   {t_resume:7.2f}s   x{t_resume / t_plain:.2f} of baseline")
    print(f"  rerun after kill -9 at {n_done}/{n_shards} shards: {t_rerun:7.2f}s   "
          f"x{t_rerun / t_plain:.2f} of restarting from zero")
    print(f"  resumed rows == uninterrupted resumable run's: {same}; tokens == no-resume run's: "
          f"{same_tokens}, max |logprob diff| {dlp:.2e} (batch padding rounding)")

    scored = fan_out_score(
        plain,
        {t.task_id: t for t in tasks},
        reward=RewardConfig(version="v1"),
        sandbox=SandboxConfig(),
        runner=RunnerConfig(kind="threads", workers=1),
    )
    write_trajectories(tmp / "night", scored)
    night = _bytes(tmp / "night")
    kept = append_night(tmp / "archive", scored, RetentionConfig())
    arch = _bytes(tmp / "archive")
    lean = append_night(tmp / "lean", scored, RetentionConfig(size_budget_mb=1e-6))
    lean_b = _bytes(tmp / "lean")
    print(f"one night of {len(scored)} scored trajectories")
    print(f"  data/trajectories (parquet + jsonl)  {night:9d} B   (baseline)")
    print(f"  archive, default retention           {arch:9d} B   x{arch / night:.2f}  {kept}")
    print(f"  archive, rest dropped (over budget)  {lean_b:9d} B   x{lean_b / night:.2f}  "
          f"kept {lean['kept']} dropped {lean['dropped']}")


if __name__ == "__main__":
    main()
