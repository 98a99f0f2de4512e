"""`codeloop doctor`: failure diagnostics of the latest iteration, each with a suggested fix.

Each diagnostic yields a finding and, when something looks wrong, the suggested fix:
reward stuck (sample 20 trajectories, reward distribution,
zero-variance groups), empty or repeated code (length distribution, empty/constant
functions), stalls (timeout ratio), environment stability (the same code judged
several times must get the same verdict, as a temperature-0 rerun would), and
rollout/train consistency (reward, dataset and model versions).
"""

from __future__ import annotations

import ast
import random
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from codeloop.config import Params
from codeloop.io import read_json, read_tasks, read_trajectories
from codeloop.paths import Paths
from codeloop.sandbox.base import ExecJob, Executor
from codeloop.schema import Trajectory


@dataclass
class Finding:
    name: str
    ok: bool
    finding: str
    fix: str = ""
    details: list[str] = field(default_factory=list)


def _last_error(t: Trajectory) -> str:
    for a in reversed(t.actions):
        o = a.observation
        if o.status and o.status != "passed":
            return (
                f"{o.status}: {(o.failing_test or o.stderr.strip().splitlines()[-1:] or [''])[0]}"[
                    :100
                ]
            )
    return t.infra_error[:100]


def sample_rows(trajs: list[Trajectory], n: int = 20, seed: int = 0) -> Finding:
    rows = random.Random(seed).sample(trajs, min(n, len(trajs)))
    details = [
        f"{t.task_id:24.24s} reward={t.reward:+.3f} {t.terminal_reason:16s} {_last_error(t)}"
        for t in rows
    ]
    all_zero = all(t.reward == 0 for t in trajs)
    return Finding(
        "20 sampled trajectories",
        not all_zero,
        "every reward is 0" if all_zero else f"{len(rows)} rows shown",
        "check the tests run at all and code extraction strips prose; start with easier buckets"
        if all_zero
        else "",
        details,
    )


def reward_distribution(trajs: list[Trajectory]) -> Finding:
    rewards = [t.reward for t in trajs]
    groups: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        groups[t.prompt_key].append(t.reward)
    flat = sum(1 for g in groups.values() if len(g) > 1 and max(g) == min(g))
    frac = flat / len(groups) if groups else 0.0
    distinct = len({round(r, 6) for r in rewards})
    ok = frac < 0.8 and distinct > 1
    return Finding(
        "reward distribution",
        ok,
        f"mean={statistics.fmean(rewards):.3f} std={statistics.pstdev(rewards):.3f} "
        f"distinct={distinct}; zero-variance groups {flat}/{len(groups)} ({frac:.0%})",
        ""
        if ok
        else "GRPO learns nothing from flat groups: add process/partial rewards, "
        "raise temperature a little, or rebalance buckets toward mid difficulty",
    )


def _is_empty_or_constant(code: str) -> bool:
    try:
        tree = ast.parse(code or "")
    except SyntaxError:
        return False
    fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    if not fns:
        return True
    for fn in fns:
        body = [
            s
            for s in fn.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        ]
        if not body or all(isinstance(s, ast.Pass) for s in body):
            return True
        if (
            len(body) == 1
            and isinstance(body[0], ast.Return)
            and (body[0].value is None or isinstance(body[0].value, ast.Constant))
        ):
            return True
    return False


