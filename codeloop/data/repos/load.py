"""Repository task sources for the clean stage: ``synthetic_repo`` (the generator) and
``repo:DIR`` (a directory of repository tasks: ``tasks.parquet`` + ``repos/<sha>/``, what
``codeloop mint`` writes), ``mint:DIR`` (what ``codeloop mint --repos-list`` writes: DIR
itself is the training repositories' ``repo:`` dir, DIR/heldout/ the held-out ones', which
the clean stage loads as the frozen set heldout_mint: codeloop.data.repos.curate_repos.
mint_frozen) and ``swebench:FILE`` (codeloop.data.repos.swebench), each checked row by row and stored content-addressed under the
clean stage's ``repos_dir``. A bad row is quarantined naming its file, row, field and
reason; nothing is dropped silently.
"""

from __future__ import annotations

from pathlib import Path

from codeloop.data.repos import store
from codeloop.data.repos.checks import RepoLoad, check_repo_task
from codeloop.data.validate import SourceError, iter_records, quarantine_row
from codeloop.schema import Task

REPO_KINDS = ("synthetic_repo", "repo", "mint", "swebench")


def _checked(res, source: str, file: str, tasks: list[Task], repos_dir) -> None:
    for row, t in enumerate(tasks, start=1):
        res.rows_in += 1
        problem = check_repo_task(t, repos_dir)
        if problem:
            res.quarantine_rows.append(quarantine_row(source, file, row, *problem, t.to_row()))
        else:
            res.tasks.append(t)


def load_synthetic_repos(spec, repos_dir: str | Path):
    """Generate ``spec.n`` synthetic repository tasks and store their pristine trees."""
    from codeloop.data.repos.synth import generate_repo_tasks

    tasks, trees = generate_repo_tasks(
        spec.n, spec.seed, min_modules=spec.min_modules, max_modules=spec.max_modules,
        max_depth=spec.max_depth, max_distance=spec.max_distance,
        tasks_per_repo=spec.tasks_per_repo, operators=spec.operators or None,
    )
    for files in trees.values():
        store.store_files(files, repos_dir)
    res = RepoLoad()
    _checked(res, "synthetic_repo", "", tasks, repos_dir)
    return res


def load_task_dir(path: str | Path, repos_dir: str | Path):
    """``repo:DIR``: DIR/tasks.parquet rows whose snapshots lie in DIR/repos/<sha>/.

    Each snapshot is re-hashed while it is copied into ``repos_dir``: a row whose tree is
    missing or does not hash to its name is quarantined, never stored under a wrong id."""
    root = Path(path)
    table = root / "tasks.parquet"
    if not table.is_file():
        raise SourceError(f"repo: {root} has no tasks.parquet (expected a codeloop mint output)")
    res = RepoLoad()
    good: dict[str, str] = {}  # snapshot -> '' when stored, else the reason
    built: dict[str, tuple | None] = {}  # environment -> None when in place, else the reason
    for row, rec, bad in iter_records(table, "repo"):
        res.rows_in += 1
        if bad is not None:
            res.quarantine_rows.append(bad)
            continue
        try:
            task = Task.from_row(rec)
        except (TypeError, ValueError) as exc:
            res.quarantine_rows.append(quarantine_row("repo", str(table), row, "", f"not a task row: {exc}", rec))
            continue
        sha = task.snapshot
        if sha and sha not in good:
            good[sha] = _copy_snapshot(root / "repos", sha, repos_dir)
        if sha and good[sha]:
            res.quarantine_rows.append(quarantine_row("repo", str(table), row, "snapshot", good[sha], rec))
            continue
        task.metadata.setdefault("provenance", {}).update({"file": table.name, "row": row})
        problem = check_repo_task(task, repos_dir) or _copy_env(root, task, repos_dir, built)
        if problem:
            res.quarantine_rows.append(quarantine_row("repo", str(table), row, *problem, rec))
        else:
            res.tasks.append(task)
    return res


