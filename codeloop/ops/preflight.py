"""The pre-training checklist (what must hold before GRPO may start) as checks that pass or fail
with a reason.

1. executable tests, visible/hidden split   5. reward version pinned, golden test passing
2. dedupe and benchmark exclusion done      6. sampling params and model version recorded
3. sandbox limits set                       7. frozen eval set and metrics defined
4. trajectory schema complete               8. reward components logged
(and 9. policy.device exists on this machine, 10. train.strategy fits the launch)

``train`` calls ``run_preflight`` first and refuses to start when ``report.ok`` is false.
Each failed check names the file and what to do.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from codeloop.config import Params
from codeloop.io import iter_trajectories, read_tasks
from codeloop.paths import Paths
from codeloop.schema import TERMINAL_REASONS

SAMPLE = 200  # trajectories inspected: enough to find a systematic gap, fast on any set


@dataclass
class Check:
    name: str
    ok: bool
    reason: str
    fix: str = ""


@dataclass
class PreflightReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def render(self) -> str:
        lines = []
        for c in self.checks:
            lines.append(f"[{'PASS' if c.ok else 'FAIL'}] {c.name}: {c.reason}")
            if not c.ok and c.fix:
                lines.append(f"       fix: {c.fix}")
        lines.append("preflight: ok" if self.ok else f"preflight: {len(self.failures)} failed")
        return "\n".join(lines)


def _tests_split(root: Path) -> Check:
    name = "executable tests with visible/hidden split"
    path = Paths(root).clean_tasks
    if not path.exists():
        return Check(name, False, f"{path} missing", "run the clean stage (dvc repro clean)")
    tasks = read_tasks(path)
    no_vis = [t.task_id for t in tasks if not t.visible_tests]
    with_hidden = sum(1 for t in tasks if t.hidden_tests)
    if not tasks or no_vis:
        return Check(
            name,
            False,
            f"{len(no_vis)} tasks without visible tests (e.g. {no_vis[:3]})",
            "quarantine tasks that have no tests",
        )
    if with_hidden == 0:
        return Check(name, False, "no task has hidden tests", "set clean.visible_fraction < 1")
    return Check(name, True, f"{len(tasks)} tasks, {with_hidden} with hidden tests")


def _dedupe_and_exclusion(root: Path) -> Check:
    from codeloop.evaluate.metrics import LeakError, check_no_leak

    name = "dedupe and benchmark exclusion"
    report = Paths(root).clean_report
    frozen = sorted(Paths(root).frozen_dir.glob("*.parquet"))
    if not report.exists():
        return Check(name, False, f"{report} missing", "run the clean stage")
    text = report.read_text().lower()
    if "dedup" not in text and "duplicate" not in text:
        return Check(name, False, f"{report} records no dedupe step", "clean must dedupe")
    try:
        check_no_leak({f.stem: read_tasks(f) for f in frozen}, read_tasks(Paths(root).clean_tasks))
    except (LeakError, FileNotFoundError) as exc:
        return Check(name, False, str(exc), "re-run clean; frozen tasks must not be trained on")
    return Check(name, True, f"dedupe recorded; no overlap with {len(frozen)} frozen set(s)")


def _sandbox_limits(params: Params) -> Check:
    """Start the configured sandbox once and check its probed isolation against
    sandbox.require (a config that only names a backend proves nothing)."""
    from codeloop.sandbox import SandboxError, make_executor, require_met

    s = params.sandbox
    name = "sandbox limits"
    cfg = s.model_copy(update={"workers": 1})
    try:
        executor = make_executor(cfg)
        try:
            require_met(executor, cfg)
            isolation = executor.isolation
        finally:
            executor.close()
    except SandboxError as exc:
        return Check(
            name,
            False,
            f"sandbox.backend={s.backend}: {exc}",
            "run where the local sandbox can seal (root, or unprivileged user namespaces), "
            "use sandbox.backend: docker, or narrow sandbox.require knowingly",
        )
    return Check(
        name,
        True,
        f"{isolation.summary()}; timeout={s.timeout_s}s memory={s.memory_mb}MiB "
        f"output<={s.max_output_bytes}B",
    )


def _policy_device(params: Params) -> Check:
    """policy.device resolves on this machine (cuda without CUDA fails here, not mid-run)."""
    from codeloop.policy.device import DeviceError, resolve_device

    try:
        dev = resolve_device(params.policy.device)
    except DeviceError as exc:
        return Check("policy device", False, str(exc), "set policy.device: auto or cpu")
    return Check("policy device", True, f"policy.device {params.policy.device} -> {dev}")


def _trajectory_checks(params: Params, root: Path) -> list[Check]:
    """Schema completeness, sampling metadata + model version, reward components logged."""
    path = Paths(root).trajectories_dir
    names = (
        "trajectory schema complete",
        "sampling params and model version recorded",
        "reward components logged",
    )
    if not path.exists():
        return [Check(n, False, f"{path} missing", "run rollout and score first") for n in names]
    trajs = [t for _, t in zip(range(SAMPLE), iter_trajectories(path), strict=False)]
    if not trajs:
        return [Check(n, False, f"{path} holds no trajectories", "run rollout") for n in names]
    bad_schema = [
        t.trajectory_id
        for t in trajs
        if not t.actions
        or not t.final_code.strip()
        and t.terminal_reason != "no_code"
        # an agent episode's answer is its final_diff, which may be empty (no edit)
        and not any(a.action_type == "tool" for a in t.actions)
        or t.terminal_reason not in TERMINAL_REASONS
    ]
    m = [t.metadata for t in trajs]
    missing_meta = [
        t.trajectory_id
        for t, md in zip(trajs, m, strict=True)
        if not (
            md.model_version
            and md.dataset_version
            and md.reward_fn_version
            and md.prompt_template_version
            and md.max_new_tokens > 0
        )
    ]
    version_file = root / params.policy.checkpoint / "model_version.txt"
    versions = {md.model_version for md in m}
    no_comp = [t.trajectory_id for t in trajs if not t.infra_error and not t.reward_components]
    out = [
        Check(
            names[0],
            not bad_schema,
            f"{len(bad_schema)}/{len(trajs)} rows lack actions, "
            f"final code or a known terminal_reason {bad_schema[:3]}",
            "fix rollout: every episode ends with a terminal_reason",
        ),
        Check(
            names[1],
            not missing_meta,
            f"{len(missing_meta)}/{len(trajs)} rows miss model/"
            f"dataset/reward/prompt versions or sampling params {missing_meta[:3]}",
            "rollout must stamp metadata; score fills reward_fn_version",
        ),
        Check(
            names[2],
            not no_comp,
            f"{len(no_comp)}/{len(trajs)} scored rows without reward_components",
            "score must store every component",
        ),
    ]
    if version_file.exists() and versions - {version_file.read_text().strip()}:
        out[1] = Check(
            names[1],
            False,
            f"trajectories sampled by {sorted(versions)[:2]} but "
            f"{version_file} says {version_file.read_text().strip()!r}",
            "rerun rollout with the current policy.checkpoint",
        )
    for c in out:
        if c.ok:
            c.reason = f"{len(trajs)} sampled rows complete"
    return out


def _unreleased_why(comp) -> str:
    """Why an unreleased composition's rewards cannot be trusted to stay what they were."""
    if comp.needs_critic:
        model = "the critic at reward.critic_path, which each promotion replaces"
    elif comp.needs_judge:
        model = "a judge model or endpoint (reward.judge_*) that nothing freezes"
    else:
        return "no golden test pins its outputs"
    return (
        f"part of its reward comes from {model}; no golden test pins its outputs and replay "
        "cannot recompute them once that model changes"
    )