def code_lengths(trajs: list[Trajectory]) -> Finding:
    lengths = sorted(len(t.final_code.splitlines()) for t in trajs)
    empty = sum(_is_empty_or_constant(t.final_code) for t in trajs)
    frac = empty / len(trajs)
    q = lengths[len(lengths) // 2]
    return Finding(
        "code length / empty functions",
        frac < 0.2,
        f"lines min={lengths[0]} median={q} max={lengths[-1]}; empty or constant {empty} ({frac:.0%})",
        ""
        if frac < 0.2
        else "penalise empty/constant code below a failing pass (negative reward), "
        "raise max_new_tokens if outputs are cut, SFT more before RL",
    )


def timeout_ratio(trajs: list[Trajectory]) -> Finding:
    n = sum(
        t.terminal_reason == "timeout" or any(a.observation.status == "timeout" for a in t.actions)
        for t in trajs
    )
    frac = n / len(trajs)
    return Finding(
        "timeout ratio",
        frac < 0.1,
        f"{n}/{len(trajs)} episodes timed out ({frac:.0%})",
        ""
        if frac < 0.1
        else "keep hard per-run deadlines (sandbox.timeout_s), cap "
        "CPU/memory, keep timeouts as 0-reward rows with their error",
    )


def env_stability(trajs, tasks_by_id, executor, repeats: int = 3, n: int = 5) -> Finding:
    picks = [t for t in trajs if t.task_id in tasks_by_id and t.final_code.strip()][:n]
    unstable = []
    for t in picks:
        task = tasks_by_id[t.task_id]
        job = ExecJob(
            code=t.final_code,
            tests=task.visible_tests,
            setup_code=task.setup_code,
            io_style=task.io_style,
            entry_point=task.entry_point,
        )
        verdicts = {(r.status, r.tests_passed) for r in executor.run_many([job] * repeats)}
        if len(verdicts) > 1:
            unstable.append(f"{t.task_id}: {sorted(verdicts)}")
    return Finding(
        "environment stability (same code, repeated)",
        not unstable,
        f"{len(picks)} programs x {repeats} runs: {len(unstable)} unstable",
        ""
        if not unstable
        else "fix seeds, use tolerant float comparison, drop flaky "
        "tasks (clean.verify_runs), take the median of repeated runs",
        unstable,
    )


def consistency(trajs: list[Trajectory], params: Params, root: Path) -> Finding:
    problems = []
    rv = {t.metadata.reward_fn_version for t in trajs}
    if rv != {params.reward.version}:
        problems.append(f"reward_fn_version {sorted(rv)} != reward.version {params.reward.version}")
    manifest = Paths(root).manifest
    dv = {t.metadata.dataset_version for t in trajs}
    if manifest.exists():
        cur = str(read_json(manifest).get("dataset_version", ""))
        if dv != {cur}:
            problems.append(f"dataset_version {sorted(dv)[:2]} != manifest {cur[:12]}")
    mv_file = root / params.policy.checkpoint / "model_version.txt"
    mv = {t.metadata.model_version for t in trajs}
    if mv_file.exists() and mv != {mv_file.read_text().strip()}:
        problems.append(
            f"model_version {sorted(mv)[:2]} != {mv_file} ({mv_file.read_text().strip()[:12]})"
        )
    return Finding(
        "rollout/train consistency",
        not problems,
        "versions consistent" if not problems else "; ".join(problems),
        ""
        if not problems
        else "never change the reward mid-training: rerun score "
        "(dvc repro) or rollout so every row carries the versions train uses; "
        "replay a sample (codeloop replay)",
    )


def run_doctor(
    params: Params, root: str = ".", executor: Executor | None = None
) -> list[Finding]:
    """All diagnostics over data/trajectories (the latest iteration)."""
    base = Path(root)
    trajs = [t for t in read_trajectories(Paths(base).trajectories_dir)]
    if not trajs:
        return [Finding("trajectories", False, "data/trajectories is empty", "run dvc repro")]
    out = [
        sample_rows(trajs),
        reward_distribution(trajs),
        code_lengths(trajs),
        timeout_ratio(trajs),
    ]
    tasks_path = Paths(base).bucket_tasks
    if executor is not None and tasks_path.exists():
        out.append(env_stability(trajs, {t.task_id: t for t in read_tasks(tasks_path)}, executor))
    out.append(consistency(trajs, params, base))
    return out


def render(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        lines.append(f"[{'ok ' if f.ok else 'BAD'}] {f.name}: {f.finding}")
        lines += [f"      {d}" for d in f.details]
        if f.fix:
            lines.append(f"      fix: {f.fix}")
    return "\n".join(lines)
