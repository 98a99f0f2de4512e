"""The clean stage's steps for repository tasks: leak check, dedupe, executability.

Function-task views (solution AST, assert statements) mean nothing for a repository
task, so these run on their own views: the problem statement and the reference patch
(MinHash, codeloop.data.minhash: words of the statement, code tokens of the patch), the
snapshot a task stands on, the repository it came from, its mutation site and the set of
tests it fails.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

from codeloop.config import SourceSpec
from codeloop.data import minhash
from codeloop.data.dedupe import DedupeResult
from codeloop.schema import Task, by_kind


def _docs(tasks: list[Task]) -> list[tuple[str, str]]:
    return [(t.prompt, t.patch) for t in tasks]


def _signatures(tasks: list[Task], num_perm: int) -> np.ndarray:
    if not tasks:
        return np.zeros((0, num_perm), np.uint32)
    return minhash.signatures(_docs(tasks), num_perm)


def _site(t: Task) -> str:
    """The mutation site when the task knows it, else the bug itself (its bug_patch)."""
    site = t.metadata.get("mutation", {}).get("site", "")
    return site or hashlib.sha256((t.bug_patch or t.patch).encode()).hexdigest()


def _failing(t: Task) -> tuple[str, ...]:
    return tuple(sorted({*t.fail_to_pass, *t.metadata.get("hidden_fail_to_pass", [])}))


def find_repo_leaks(
    tasks: list[Task], frozen: dict[str, list[Task]], threshold: float, num_perm: int
) -> list[dict]:
    """Training repo tasks that copy a frozen one: the same snapshot, the same repository
    (minted and SWE-bench sources: the frozen repository is held out whole), or a
    statement + patch MinHash Jaccard >= threshold. One record per leaked task."""
    pool = [(name, f) for name, ts in sorted(frozen.items()) for f in by_kind(ts)["repo"]]
    if not tasks or not pool:
        return []
    by_snapshot = {f.snapshot: (n, f) for n, f in pool}
    by_repo = {f.repo: (n, f) for n, f in pool if f.repo and f.source != "synthetic_repo"}
    sig_f = _signatures([f for _, f in pool], num_perm)
    sig_t = _signatures(tasks, num_perm)
    leaks = []
    for i, t in enumerate(tasks):
        hit, view, sim = None, "", 1.0
        if t.snapshot in by_snapshot:
            hit, view = by_snapshot[t.snapshot], "snapshot"
        elif t.source != "synthetic_repo" and t.repo in by_repo:
            hit, view = by_repo[t.repo], "repository"
        else:
            mean = (sig_f == sig_t[i]).mean(axis=1)
            j = int(mean.argmax())
            if mean[j] >= threshold:
                hit, view, sim = pool[j], "near", float(mean[j])
        if hit:
            leaks.append({"task_id": t.task_id, "frozen_set": hit[0], "frozen_task_id": hit[1].task_id,
                          "view": view, "similarity": round(sim, 4)})
    return leaks


def repo_dedupe(tasks: list[Task], threshold: float, num_perm: int) -> DedupeResult:
    """Keep the first of tasks with the same mutation site, the same failing set on the
    same snapshot, or a statement + patch MinHash Jaccard >= threshold (kinds
    ``same_site``, ``same_failing_set``, ``near``)."""
    res = DedupeResult()
    sig = _signatures(tasks, num_perm)
    sites: dict[tuple, str] = {}
    failing: dict[tuple, str] = {}
    kept_idx: list[int] = []
    for i, t in enumerate(tasks):
        site, fail = (t.snapshot, _site(t)), (t.snapshot, _failing(t))
        dup, kind, sim = sites.get(site), "same_site", 1.0
        if dup is None and fail in failing:
            dup, kind = failing[fail], "same_failing_set"
        if dup is None and kept_idx:
            mean = (sig[kept_idx] == sig[i]).mean(axis=1)
            j = int(mean.argmax())
            if mean[j] >= threshold:
                dup, kind, sim = tasks[kept_idx[j]].task_id, "near", float(mean[j])
        if dup is not None:
            res.dropped.append({"task_id": t.task_id, "duplicate_of": dup, "kind": kind,
                                "similarity": round(sim, 4)})
            continue
        sites[site] = failing[fail] = t.task_id
        kept_idx.append(i)
        res.kept.append(t)
    return res


def _full_base(task: Task, repos_dir: str, dest: str) -> None:
    """Fill the empty workspace ``dest`` with the task's base and every test file, hidden
    ones included (what the judge runs)."""
    from codeloop.agent.patches import apply_patch
    from codeloop.agent.workspace import copy_tree

    copy_tree(f"{repos_dir}/{task.snapshot}", dest)
    apply_patch(dest, task.bug_patch)
    apply_patch(dest, task.test_patch)


def _verdict(task: Task, before, after) -> str:
    """'' when the task is executable, else the drop reason."""
    if not (before.collected_ok and after.collected_ok):
        return "collect_error"
    if any(before.outcomes.get(n) == "passed" for n in task.fail_to_pass):
        return "fail_to_pass_passes_unfixed"  # the empty patch would resolve it
    if any(before.outcomes.get(n) != "passed" for n in task.pass_to_pass):
        return "pass_to_pass_fails_unfixed"
    wanted = [*task.fail_to_pass, *task.pass_to_pass, *task.hidden_tests]
    if any(after.outcomes.get(n) != "passed" for n in wanted):
        return "reference_failed"
    return ""


def verify_repo_tasks(
    tasks: list[Task],
    repos_dir: str,
    executor,
    runs: int,
    envs_root: str,
    timeout_s: float,
    chunk: int = 32,
    batched: bool = True,
) -> tuple[list[Task], list[dict]]:
    """The executability filter: in the sealed sandbox (codeloop.agent.testrun), the base
    fails its FAIL_TO_PASS tests with PASS_TO_PASS passing (the empty patch does not
    resolve) and the reference patch passes FAIL_TO_PASS, PASS_TO_PASS and the hidden
    tests, ``runs`` times each (mixed outcomes: flaky). Tasks go to the sandbox ``chunk``
    at a time, all their runs in one batch over the pool's workers; ``batched``: several
    runs share one interpreter and pytest start-up (testrun.run_batched: our own trees, so
    allowed), else one command per run. SandboxError propagates: our fault must stop the
    stage, not pass for a bad task."""
    if runs <= 0 or not tasks:
        return list(tasks), []
    kept, dropped = [], []
    verify_chunk = _verify_chunk_batched if batched else _verify_chunk
    for lo in range(0, len(tasks), chunk):
        k, d = verify_chunk(tasks[lo : lo + chunk], repos_dir, executor, runs, envs_root, timeout_s)
        kept += k
        dropped += d
    return kept, dropped


def _verify_chunk(tasks, repos_dir, executor, runs, envs_root, timeout_s):
    from codeloop.agent.envdirs import env_paths
    from codeloop.agent.patches import PatchError, apply_patch
    from codeloop.agent.testrun import run_pytest_many
    from codeloop.agent.workspace import remove_tree

    kept, dropped, ready, made = [], [], [], []
    for t in tasks:
        # two workspaces: a command's cwd must be a workspace root (it is handed to the
        # sandbox's uid whole)
        before, after = executor.workspaces.new_workspace(), executor.workspaces.new_workspace()
        made += [before, after]
        _full_base(t, repos_dir, before)
        _full_base(t, repos_dir, after)
        try:
            apply_patch(after, t.patch)
        except PatchError as exc:
            dropped.append({"task_id": t.task_id, "reason": "reference_does_not_apply",
                            "error": str(exc)[:500]})
            continue
        ready.append((t, before, after))
    try:
        by_env: dict[tuple, list] = {}
        for item in ready:  # one batch per environment (PYTHONPATH is per batch)
            by_env.setdefault(tuple(env_paths(item[0], envs_root)), []).append(item)
        for env, items in by_env.items():
            ids = {t.task_id: sorted({*t.fail_to_pass, *t.pass_to_pass, *t.hidden_tests})
                   for t, _, _ in items}
            runs_list = [
                (d, ids[t.task_id]) for t, b, a in items for _ in range(runs) for d in (b, a)
            ]
            reports = run_pytest_many(executor, runs_list, list(env), timeout_s)
            for j, (t, _, _) in enumerate(items):
                _judge_runs(t, reports[j * 2 * runs : (j + 1) * 2 * runs], runs, kept, dropped)
    finally:
        for ws in made:
            remove_tree(ws)
    return kept, dropped


def _judge_runs(t: Task, mine: list, runs: int, kept: list, dropped: list) -> None:
    """Keep ``t`` or drop it with the reason, from its (before, after) report pairs."""
    verdicts = {_verdict(t, mine[2 * i], mine[2 * i + 1]) for i in range(runs)}
    reason = verdicts.pop() if len(verdicts) == 1 else "flaky"
    if reason:
        why = mine[1].first_failure or mine[0].first_failure or mine[0].output_tail
        dropped.append({"task_id": t.task_id, "reason": reason, "runs": runs,
                        "error": why[-500:]})
    else:
        kept.append(t)


def _prepare_batch(tasks, repos_dir, ws: str, runs: int, dropped: list):
    """Both trees of each task as subdirs of workspace ``ws``; (its runs, the tasks)."""
    import os

    from codeloop.agent.patches import PatchError, apply_patch

    run_list, items = [], []
    for j, t in enumerate(tasks):
        before, after = f"t{j}b", f"t{j}a"
        for d in (before, after):
            os.mkdir(os.path.join(ws, d))
            _full_base(t, repos_dir, os.path.join(ws, d))
        try:
            apply_patch(os.path.join(ws, after), t.patch)
        except PatchError as exc:
            dropped.append({"task_id": t.task_id, "reason": "reference_does_not_apply",
                            "error": str(exc)[:500]})
            continue
        ids = sorted({*t.fail_to_pass, *t.pass_to_pass, *t.hidden_tests})
        run_list += [(d, ids) for _ in range(runs) for d in (before, after)]
        items.append(t)
    return run_list, items


def _verify_chunk_batched(tasks, repos_dir, executor, runs, envs_root, timeout_s):
    """_verify_chunk with each worker's runs in a few batch commands (testrun.run_batched):
    one interpreter and pytest start-up per batch, not per run."""
    from codeloop.agent.envdirs import env_paths
    from codeloop.agent.testrun import run_batched
    from codeloop.agent.workspace import remove_tree

    kept, dropped, made = [], [], []
    by_env: dict[tuple, list] = {}
    for t in tasks:  # one batch per environment (PYTHONPATH is per command)
        by_env.setdefault(tuple(env_paths(t, envs_root)), []).append(t)
    # two batches a worker: one slow batch leaves the other worker less idle time
    n_jobs = 2 * max(1, int(getattr(executor, "workers", 1) or 1))
    try:
        for env, group in by_env.items():
            batches, owners = [], []
            for k in range(min(n_jobs, len(group))):
                made.append(executor.workspaces.new_workspace())
                run_list, items = _prepare_batch(group[k::n_jobs], repos_dir, made[-1], runs,
                                                 dropped)
                if run_list:
                    batches.append((made[-1], run_list))
                    owners.append(items)
            for items, reports in zip(owners, run_batched(executor, batches, list(env), timeout_s),
                                      strict=True):
                for j, t in enumerate(items):
                    _judge_runs(t, reports[j * 2 * runs : (j + 1) * 2 * runs], runs, kept, dropped)
    finally:
        for ws in made:
            remove_tree(ws)
    order = {t.task_id: i for i, t in enumerate(tasks)}  # the input order, as unbatched
    return sorted(kept, key=lambda t: order[t.task_id]), sorted(
        dropped, key=lambda d: order[d["task_id"]]
    )


_FIELD = {"fail_to_pass_passes_unfixed": "fail_to_pass", "pass_to_pass_fails_unfixed": "pass_to_pass",
          "reference_failed": "patch", "reference_does_not_apply": "patch",
          "collect_error": "test_patch", "flaky": "fail_to_pass"}


def quarantine_unverified(tasks: list[Task], failed: list[dict]) -> tuple[list[dict], list[dict]]:
    """(quarantine rows, drops) of the executability filter's failures: a row read from a
    file (a SWE-bench instance, a mint output's row) that does not verify is bad input, so
    it is quarantined naming its file, row, field and reason; a generated task (synthetic
    repositories, made in this run) stays a drop."""
    from codeloop.data.validate import quarantine_row

    by_id = {t.task_id: t for t in tasks}
    rows, drops = [], []
    for f in failed:
        t = by_id.get(f["task_id"])
        prov = t.metadata.get("provenance", {}) if t is not None else {}
        if t is None or t.source == "synthetic_repo" or "file" not in prov:
            drops.append(f)
            continue
        why = f"unverified: {f['reason']}" + (f": {f['error'][-300:]}" if f.get("error") else "")
        kind = "swebench" if t.source == "swebench" else "repo"
        rows.append({**quarantine_row(kind, prov["file"], prov.get("row", 0),
                                      _FIELD.get(f["reason"], ""), why, t.to_row()),
                     "task_id": t.task_id})
    return rows, drops


def repo_specs(cfg) -> tuple[list, list]:
    """(training, frozen) source specs the ``clean.repo_tasks`` switch adds: the synthetic
    repositories of ``seed`` and the held-out ones of ``heldout_seed``."""
    rt = cfg.repo_tasks
    if not rt.enabled:
        return [], []
    knobs = {"kind": "synthetic_repo", "min_modules": rt.min_modules, "max_modules": rt.max_modules,
             "max_depth": rt.max_depth, "max_distance": rt.max_distance,
             "tasks_per_repo": rt.tasks_per_repo, "operators": rt.operators}
    train = [SourceSpec(**knobs, n=rt.n, seed=rt.seed)]
    frozen = [SourceSpec(**knobs, n=rt.heldout_n, seed=rt.heldout_seed)] if rt.heldout_n else []
    return train, frozen


def mint_frozen(cfg) -> list[tuple[str, SourceSpec]]:
    """(frozen set name, spec) of each ``mint`` training source's held-out repositories
    (DIR/heldout, codeloop.data.repos.mint_list): heldout_mint, then heldout_mint-<dir> for
    a second such source. A source whose list held out nothing adds no set."""
    out: list[tuple[str, SourceSpec]] = []
    for spec in cfg.sources:
        held = Path(spec.path, "heldout")
        if spec.kind != "mint" or not (held / "tasks.parquet").is_file():
            continue
        name = "heldout_mint" if not out else f"heldout_mint-{Path(spec.path).name}"
        out.append((name, SourceSpec(kind="repo", path=str(held))))
    return out


class RepoVerifier:
    """The sandbox side of repo-task verification, opened on first use: an executor with
    workspaces (codeloop.sandbox.make_executor) and the env dirs beside the snapshots."""

    def __init__(self, params, repos_dir: str | Path | None) -> None:
        self.params, self.repos_dir = params, str(repos_dir) if repos_dir else None
        self.envs_root = str(Path(repos_dir).parent / "envs") if repos_dir else None
        self._executor = None
        self.seconds = 0.0  # wall time spent verifying (the clean stage's metrics show it)

    def verify(self, tasks: list[Task]) -> tuple[list[Task], list[dict]]:
        runs = self.params.clean.repo_verify_runs
        if runs <= 0 or not tasks:
            return list(tasks), []
        if self.repos_dir is None:
            raise ValueError("repository tasks need a repos_dir to verify in")
        if self._executor is None:
            from codeloop.sandbox import make_executor

            Path(self.envs_root).mkdir(parents=True, exist_ok=True)
            self._executor = make_executor(self.params.sandbox, workspaces=True,
                                           envs_root=self.envs_root)
        timeout = max(self.params.sandbox.timeout_s, 30.0)  # room for pytest's own start-up
        start = time.perf_counter()
        try:
            return verify_repo_tasks(
                tasks, self.repos_dir, self._executor, runs, self.envs_root, timeout
            )
        finally:
            self.seconds += time.perf_counter() - start

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None


def sync_snapshots(src: str | Path | None, dst: Path, used: set[str]) -> None:
    """Make ``dst`` hold exactly the snapshots ``used`` (copied from ``src`` when it is
    another dir, re-hashed on the way), so the stage's output tracks no stray tree."""
    from codeloop.data.repos import store

    for sha in sorted(used):
        if not (dst / sha).is_dir():
            got = store.store_snapshot(store.snapshot_path(src, sha), dst)
            if got != sha:
                raise store.SnapshotError(f"snapshot {sha} in {src} hashes to {got}")
    if used or dst.is_dir():
        store.prune_snapshots(dst, used)
