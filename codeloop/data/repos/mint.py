"""Mint repository tasks from a local Python repository with a pytest suite (SWE-smith's
procedural recipe, offline).

The pristine tree is stored once (content-addressed); its suite runs ``pristine_runs``
times in the sealed sandbox and only tests that pass every run are used (flaky and
failing ones are excluded from every task). Single-site AST mutations
(codeloop.data.repos.mutate) of the product files are tried in a seeded order, a batch
at a time over the sandbox workers: a candidate is kept when the suite still collects
and at least one stable test goes pass -> fail; FAIL_TO_PASS and PASS_TO_PASS come from
that run, and when the judge resolves the task's own fix (one an agent could not be paid
for is no task). The problem statement is written from the failure evidence (the failing
test, its source as a reproducer, pytest's assertion lines), with every traceback frame in
product code removed so the mutated line is never named. Every minted task names its
environment: an env spec (the sandbox's interpreter, the declared dependencies pinned, a
src layout's ``src`` as a tree path; codeloop.data.repos.envspec) built once into an env dir named by its hash, which the
sandbox mounts read-only beside pytest's (codeloop.agent.envdirs) or, on the docker
backend, bakes into an image of its own (codeloop.sandbox.env_images).
"""

from __future__ import annotations

import ast
import random
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from codeloop.data.repos import store
from codeloop.data.repos.diffs import file_diff
from codeloop.data.repos.hide import choose_hidden, hide_tests, rename_node
from codeloop.data.repos.mutate import Mutation, apply_mutation, find_mutations
from codeloop.data.repos.swebench_rows import to_swebench
from codeloop.schema import Task

SKIP_DIRS = ("docs", "doc", "examples", "example", "benchmarks", "build", "dist")


@dataclass
class MintConfig:
    max_tasks: int = 20
    seed: int = 0
    workers: int = 2
    pristine_runs: int = 3
    hidden_fraction: float = (
        0.0  # share of F2P test functions hidden (never all, never the quoted one)
    )
    max_tries: int = 0  # 0: 20 x max_tasks candidates
    timeout_s: float = 60.0
    name: str = ""
    license: str = "unknown"
    env_name: str = ""  # set by mint_repo: the env dir's name (the spec's hash)
    env_spec: dict = field(default_factory=dict)  # set by mint_repo: the tasks' EnvSpec
    deps: str = ""  # a site-packages-like dir of the repo's dependencies (pip install --target)
    install_deps: bool = True  # without deps: pip-install the declared dependencies (deps.py)
    wheel_cache: str = ".cache/mint/wheels"  # pip's --find-links cache: later mints are offline
    # test dependencies the repository does not declare where repo_deps looks (a tox.ini,
    # a poetry dev group): installed with the declared ones
    extra_requirements: tuple[str, ...] = ()


@dataclass
class MintResult:
    tasks: list[Task] = field(default_factory=list)
    report: dict = field(default_factory=dict)


def unpack_source(path: str | Path, into: str | Path) -> Path:
    """A repository dir as is, or an sdist (.tar.gz) unpacked under ``into`` (its one top dir)."""
    p = Path(path)
    if p.is_dir():
        return p
    if not tarfile.is_tarfile(p):
        raise ValueError(f"mint: {p} is neither a directory nor a .tar.gz sdist")
    with tarfile.open(p) as tar:
        tar.extractall(into, filter="data")  # the data filter refuses links out and devices
    tops = [d for d in Path(into).iterdir() if d.is_dir()]
    return tops[0] if len(tops) == 1 else Path(into)


def product_files(root: Path) -> list[str]:
    """Relative paths of the Python files a bug may go in: not tests, not packaging/docs."""
    from codeloop.agent.patches import is_test_path

    out = []
    for rel, _, _ in store.iter_tree(root):
        parts = rel.split("/")
        if not rel.endswith(".py") or is_test_path(rel) or rel in ("setup.py", "conftest.py"):
            continue
        if parts[0] in SKIP_DIRS or any(p.endswith(".egg-info") for p in parts):
            continue
        out.append(rel)
    return out


