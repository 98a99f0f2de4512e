"""Stage `train`: one GRPO iteration on the scored trajectories.

Reads ``params.train``, the policy at ``params.policy.checkpoint`` and data/trajectories
(complete, scored rows). Refuses to start when ``codeloop preflight`` fails or any row is
unscored. Writes models/candidate (HF model + tokenizer + model_version.txt, the content
hash; the per-step log in train_history.jsonl) and metrics/train.json (DVC metrics: loss,
kl, clip ratios, entropy, completion lengths, reward mean/std, frac_reward_zero_std,
world_size).

With ``train.replay.fraction > 0`` or ``train.rft_source: archive`` it also reads the
archived rows of earlier nights listed in history/archive_manifest.json (the stage's dvc
dep, written by the nightly flow before the stages: codeloop.data.archive), md5-checked,
and records what it read in metrics/train.json (``archive_read``).

Multi-process / multi-GPU (DDP, gloo on CPU) enters here too, under a launcher that sets
WORLD_SIZE, RANK, ...; only rank 0 writes (see codeloop.train.distributed). With
``train.strategy: fsdp`` the same launch shards the model (codeloop.train.sharding); a
strategy the launch cannot run is refused before any rank starts work:

    torchrun --standalone --nproc_per_node N -m codeloop.stages.train --root .
    accelerate launch --config_file configs/accelerate_fsdp.yaml -m codeloop.stages.train --root .
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from codeloop.config import ConfigError, Params, load_params
from codeloop.data.archive import MANIFEST, read_snapshot
from codeloop.io import read_json, read_trajectories, write_json, write_jsonl
from codeloop.ops.preflight import run_preflight
from codeloop.paths import Paths
from codeloop.schema import Trajectory
from codeloop.stages import Step, call
from codeloop.train import distributed as ddp
from codeloop.train import sharding
from codeloop.train.trainer import train_grpo

log = logging.getLogger(__name__)


def check_preflight(params: Params, root: Path) -> dict[str, Any]:
    """Refuse to train when `codeloop preflight` fails on the workspace at ``root``."""
    report = run_preflight(params, str(root))
    if not report.ok:
        raise RuntimeError(f"preflight failed, refusing to train:\n{report.render()}")
    log.info("preflight ok")
    return {"ok": True}


def check_strategy(params: Params, root: Path) -> dict[str, Any]:
    """Refuse a ``train.strategy`` this launch (world size, policy layers) cannot run."""
    problem = sharding.strategy_problem(params, root, ddp.world_size())
    if problem:
        raise ConfigError(f"params.yaml: {problem}")
    return {"strategy": params.train.strategy, "world_size": ddp.world_size()}


def load_scored(path: Path) -> list[Trajectory]:
    """Scored trajectories (complete rows written by the score stage); unscored rows raise."""
    trajs = read_trajectories(path)
    unscored = [t.trajectory_id for t in trajs if not t.metadata.reward_fn_version]
    if unscored:
        raise ValueError(
            f"{path}: {len(unscored)} trajectories have no metadata.reward_fn_version "
            f"(not scored), e.g. {unscored[:3]}; run the score stage first"
        )
    log.info("%d scored trajectories from %s", len(trajs), path)
    return trajs


def load_archived(
    params: Params, root: Path, archive: Path, iteration: int
) -> tuple[list[Trajectory], dict[str, Any] | None]:
    """Earlier nights' archived rows that replay / RFT may use, and what was read (or None)."""
    cfg = params.train
    wanted = cfg.replay.fraction > 0 or (cfg.rft != "off" and cfg.rft_source == "archive")
    if not wanted:
        return [], None
    manifest_path = root / MANIFEST
    if not manifest_path.exists() and not archive.exists():
        return [], {"files": 0, "iterations": [], "rows": 0, "manifest": None}  # no archive yet
    if not manifest_path.exists():
        raise FileNotFoundError(
            f"{manifest_path}: train.replay / rft_source archive read the archive through this "
            "manifest; write it with `codeloop archive snapshot`"
        )
    since = iteration - cfg.replay.max_age if cfg.replay.fraction > 0 else 0
    if cfg.rft != "off" and cfg.rft_source == "archive":
        since = 0  # RFT reads every earlier night's passing episodes
    rows, info = read_snapshot(archive, read_json(manifest_path), since, iteration)
    log.info("archive: %d rows of iterations %s", info["rows"], info["iterations"])
    return rows, {**info, "manifest": MANIFEST}


def _log_summary(m: dict[str, Any]) -> None:
    for row in m["history"]:
        log.info(
            "step %d loss=%.4f kl=%.4f clip=%.3f entropy=%.3f grad_norm=%.3f",
            row["step"], row["loss"], row["kl"], row["clip_ratio_region"],
            row["entropy"], row["grad_norm"],
        )
    log.info(
        "candidate %s from %s: %d/%d trajectories in the update, reward %.3f±%.3f, "
        "frac_reward_zero_std=%.3f, excluded=%s",
        m["model_version"], m["policy_version"], m["n_in_update"], m["n_trajectories"],
        m["reward_mean"], m["reward_std"], m["frac_reward_zero_std"], m["excluded"],
    )


def run(
    params: Params, paths: Paths, step: Step = call, *, preflight: bool = True
) -> dict[str, Any]:
    """Train models/candidate from data/trajectories; write metrics/train.json (rank 0)."""
    step(check_strategy, params, paths.root)
    if preflight:
        step(check_preflight, params, paths.root)
    trajectories = step(load_scored, paths.trajectories_dir)
    out_dir = paths.candidate_model
    policy_dir = paths.checkpoint(params.policy.checkpoint)
    iteration = max((t.iteration for t in trajectories), default=0)
    archived, read = step(load_archived, params, paths.root, paths.archive_dir, iteration)
    result = step(
        train_grpo, str(policy_dir), trajectories, params.train, str(out_dir), archived, iteration,
        device=params.policy.device,
    )
    _log_summary(result)
    history = result.pop("history")
    metrics = {
        **result,
        "preflight": "ok" if preflight else "skipped",
        "archive_read": read,
        "world_size": ddp.world_size(),
    }
    if ddp.is_main():
        # .jsonl is outside the checkpoint hash, so the log never changes model_version.
        write_jsonl(out_dir / "train_history.jsonl", history)
        write_json(paths.metrics("train"), metrics)
    return metrics


def main(argv: list[str] | None = None) -> int:
    """The train stage under a launcher (or none): ``python -m codeloop.stages.train``."""
    ap = argparse.ArgumentParser(prog="python -m codeloop.stages.train", description=__doc__)
    ap.add_argument("--root", default=".", help="workspace root (params.yaml, data/, models/)")
    ap.add_argument("--params", default="params.yaml", help="params file under --root")
    ap.add_argument(
        "--skip-preflight",
        action="store_true",
        help="train without the checklist (synthetic test workspaces have no data/clean)",
    )
    args = ap.parse_args(argv)
    paths = Paths(Path(args.root))
    try:  # bad input is a one-line message naming the file, before any rank starts work
        params = load_params(paths.root / args.params)
    except ConfigError as exc:
        print(f"codeloop.stages.train: {exc}", file=sys.stderr)
        return 2
    problem = sharding.strategy_problem(params, paths.root, int(os.environ.get("WORLD_SIZE", "1")))
    if problem:  # every rank refuses alike, before joining the group
        print(f"codeloop.stages.train: {paths.root / args.params}: {problem}", file=sys.stderr)
        return 2
    ddp.init()
    try:
        run(params, paths, preflight=not args.skip_preflight)
        if ddp.world_size() > 1:
            ddp.barrier()
    finally:
        ddp.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