def _reward_pinned(params: Params, root: Path, run_golden: bool) -> Check:
    from codeloop.rewards.registry import REGISTRY

    name = "reward version pinned, golden test passing"
    comp = REGISTRY.get(params.reward.version)
    if comp is None:
        return Check(
            name,
            False,
            f"reward.version {params.reward.version!r} is not in the "
            f"registry ({', '.join(sorted(REGISTRY))})",
            "pick a released version",
        )
    if not comp.released:
        released = ", ".join(sorted(n for n, c in REGISTRY.items() if c.released))
        return Check(
            name,
            False,
            f"reward.version {params.reward.version} is unreleased: {_unreleased_why(comp)}",
            f"use a released version ({released})",
        )
    golden = root / "tests/test_score_golden.py"
    if run_golden and golden.exists():
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(golden)],
            cwd=root,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return Check(
                name,
                False,
                f"golden test failed: {proc.stdout.strip()[-300:]}",
                "a released reward changed: restore it, add a new version instead",
            )
    return Check(
        name,
        True,
        f"{params.reward.version} released"
        + (", golden test passed" if run_golden and golden.exists() else ""),
    )


def _frozen_and_metrics(root: Path) -> Check:
    name = "frozen eval set and metrics defined"
    frozen = sorted(Paths(root).frozen_dir.glob("*.parquet"))
    if not frozen:
        return Check(name, False, "no data/clean/frozen/*.parquet", "add clean.frozen sources")
    dvc_yaml = root / "dvc.yaml"
    stage = (
        ((yaml.safe_load(dvc_yaml.read_text()) or {}).get("stages") or {}).get("evaluate")
        if dvc_yaml.exists()
        else None
    )
    if not stage or not stage.get("metrics"):
        return Check(
            name,
            False,
            "dvc.yaml has no evaluate stage with metrics",
            "declare metrics/eval.json as the evaluate stage's metrics",
        )
    sizes = {f.stem: len(read_tasks(f)) for f in frozen}
    return Check(name, True, f"frozen sets {sizes}; metrics pass@1/@10, avg steps, timeout rate")


def run_preflight(params: Params, root: str = ".", *, run_golden: bool = True) -> PreflightReport:
    """Every checklist item, in the numbered order of the module docstring."""
    base = Path(root)
    report = PreflightReport()
    report.checks.append(_tests_split(base))
    report.checks.append(_dedupe_and_exclusion(base))
    report.checks.append(_sandbox_limits(params))
    traj = _trajectory_checks(params, base)
    report.checks.append(traj[0])
    report.checks.append(_reward_pinned(params, base, run_golden))
    report.checks.append(traj[1])
    report.checks.append(_frozen_and_metrics(base))
    report.checks.append(traj[2])
    report.checks.append(_policy_device(params))  # item 9: where it trains
    report.checks.append(strategy_check(params, base))
    return report


def strategy_check(params: Params, root: Path) -> Check:
    """``train.strategy`` against this launch (its world size, the policy's layers)."""
    from codeloop.train import distributed, sharding

    world = distributed.world_size()
    problem = sharding.strategy_problem(params, root, world)
    layers = sharding.layers_of(Paths(root).checkpoint(params.policy.checkpoint))
    detail = sharding.describe(params.train.strategy, world, layers)
    return Check("train strategy", not problem, problem or detail, "edit train.strategy")