def _stable(reports) -> tuple[set[str], dict[str, int]]:
    """Tests passing in every pristine run, and how many runs each other test passed."""
    if not all(r.collected_ok for r in reports):
        bad = next(r for r in reports if not r.collected_ok)
        raise RuntimeError(f"mint: the pristine suite does not collect: {bad.output_tail[-800:]}")
    names = set().union(*(r.outcomes for r in reports))
    passes = {n: sum(r.outcomes.get(n) == "passed" for r in reports) for n in names}
    return {n for n, k in passes.items() if k == len(reports)}, {
        n: k for n, k in passes.items() if k != len(reports)
    }


def _test_source(root: Path, node: str) -> str:
    """The failing test function's source (the reproducer), at most 15 lines."""
    path, _, name = node.partition("::")
    func = name.split("[", 1)[0].split("::")[-1]
    try:
        tree = ast.parse((root / path).read_text())
    except (OSError, SyntaxError):
        return ""
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == func:
            return "\n".join(ast.get_source_segment((root / path).read_text(), n).splitlines()[:15])
    return ""


def _evidence(failure: str, product: set[str]) -> str:
    """pytest's failure text minus every frame in product code (it would show the mutated
    line): only the test's own frames and the ``E`` lines stay."""
    out, skipping = [], False
    for line in failure.splitlines():
        head = line.split(":", 1)[0].strip()
        if head.endswith(".py") and ":" in line:
            skipping = head in product or any(head.endswith("/" + p) for p in product)
        if not skipping:
            out.append(line)
    return "\n".join(out[-20:])


def problem_statement(root: Path, node: str, failure: str, product: set[str], n_fail: int) -> str:
    """Which behaviour broke (the failing test), a reproducer (its source), expected vs
    actual (pytest's assertion lines); never the mutated line."""
    src = _test_source(root, node)
    more = f" (and {n_fail - 1} more test{'s' if n_fail > 2 else ''})" if n_fail > 1 else ""
    parts = [f"The test `{node}` fails{more}; it passed before.", ""]
    if src:
        parts += ["Reproducer (the failing test):", "", src, ""]
    parts += ["Failure:", "", _evidence(failure, product)]
    return "\n".join(parts).rstrip() + "\n"


@dataclass
class _Candidate:
    path: str
    mutation: Mutation
    source: str
    mutated: str


def _candidates(snap: Path, files: list[str], rng: random.Random) -> list[_Candidate]:
    """Every distinct single-site mutation, operators interleaved in a seeded order (so
    a small --max still tries each operator and the report's per-operator yield means
    something)."""
    by_op: dict[str, list[_Candidate]] = {}
    for rel in files:
        src = (snap / rel).read_text()
        try:
            muts = find_mutations(src)
        except SyntaxError:
            continue
        seen: set[str] = set()
        for m in muts:
            new = apply_mutation(src, m)
            if new not in seen:
                seen.add(new)
                by_op.setdefault(m.operator, []).append(_Candidate(rel, m, src, new))
    ops = sorted(by_op)
    for op in ops:
        rng.shuffle(by_op[op])
    out = []
    for i in range(max((len(v) for v in by_op.values()), default=0)):
        out += [by_op[op][i] for op in ops if i < len(by_op[op])]
    return out


