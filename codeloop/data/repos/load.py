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

import os
from pathlib import Path

from codeloop.data.repos import store
from codeloop.data.repos.checks import RepoLoad, check_repo_task
from codeloop.data.validate import SourceError, iter_records, quarantine_row
from codeloop.schema import Task

REPO_KINDS = ("synthetic_repo", "repo", "mint", "swebench")


def first_per_repo(tasks: list[Task], most: int) -> list[Task]:
    """The first ``most`` tasks of each repository, in order (all of them when 0): a
    per-repository cap that keeps every repository of a task set in a smaller one."""
    taken: dict[str, int] = {}
    out = []
    for t in tasks:
        taken[t.repo] = taken.get(t.repo, 0) + 1
        if not most or taken[t.repo] <= most:
            out.append(t)
    return out


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
    clean stage's verifier and the agent env look) and record its content digest in the
    task (``metadata["env_digest"]``: every later copy or image is checked against it);
    (field, reason) when it cannot be.

    The name is one plain dir name (check_repo_task saw to it) and the dir must hold no
    link (codeloop.sandbox.env_trust). A task with an environment spec (``metadata["env_spec"]``,
    named by its hash) gets the complete dir DIR/envs/<hash> copied, else one built from
    the wheels in DIR/wheels; a spec whose interpreter is not the sandbox's, or whose build
    fails (pip's error), is the reason. A dir whose content is not what its task was minted
    with, or that differs from the dir of that name another source put there first, is
    the reason too: a task never runs in an env it was not made with. ``built``: each
    (environment, minted digest)'s outcome in this load (done once)."""
    from codeloop.sandbox.env_trust import DIGEST_KEY, EnvTrustError

    if not task.environment:
        return None
    key = (task.environment, task.metadata.get(DIGEST_KEY, ""))
    if key not in built:
        envs = Path(repos_dir).parent / "envs"
        try:
            if "env_spec" in task.metadata:
                built[key] = _spec_env(root, task, envs)
            else:  # an env dir named by its files (codeloop mint --deps)
                built[key] = _copy_plain_env(root, task, envs)
        except EnvTrustError as exc:
            built[key] = "environment", str(exc)
    got = built[key]
    if isinstance(got, tuple):
        return got[0], f"task {task.task_id}: {got[1]}"
    task.metadata[DIGEST_KEY] = got
    return None


def _source_digest(root: Path, task: Task) -> str:
    """The content digest of DIR/envs/<name> ('' when there is none), after checking
    (EnvTrustError) that it holds no link and is what the task was minted with."""
    from codeloop.sandbox.env_trust import DIGEST_KEY, check_digest

    src = root / "envs" / task.environment
    if not os.path.lexists(src):
        return ""
    return check_digest(src, task.metadata.get(DIGEST_KEY, ""), f"environment {src.name[:16]}")


def _taken(src: Path, dest: Path, src_digest: str) -> str:
    """The digest of ``dest``, a complete dir of the name that was there first;
    EnvTrustError when the source's own dir ``src`` has other content."""
    from codeloop.sandbox.env_trust import EnvTrustError, tree_digest

    got = tree_digest(dest)
    if src_digest and got != src_digest:
        raise EnvTrustError(f"env dir {src} differs from {dest}, the dir of that name "
                            "another source put there first")
    return got


def _spec_env(root: Path, task: Task, envs: Path) -> tuple[str, str] | str:
    from codeloop.data.repos.envbuild import (
        EnvBuildError,
        build_spec_env,
        copy_env,
        env_complete,
        interpreter_problem,
        sandbox_python,
    )
    from codeloop.data.repos.envspec import EnvSpec
    from codeloop.sandbox.env_trust import tree_digest

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
    src, dest = root / "envs" / task.environment, envs / task.environment
    src_digest = _source_digest(root, task)
    if env_complete(dest):
        return _taken(src, dest, src_digest)
    if not (src_digest and copy_env(src, envs)):
        try:
            build_spec_env(spec, envs, root / "wheels")
        except EnvBuildError as exc:
            return "environment", f"environment {task.environment[:16]} cannot be built: {exc}"
    return tree_digest(dest)


def _copy_plain_env(root: Path, task: Task, envs: Path) -> tuple[str, str] | str:
    import shutil

    src, dest = root / "envs" / task.environment, envs / task.environment
    src_digest = _source_digest(root, task)
    if not src_digest:
        return "environment", f"environment {task.environment!r} is not in {root / 'envs'}"
    if dest.is_dir():
        return _taken(src, dest, src_digest)
    tmp = Path(str(dest) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, symlinks=True)
    tmp.rename(dest)
    return src_digest


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