def _copy_env(root: Path, task: Task, repos_dir, built: dict) -> tuple[str, str] | None:
    """Put the task's env dir beside the store's snapshots (<repos_dir>/../envs, where the
    clean stage's verifier and the agent env look); (field, reason) when it cannot be.

    A task with an environment spec (``metadata["env_spec"]``, named by its hash) gets the
    complete dir DIR/envs/<hash> copied, else one built from the wheels in DIR/wheels; a
    spec whose interpreter is not the sandbox's, or whose build fails (pip's error), is
    the reason. ``built``: each environment's outcome in this load (built once)."""
    if not task.environment:
        return None
    if "env_spec" not in task.metadata:  # an env dir named by its files (codeloop mint --deps)
        return _copy_plain_env(root, task, repos_dir)
    if task.environment not in built:
        built[task.environment] = _spec_env(root, task, Path(repos_dir).parent / "envs")
    got = built[task.environment]
    return got and (got[0], f"task {task.task_id}: {got[1]}")


def _spec_env(root: Path, task: Task, envs: Path) -> tuple[str, str] | None:
    from codeloop.data.repos.envbuild import (
        EnvBuildError,
        build_spec_env,
        copy_env,
        interpreter_problem,
        sandbox_python,
    )
    from codeloop.data.repos.envspec import EnvSpec

    try:
        spec = EnvSpec.from_dict(task.metadata["env_spec"])
    except ValueError as exc:
        return "environment", str(exc)
    if spec.spec_hash() != task.environment:
        return "environment", (f"environment {task.environment!r} is not its spec's hash "
                               f"{spec.spec_hash()}")
    problem = interpreter_problem(spec, sandbox_python())
    if problem:
        return "environment", f"environment {task.environment[:16]}: {problem}"
    if copy_env(root / "envs" / task.environment, envs) is not None:
        return None
    try:
        build_spec_env(spec, envs, root / "wheels")
    except EnvBuildError as exc:
        return "environment", f"environment {task.environment[:16]} cannot be built: {exc}"
    return None


def _copy_plain_env(root: Path, task: Task, repos_dir) -> tuple[str, str] | None:
    src = root / "envs" / task.environment
    if "/" in task.environment or not src.is_dir():
        return "environment", f"environment {task.environment!r} is not in {root / 'envs'}"
    dst = Path(repos_dir).parent / "envs" / task.environment
    if not dst.is_dir():
        import shutil

        tmp = Path(str(dst) + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        tmp.rename(dst)
    return None


def _copy_snapshot(src_repos: Path, sha: str, repos_dir) -> str:
    """'' once snapshot ``sha`` is stored under repos_dir from src_repos, else the reason."""
    src = src_repos / sha
    if not src.is_dir():
        return f"snapshot {sha} is missing from {src_repos}"
    try:
        got = store.store_snapshot(src, repos_dir)
    except store.SnapshotError as exc:
        return str(exc)
    if got != sha:
        return f"snapshot {sha} does not match its tree (hashes to {got})"
    return ""


def load_repo_source(spec, repos_dir: str | Path | None, clones_dir: str = ""):
    """Load one repository source spec (REPO_KINDS) into checked tasks under repos_dir."""
    if repos_dir is None:
        raise SourceError(f"source kind {spec.kind!r} needs the clean stage's repos_dir")
    if spec.kind == "synthetic_repo":
        return load_synthetic_repos(spec, repos_dir)
    if not spec.path:
        raise SourceError(f"source kind {spec.kind!r} needs a path")
    if spec.kind in ("repo", "mint"):  # mint: its training part, DIR itself
        return load_task_dir(spec.path, repos_dir)
    if spec.kind == "swebench":
        from codeloop.data.repos.swebench import load_swebench

        return load_swebench(spec.path, clones_dir, repos_dir)
    raise SourceError(
        f"unknown repository source kind {spec.kind!r}; allowed: {', '.join(REPO_KINDS)}"
    )