def _run_trees(ex, snap: Path, cands: list, env: list[str], cfg) -> list:
    """The suite's report on the pristine tree (None) or each candidate's mutated tree, in
    order: the trees are subdirs of a few workspaces, each one batch command (testrun.
    run_batched: one interpreter and pytest start-up for its runs; our own trees)."""
    from codeloop.agent.testrun import run_batched
    from codeloop.agent.workspace import copy_tree, remove_tree

    n_jobs = min(len(cands), max(1, cfg.workers))
    batches = [(ex.workspaces.new_workspace(), []) for _ in range(n_jobs)]
    try:
        for i, cand in enumerate(cands):
            ws, runs = batches[i % n_jobs]
            tree = Path(ws, f"c{i}")
            tree.mkdir()
            copy_tree(str(snap), str(tree))
            if cand is not None:
                (tree / cand.path).write_text(cand.mutated)
            runs.append((tree.name, None))
        got = run_batched(ex, batches, env, cfg.timeout_s)
    finally:
        for ws, _ in batches:
            remove_tree(ws)
    return [got[i % n_jobs][i // n_jobs] for i in range(len(cands))]


def _deps_env(deps: str, envs_root: Path, name: str) -> str:
    """The repository's own env dir (codeloop.agent.envdirs.build_env) from a dir of its
    installed dependencies; its name (what ``Task.environment`` holds)."""
    from codeloop.agent.envdirs import build_env

    root = Path(deps)
    if not root.is_dir():
        raise ValueError(f"mint: --deps {root} is not a directory")
    files = [(rel, p) for rel, p, _ in store.iter_tree(root)]
    return Path(build_env(str(envs_root), f"{name}-deps", files)).name


def _environment(root: Path, cfg: MintConfig, envs: Path, name: str, site: Path):
    """The repository's environment, built once: ``cfg.deps`` as given (a dir named by its
    content, no spec), else an environment spec (codeloop.data.repos.envspec) of the
    sandbox's interpreter, the declared dependencies (and ``cfg.extra_requirements``)
    pip-resolved and pinned and the tree's import dirs (codeloop.data.repos.repo_deps), built into ``envs/<spec hash>/`` from the wheel cache.
    (cfg with ``env_name`` and ``env_spec`` set, the manifest's record.) ValueError when
    the repository needs another interpreter than the sandbox's."""
    import dataclasses

    from codeloop.data.repos.envbuild import build_spec_env, interpreter_problem, sandbox_python
    from codeloop.data.repos.envspec import EnvSpec, python_needed
    from codeloop.data.repos.repo_deps import (
        declared_requirements,
        install_requirements,
        requires_python,
        tree_paths,
    )

    record = {"name": "", "requirements": [], "resolved": [], "from": "none"}
    if cfg.deps:
        record["from"] = "deps_dir"
        name = _deps_env(cfg.deps, envs, name)
        record["name"] = name
        return dataclasses.replace(cfg, env_name=name), record
    have = sandbox_python()
    python = python_needed(requires_python(root), have)
    problem = interpreter_problem(EnvSpec(python=python), have)
    if problem:  # before anything is resolved: pip would resolve for our interpreter
        raise ValueError(f"mint: {name} {problem}")
    requirements = [*declared_requirements(root), *cfg.extra_requirements] if cfg.install_deps else []
    resolved = install_requirements(requirements, cfg.wheel_cache, site) if requirements else []
    spec = EnvSpec(python=python, requirements=resolved, tree_paths=tuple(tree_paths(root)))
    h = build_spec_env(spec, envs, cfg.wheel_cache).name
    record.update(name=h, requirements=requirements, resolved=list(spec.requirements),
                  spec=spec.to_dict(), **({"from": "pip"} if requirements else {}))
    return dataclasses.replace(cfg, env_name=h, env_spec=spec.to_dict()), record


def _task(name, sha, cand, failing, stable, report, snap, product, cfg, n) -> Task:
    first = next(k for k, v in report.outcomes.items() if k in failing and v != "passed")
    site = f"{cand.path}:{cand.mutation.site}"
    # hidden tests are single test functions moved to a hidden file (codeloop.data.repos.hide);
    # the test the statement quotes stays visible
    chosen = choose_hidden(sorted(failing), cfg.hidden_fraction, f"{sha}:{site}", first, snap)
    test_patch, moved = hide_tests(snap, chosen)
    renamed = {t: rename_node(t, moved) for t in stable}
    hidden = sorted(v for k, v in renamed.items() if v != k)
    visible = sorted(v for k, v in renamed.items() if v == k)
    failing_now = {renamed[t] for t in failing}
    f2p = [t for t in visible if t in failing_now]
    return Task(
        task_id=f"minted/{name}/{sha[:12]}/{n}",
        source="minted",
        prompt=problem_statement(snap, first, report.first_failure, set(product), len(failing)),
        kind="repo",
        repo=name,
        snapshot=sha,
        bug_patch=file_diff(cand.path, cand.source, cand.mutated),
        patch=file_diff(cand.path, cand.mutated, cand.source),
        test_patch=test_patch,
        fail_to_pass=f2p,
        pass_to_pass=[t for t in visible if t not in failing],
        visible_tests=visible,
        hidden_tests=hidden,
        difficulty=min(len(failing), 9),  # fewer failing tests: a narrower symptom to chase
        environment=cfg.env_name,
        metadata={"license": cfg.license, **({"env_spec": cfg.env_spec} if cfg.env_spec else {}),
                  "hidden_fail_to_pass": [t for t in hidden if t in failing_now],
                  "mutation": {"operator": cand.mutation.operator, "path": cand.path,
                               "function": cand.mutation.function, "site": site},
                  "provenance": {"generator": "mint-v1", "repo": name, "seed": cfg.seed}},
    )


def _rejection(report, failing: tuple, seen_failing: set) -> str:
    """Why a candidate's run does not make a task ('' when it does)."""
    if report.status == "timeout":
        return "timeout"
    if not report.collected_ok:
        return "collect_error"
    if not failing:
        return "no_test_fails"
    return "duplicate_failing_set" if failing in seen_failing else ""


def _judge_gold(ex, repos: Path, tasks: list[Task]) -> list[dict]:
    """Judge each task's own fix as the judge will pay an agent's: what it refuses (a
    test that reads its own file or name, fails alone in a fresh process, or trips the
    tamper checks; a test the sandbox image skips) is no task, however the mutation ran.
    One entry per task: {} when the judge resolves its gold patch, else why not."""
    from codeloop.agent.judge import judge_many

    verdicts = judge_many([(t, t.patch) for t in tasks], str(repos), ex) if tasks else []
    return [{} if v.resolved else _refusal(t, v) for t, v in zip(tasks, verdicts, strict=True)]


def _refusal(task: Task, v) -> dict:
    """Why the judge did not pay a task's own fix: its flags and problems, and when it
    raised none, the tests that did not pass (id: outcome, exception type) and the run's
    status, so a refusal is never an empty record."""
    unpassed = {i: o + (f" ({v.failure_types[i]})" if i in v.failure_types else "")
                for i, o in sorted(v.outcomes.items()) if o != "passed"}
    return {"task_id": task.task_id, "flags": list(v.hack_flags),
            "problems": [p[:300] for p in v.problems[:3]],
            "status": v.status or ("not applied: " + v.apply_error[:200] if not v.applied else ""),
            "passed": {"f2p": f"{v.f2p_passed}/{v.f2p_total}",
                       "p2p": f"{v.p2p_passed}/{v.p2p_total}",
                       "hidden": f"{v.hidden_passed}/{v.hidden_total}"},
            "not_passed": dict(list(unpassed.items())[:5])}


def _mint(ex, repos: Path, sha: str, name: str, env: list[str], cfg: MintConfig) -> MintResult:
    snap = store.snapshot_path(repos, sha)
    pristine = _run_trees(ex, snap, [None] * cfg.pristine_runs, env, cfg)
    stable, unstable = _stable(pristine)
    if not stable:
        raise RuntimeError(
            f"mint: no test of {name} passes {cfg.pristine_runs}x on the pristine tree"
        )
    product = product_files(snap)
    cands = _candidates(snap, product, random.Random(cfg.seed))
    max_tries = cfg.max_tries or 20 * cfg.max_tasks
    res = MintResult()
    rejected: Counter = Counter()
    per_op: dict[str, Counter] = {}
    seen_failing: set[tuple] = set()
    refused: list[dict] = []
    made = 0
    tried, batch = 0, max(4, 4 * cfg.workers)  # a few runs per batch command and worker
    while cands and len(res.tasks) < cfg.max_tasks and tried < max_tries:
        chunk, cands = cands[:batch], cands[batch:]
        reports = _run_trees(ex, snap, chunk, env, cfg)
        new: list[tuple[Task, Counter]] = []
        for c, r in zip(chunk, reports, strict=True):
            if len(res.tasks) + len(new) >= cfg.max_tasks:
                break
            tried += 1
            op = per_op.setdefault(c.mutation.operator, Counter())
            op["tried"] += 1
            failing = tuple(sorted(t for t in stable if r.outcomes.get(t) != "passed"))
            reason = _rejection(r, failing, seen_failing)
            if reason:
                rejected[reason] += 1
                continue
            seen_failing.add(failing)
            new.append((_task(name, sha, c, set(failing), stable, r, snap, product, cfg,
                              made), op))
            made += 1  # a refused task keeps its number: each id names one candidate
        for (task, op), why in zip(new, _judge_gold(ex, repos, [t for t, _ in new]), strict=True):
            if why:
                rejected["judge_refuses_gold"] += 1
                refused.append(why)
            else:
                op["kept"] += 1
                res.tasks.append(task)
    res.report = {
        "repo": name,
        "snapshot": sha,
        "tests": {"collected": len(stable) + len(unstable), "stable": len(stable),
                  "excluded_flaky_or_failing": sorted(unstable)},
        "product_files": product,
        "tried": tried,
        "kept": len(res.tasks),
        "rejected": dict(sorted(rejected.items())),
        "judge_refused": refused,
        "per_operator": {k: {"tried": v["tried"], "kept": v["kept"],
                             "yield": round(v["kept"] / v["tried"], 4) if v["tried"] else 0.0}
                         for k, v in sorted(per_op.items())},
    }
    return res


def mint_repo(path: str | Path, out_dir: str | Path, cfg: MintConfig, backend: str = "local"):
    """Mint tasks from the repository (dir or sdist) at ``path`` into ``out_dir``:
    tasks.parquet, instances.jsonl (the tasks as SWE-bench instances), repos/<sha>/ (the
    pristine snapshot), report.json, manifest.json."""
    import dataclasses
    import time

    from codeloop import io
    from codeloop.agent.envdirs import env_paths
    from codeloop.config import SandboxConfig
    from codeloop.sandbox import make_executor

    out = Path(out_dir)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="codeloop-mint-") as tmp:
        root = unpack_source(path, tmp)
        sha = store.store_snapshot(root, out / "repos")
        name = cfg.name or root.name
        envs = Path(tmp, "envs")
        envs.mkdir()
        cfg, environment = _environment(root, cfg, envs, name, Path(tmp, "site"))
        probe = Task(task_id="mint", source="minted", prompt="-", environment=cfg.env_name)
        env = env_paths(probe, str(envs))
        sandbox = SandboxConfig(backend=backend, workers=cfg.workers, timeout_s=cfg.timeout_s)
        own = str(envs / cfg.env_name) if cfg.env_name else None  # docker: its env's image
        ex = make_executor(sandbox, workspaces=True, envs_root=str(envs), env_dir=own)
        try:
            res = _mint(ex, out / "repos", sha, name, env, cfg)
        finally:
            ex.close()
        if cfg.env_name:  # the env travels with the tasks: clean copies it beside its snapshots
            from codeloop.agent.workspace import copy_tree
            from codeloop.sandbox.env_trust import DIGEST_KEY, tree_digest

            (out / "envs" / cfg.env_name).mkdir(parents=True, exist_ok=True)
            copy_tree(str(envs / cfg.env_name), str(out / "envs" / cfg.env_name))
            # what the tasks were validated in: clean checks the shipped dir against it
            digest = tree_digest(envs / cfg.env_name)
            for t in res.tasks:
                t.metadata[DIGEST_KEY] = digest
        if cfg.env_spec:  # and the wheels its pins name, so clean can rebuild it offline
            from codeloop.data.repos.envbuild import copy_pinned_wheels
            from codeloop.data.repos.envspec import EnvSpec

            copy_pinned_wheels(EnvSpec.from_dict(cfg.env_spec), cfg.wheel_cache, out / "wheels")
    res.report["seconds"] = round(time.perf_counter() - start, 2)
    res.report["environment"] = environment
    io.write_tasks(out / "tasks.parquet", res.tasks)
    # the same tasks as SWE-bench instances, for SWE-bench tooling (swebench_rows)
    io.write_jsonl(out / "instances.jsonl", [to_swebench(t) for t in res.tasks])
    io.write_json(out / "report.json", res.report)
    io.write_json(out / "manifest.json", {
        "generator": "mint-v1", "repo": res.report["repo"], "snapshot": sha,
        "tasks": len(res.tasks), "tasks_sha256": io.sha256_file(out / "tasks.parquet"),
        "params": dataclasses.asdict(cfg), "backend": backend, "environment": environment,
    })
    store.prune_snapshots(out / "repos", {sha})
    return res
