"""Stage `rollout`: multi-turn self-debugging episodes of the current policy.

Fans out over ``runner.*`` (threads by default, a Dask scheduler or LocalCluster, Ray)
through codeloop.rollout.scaleout; every runner writes the same rows, so ``runner`` is not
a DVC param of the stage. Reads ``rollout.*``, ``sandbox.*``, ``policy.checkpoint`` (the
policy directory), data/buckets/{plan.json, tasks.parquet} and data/clean/manifest.json
(dataset_version). Writes data/rollouts/ (Parquet shards + trajectories.jsonl; reward
fields left for the score stage) and metrics/rollout.json. Never reads ``reward.*``. With
``rollout.resume`` a killed run resumes from the groups it finished (codeloop.rollout.resume).
Repository tasks in the plan run as agent episodes (``agent.*``; codeloop.rollout.repo_env)
on the snapshots under data/clean/repos/; the tool-call mix and one sampled episode go to
the UI (step ``agent_summary``) and metrics/rollout.json ``agent``. With ``policy.engine:
vllm`` an inference engine samples (codeloop.policy.engine); metrics/rollout.json
``engine`` has its start and weight-sync seconds and tokens per second (the UI's too:
step ``engine_metrics``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from codeloop.agent.executor import copy_task_envs
from codeloop.config import Params
from codeloop.evaluate.agent_metrics import agent_summary
from codeloop.io import read_json, read_tasks, write_json, write_trajectories
from codeloop.paths import Paths
from codeloop.policy.engine import EngineSettings
from codeloop.policy.engine_policy import close_shared, engine_metrics
from codeloop.policy.lora import training_quantize
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.resume import ShardStore
from codeloop.rollout.scaleout import PolicySource, fan_out_rollout
from codeloop.rollout.stats import rollout_metrics
from codeloop.schema import Task
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def load_plan(paths: Paths) -> tuple[list[Task], str]:
    """The plan's tasks (in plan order) and the dataset_version from the clean manifest."""
    plan = read_json(paths.plan)
    by_id = {t.task_id: t for t in read_tasks(paths.bucket_tasks)}
    missing = [i for i in plan.get("task_ids", []) if i not in by_id]
    if missing:
        raise ValueError(
            f"{paths.plan}: field task_ids names {len(missing)} tasks absent from "
            f"{paths.bucket_tasks}, e.g. {missing[:3]}"
        )
    manifest = read_json(paths.manifest)
    if "dataset_version" not in manifest:
        raise ValueError(f"{paths.manifest}: missing field dataset_version")
    return [by_id[i] for i in plan["task_ids"]], manifest["dataset_version"]


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Write data/rollouts and metrics/rollout.json; returns the metrics."""
    tasks, dataset_version = step(load_plan, paths)
    # Repository tasks' own environments, copied once where every chunk's sandbox mounts them.
    envs = copy_task_envs(tasks, str(paths.clean_envs_dir), str(paths.agent_envs_dir))
    # Finished groups of a killed run are kept here (codeloop.rollout.resume).
    resume = paths.resume_dir("rollout") if params.rollout.resume else None
    checkpoint = paths.checkpoint(params.policy.checkpoint)
    engine = None  # policy.engine other than hf: one engine serves every chunk of this process
    if params.policy.engine != "hf":
        engine = EngineSettings.of(params.policy, params.rollout.temperature, params.rollout.seed)
    # QLoRA: sample the quantized base the trainer scores with, from the first night on.
    source = PolicySource(str(checkpoint), params.policy.device,
                          training_quantize(checkpoint, params.train.lora), engine=engine)
    ctx = EpisodeContext.from_params(params, dataset_version, str(paths.repos_dir))
    found = len(ShardStore(resume).shards()) if resume else 0
    if found:
        log.info("%d finished shards of a killed run found: matching ones are reused", found)
    t0 = time.perf_counter()
    try:
        trajs = step(
            fan_out_rollout, tasks, source, ctx, sandbox=params.sandbox, runner=params.runner,
            resume_dir=str(resume) if resume else "", envs_root=envs,
        )  # no score function: the score stage scores; rollout never reads reward.*
    finally:
        engines = close_shared() if engine else []  # this process's engines: their figures
    seconds = time.perf_counter() - t0
    version = trajs[0].metadata.model_version if trajs else ""
    log.info(
        "%d trajectories on %d tasks from %s in %.1fs (runner %s x%d)",
        len(trajs), len(tasks), version[:12] or "-", seconds, params.runner.kind,
        params.runner.workers,
    )
    write_trajectories(paths.rollouts_dir, trajs)
    if resume:
        ShardStore(resume).clear()  # the outs hold every row now
    extra = {
        "model_version": version,
        "dataset_version": dataset_version,
        "iteration": params.rollout.iteration,
        "resume_shards_found": found,
    }
    metrics = {**rollout_metrics(trajs, seconds), **extra}
    if engine:
        metrics["engine"] = step(engine_metrics, params.policy.engine, engines, seconds)
    summary = step(agent_summary, trajs, params.rollout.iteration)  # the UI's agent view
    if summary:
        metrics["agent"] = {k: v for k, v in summary.items() if k != "episode_markdown"}
    write_json(paths.metrics("rollout"), metrics)
    return metrics
