"""Every data, model, metrics and history path of the pipeline, in one place.

dvc.yaml names the same paths relative to the workspace root (the deps/outs test,
tests/test_ops_dvc_deps.py, checks each stage's outs against these). Stages, flows, the
CLI and tests build one ``Paths(root)`` and read paths from it, never from literals.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Relative to the workspace root, as dvc.yaml writes them.
CLEAN_DIR = "data/clean"
BUCKETS_DIR = "data/buckets"
ROLLOUTS_DIR = "data/rollouts"
TRAJECTORIES_DIR = "data/trajectories"
ARCHIVE_DIR = "data/archive"  # no stage's out: the nightly flow appends and `dvc add`s it
ARCHIVE_METRICS = "metrics/archive.json"
# Resume state of a killed stage: DVC's ignored scratch space, never under the outs (DVC
# deletes a stage's outs before it runs).
RESUME_DIR = ".dvc/tmp/codeloop-resume"
# Test environment dirs the agent stages' sandboxes mount (pytest, our plugins): built
# from the installed venv, idempotently, outside every stage's outs (a stage writing a new
# env dir into data/clean/ would modify clean's out and rerun it).
AGENT_ENVS_DIR = ".dvc/tmp/codeloop-envs"  # the retention counts of the last promoted night
BASE_MODEL = "models/base"
INIT_MODEL = "models/init"
CANDIDATE_MODEL = "models/candidate"
CRITIC_MODEL = "models/critic"
METRICS_DIR = "metrics"
ITERATIONS_CSV = "history/iterations.csv"
PASS_RATES_JSON = "history/pass_rates.json"
# The promoted policy's per-task frozen-set results, kept at promotion: what the gate
# pairs each later candidate against (evaluate writes the candidate's as EVAL_TASKS_JSON).
EVAL_BASELINE_JSON = "history/eval_baseline.json"
EVAL_TASKS_JSON = "metrics/eval_tasks.json"

# metrics/<file> per stage; evaluate's is eval.json (its DVC metrics name since the start).
METRICS_FILES = {
    "clean": "clean.json",
    "sft": "sft.json",
    "bucket": "bucket.json",
    "rollout": "rollout.json",
    "score": "score.json",
    "critic": "critic.json",
    "train": "train.json",
    "evaluate": "eval.json",
}


@dataclass(frozen=True)
class Paths:
    """The pipeline's files under one workspace ``root``."""

    root: Path = Path(".")

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def _p(self, rel: str) -> Path:
        return self.root / rel

    # data/clean (stage clean)
    @property
    def clean_dir(self) -> Path:
        return self._p(CLEAN_DIR)

    @property
    def clean_tasks(self) -> Path:
        return self.clean_dir / "tasks.parquet"

    @property
    def frozen_dir(self) -> Path:
        return self.clean_dir / "frozen"

    @property
    def clean_report(self) -> Path:
        return self.clean_dir / "report.json"

    @property
    def manifest(self) -> Path:
        return self.clean_dir / "manifest.json"

    @property
    def repos_dir(self) -> Path:
        """Repository tasks' snapshots, one content-addressed tree each (clean's out)."""
        return self.clean_dir / "repos"

    @property
    def clean_envs_dir(self) -> Path:
        """Env dirs the clean stage built (a minted task's own dependencies among them)."""
        return self.clean_dir / "envs"

    @property
    def agent_envs_dir(self) -> Path:
        return self._p(AGENT_ENVS_DIR)

    # data/buckets (stage bucket)
    @property
    def buckets_dir(self) -> Path:
        return self._p(BUCKETS_DIR)

    @property
    def bucket_tasks(self) -> Path:
        return self.buckets_dir / "tasks.parquet"

    @property
    def plan(self) -> Path:
        return self.buckets_dir / "plan.json"

    # trajectories (stages rollout, score)
    @property
    def rollouts_dir(self) -> Path:
        return self._p(ROLLOUTS_DIR)

    @property
    def trajectories_dir(self) -> Path:
        return self._p(TRAJECTORIES_DIR)

    @property
    def archive_dir(self) -> Path:
        return self._p(ARCHIVE_DIR)

    @property
    def archive_metrics(self) -> Path:
        return self._p(ARCHIVE_METRICS)

    def resume_dir(self, stage: str) -> Path:
        """Where a stage keeps finished shards until its outs are written."""
        return self._p(RESUME_DIR) / stage

    # models
    @property
    def base_model(self) -> Path:
        return self._p(BASE_MODEL)

    @property
    def init_model(self) -> Path:
        return self._p(INIT_MODEL)

    @property
    def candidate_model(self) -> Path:
        return self._p(CANDIDATE_MODEL)

    @property
    def critic_model(self) -> Path:
        return self._p(CRITIC_MODEL)

    def checkpoint(self, checkpoint: str | os.PathLike) -> Path:
        """``policy.checkpoint`` resolved against the root (absolute paths stay as they are)."""
        p = Path(checkpoint)
        return p if p.is_absolute() else self.root / p

    # metrics and history
    @property
    def metrics_dir(self) -> Path:
        return self._p(METRICS_DIR)

    def metrics(self, stage: str) -> Path:
        """metrics/<file> of a dvc stage (``evaluate`` -> metrics/eval.json)."""
        return self.metrics_dir / METRICS_FILES[stage]

    @property
    def eval_plot(self) -> Path:
        return self.metrics_dir / "eval_plot.json"

    @property
    def eval_tasks(self) -> Path:
        return self._p(EVAL_TASKS_JSON)

    @property
    def eval_baseline(self) -> Path:
        return self._p(EVAL_BASELINE_JSON)

    @property
    def iterations_csv(self) -> Path:
        return self._p(ITERATIONS_CSV)

    @property
    def pass_rates(self) -> Path:
        return self._p(PASS_RATES_JSON)
