"""Stage `sft`: SFT warm-start of models/base on reference solutions -> models/init.

Reads ``sft.*``, models/base and data/clean/tasks.parquet (training split only; the
frozen sets live elsewhere). Writes models/init (the iteration-0 policy that
``policy.checkpoint`` names by default) and metrics/sft.json (loss before/after,
seconds, model_version, base_version). With ``sft.steps == 0`` the base policy is saved
unchanged. With ``sft.agent_fraction`` > 0 and repository tasks in the training split, a
scripted expert's episodes on them (played through the real AgentEnv on the snapshots
under data/clean/repos/, codeloop.rollout.demos) are mixed in as agent examples.
"""

from __future__ import annotations

import logging
from typing import Any

from codeloop.config import Params
from codeloop.io import read_tasks, write_json
from codeloop.paths import Paths
from codeloop.policy.model import Policy
from codeloop.policy.sft import run_sft
from codeloop.schema import Task, by_kind
from codeloop.stages import Step, call

log = logging.getLogger(__name__)


def collect_demos(params: Params, paths: Paths, tasks: list[Task]) -> tuple[list, dict]:
    """Expert episodes on the repo training tasks, through the real environment."""
    from codeloop.agent.env import AgentEnv
    from codeloop.agent.executor import open_executor
    from codeloop.data.repos.expert import expert_calls, slipped
    from codeloop.rollout.demos import expert_demos

    executor = open_executor(params.sandbox, params.agent, tasks,
                             envs_dir=str(paths.agent_envs_dir), clean_envs=str(paths.clean_envs_dir))
    # The expert is never cut by the rollout's step cap: a demonstration is a whole solve.
    cfg = params.agent.model_copy(update={"max_steps": 500})
    env = AgentEnv(executor, cfg, str(paths.repos_dir))
    try:
        frac, tdd = params.sft.slip_fraction, params.rollout.agent_mode == "tdd"
        demos, report = expert_demos(
            tasks,
            env,
            lambda t: expert_calls(t, paths.repos_dir, slip=slipped(t, frac), tdd=tdd,
                                   budget=cfg.observation_chars),
        )
    finally:
        getattr(env, "close", lambda: None)()
        executor.close()
    log.info("expert demos: %d kept, %d rejected %s", report["demos"], report["rejected"],
             report["reasons"])
    return demos, report


def run(params: Params, paths: Paths, step: Step = call) -> dict[str, Any]:
    """Write models/init and metrics/sft.json; returns the SFT stats."""
    policy = Policy.load(paths.base_model, device=params.policy.device)
    base_version = policy.model_version
    tasks = read_tasks(paths.clean_tasks)
    kinds = by_kind(tasks)
    repo_tasks, func_tasks = kinds["repo"], kinds["function"]
    demos, demo_report = [], {}
    if params.sft.agent_fraction > 0 and repo_tasks and params.sft.steps > 0:
        demos, demo_report = step(collect_demos, params, paths, repo_tasks)
    # The examples take the layout of the episodes the policy will roll out (rollout.mode).
    stats = step(run_sft, policy, func_tasks, params.sft, demos,
                 mode=params.rollout.mode, agent_mode=params.rollout.agent_mode)
    if demo_report:
        stats["expert"] = demo_report
    version = policy.save(paths.init_model)
    stats = {**stats, "model_version": version, "base_version": base_version}
    log.info(
        "sft %s -> %s: %s steps on %s examples, loss %s -> %s",
        base_version[:12], version[:12], stats["steps"], stats["examples"],
        stats["loss_first"], stats["loss_last"],
    )
    write_json(paths.metrics("sft"), stats)
    return stats
