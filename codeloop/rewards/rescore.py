"""Replay: recompute stored rewards from final code, task and reward version, and diff.

Before training, replay a random sample of about 100 trajectories and compare rewards: a
reward function that no longer reproduces its own scores would train on noise.
Each trajectory is re-scored with the version stamped in its own ``metadata.reward_fn_version`` (not the current params), so old data replays under the
function that scored it. Trajectories with an infra_error have no reward to check and
are counted as skipped; an infra failure during the replay itself is reported apart
from mismatches (the reward could not be checked, which is not a disagreement).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from codeloop.rewards import score_trajectories
from codeloop.schema import Task, Trajectory

TOLERANCE = 1e-9


@dataclass
class ReplayRow:
    trajectory_id: str
    version: str
    stored: float
    replayed: float | None
    diff_components: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and not self.diff_components and self.replayed is not None


@dataclass
class ReplayReport:
    rows: list[ReplayRow]
    skipped: int = 0

    @property
    def mismatches(self) -> list[ReplayRow]:
        return [r for r in self.rows if not r.error and not r.ok]

    @property
    def errors(self) -> list[ReplayRow]:
        return [r for r in self.rows if r.error]

    def summary(self) -> dict:
        return {
            "replayed": len(self.rows),
            "agree": sum(r.ok for r in self.rows),
            "mismatches": len(self.mismatches),
            "errors": len(self.errors),
            "skipped_infra": self.skipped,
        }

    def table(self, only_problems: bool = False) -> str:
        """A fixed-width diff table, one row per replayed trajectory."""
        head = f"{'trajectory_id':40s} {'version':10s} {'stored':>10s} {'replayed':>10s}  status"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            if only_problems and r.ok:
                continue
            rep = "-" if r.replayed is None else f"{r.replayed:10.6f}"
            status = "ok" if r.ok else (f"ERROR {r.error}" if r.error else "MISMATCH")
            if r.diff_components:
                status += " " + ", ".join(r.diff_components)
            lines.append(
                f"{r.trajectory_id[:40]:40s} {r.version:10s} {r.stored:10.6f} {rep:>10s}  {status}"
            )
        s = self.summary()
        lines.append(
            f"replayed {s['replayed']}: {s['agree']} agree, {s['mismatches']} mismatch, "
            f"{s['errors']} infra errors, {s['skipped_infra']} skipped (infra_error at score)"
        )
        return "\n".join(lines)


def _diff(a: dict[str, float], b: dict[str, float]) -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if va is None or vb is None or abs(float(va) - float(vb)) > TOLERANCE:
            out.append(f"{k}: {va} -> {vb}")
    return out


def sample_trajectories(trajs: list[Trajectory], n: int, seed: int) -> list[Trajectory]:
    """A seeded sample of n trajectories (all of them when n >= len or n == 0)."""
    if n <= 0 or n >= len(trajs):
        return list(trajs)
    return random.Random(seed).sample(list(trajs), n)


def compare(old: Trajectory, new: Trajectory, version: str) -> ReplayRow:
    """One replay row: the stored trajectory against its fresh re-scoring."""
    row = ReplayRow(old.trajectory_id, version, old.reward, new.reward)
    if new.infra_error:
        row.replayed, row.error = None, new.infra_error
        return row
    row.diff_components = _diff(old.reward_components, new.reward_components)
    if abs(old.reward - new.reward) > TOLERANCE:
        row.diff_components.insert(0, f"reward: {old.reward} -> {new.reward}")
    steps_old = [a.reward for a in old.actions]
    steps_new = [a.reward for a in new.actions]
    if any(abs(x - y) > TOLERANCE for x, y in zip(steps_old, steps_new, strict=True)):
        row.diff_components.append("step_rewards")
    return row


def replay_with(
    trajs: list[Trajectory], rescore: Callable[[list[Trajectory], str], list[Trajectory]]
) -> ReplayReport:
    """Re-score ``trajs`` group by group with ``rescore(group, version)`` under their own
    stored versions and compare with what is stored."""
    checkable = [t for t in trajs if not t.infra_error]
    by_version: dict[str, list[Trajectory]] = defaultdict(list)
    for t in checkable:
        by_version[t.metadata.reward_fn_version].append(t)
    rows: list[ReplayRow] = []
    for version, group in by_version.items():
        if not version:
            rows += [
                ReplayRow(t.trajectory_id, "", t.reward, None, error="never scored") for t in group
            ]
            continue
        fresh = rescore(group, version)
        rows += [compare(old, new, version) for old, new in zip(group, fresh, strict=True)]
    return ReplayReport(rows, skipped=len(trajs) - len(checkable))


def tests_version_of(task: Task) -> str:
    """The tests a task carries ("" for tasks cleaned before tests were versioned)."""
    return str(task.metadata.get("tests_version", ""))


def split_by_tests_version(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task]
) -> tuple[list[Trajectory], ReplayReport]:
    """(trajectories whose task has the tests they were scored on, a report of error rows
    for the others): a reward replayed on other tests would differ for no fault of the
    reward function. "" on either side (data from before the stamp) counts as a match."""
    ok, rows = [], []
    for t in trajs:
        task = tasks_by_id.get(t.task_id)
        have = tests_version_of(task) if task is not None else ""
        want = t.metadata.tests_version
        if want and have and want != have and not t.infra_error:
            rows.append(ReplayRow(
                t.trajectory_id, t.metadata.reward_fn_version, t.reward, None,
                error=f"tests_version {want} (trajectory) != {have} (tasks): replay it "
                "against the data/clean it was scored on (git checkout its iteration's "
                "tag, then dvc checkout)"))
        else:
            ok.append(t)
    return ok, ReplayReport(rows)


def merge_reports(reports: list[ReplayReport]) -> ReplayReport:
    """One report holding the rows (and skipped counts) of several."""
    return ReplayReport([r for rep in reports for r in rep.rows],
                        skipped=sum(rep.skipped for rep in reports))


def replay(
    trajs: list[Trajectory],
    tasks_by_id: dict[str, Task],
    executor,
    *,
    judge=None,
    critic=None,
) -> ReplayReport:
    """Re-score function-task ``trajs`` with their own reward versions and compare with
    what is stored (the composition alone; codeloop.rewards.kinds adds the mode terms)."""
    return replay_with(trajs, lambda group, version: score_trajectories(
        group, tasks_by_id, version, executor, judge=judge, critic=critic))
