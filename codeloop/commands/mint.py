"""`codeloop mint`: repository tasks from a local Python repository with a pytest suite, or
from a list of real packages' sdists.

    codeloop mint --repo PATH --out DIR [--max N] [--seed S] [--workers N]
                  [--hidden-fraction F] [--name NAME] [--license SPDX] [--deps DIR]
                  [--no-install-deps] [--wheel-cache DIR] [--backend local|docker]
    codeloop mint --repos-list [FILE] (--out DIR | --fetch-only) [--sdist-cache DIR]
                  [--max N] [--seed S] [--workers N] [--hidden-fraction F]
                  [--wheel-cache DIR] [--backend local|docker]

PATH is a repository directory or an sdist (.tar.gz) that ships its tests. Writes
DIR/tasks.parquet, DIR/instances.jsonl (the same tasks with SWE-bench's columns:
codeloop.data.repos.swebench_rows), DIR/repos/<sha>/ (the pristine snapshot), DIR/report.json (tried,
kept, rejected by reason, per-operator yield) and DIR/manifest.json; `codeloop clean
--source repo:DIR` takes it. Exit 0 when it ran, 2 for an unusable repository, 3 when the
sandbox failed (or its environment cannot be built). The repository's declared
dependencies (pyproject, setup.cfg, setup.py, requirements*.txt and their test extras) are
resolved by pip once from the registry through the ``--wheel-cache`` (offline once it holds
them) and pinned into an environment spec with the interpreter the repository needs
(exit 2 when that is not the sandbox's); the spec is built into DIR/envs/<spec hash>/
(``Task.environment``; the spec itself in each task's metadata, the pinned wheels in
DIR/wheels/ so clean can rebuild it offline), mounted read-only in the sandbox, or baked
into an image of its own on the docker backend. ``--deps DIR`` names a ready
``pip install --target`` dir instead: it becomes the tasks' env dir as it is.

``--repos-list FILE`` (default: params.yaml's ``mint.repos_list``) mints every repository
of a list of pinned sdists (codeloop.config.mint): each is fetched once into the
``--sdist-cache`` and checked against its sha256 (exit 2 naming the repository and both
hashes on a mismatch, before anything is minted), then minted as above
(codeloop.data.repos.mint_list): the training repositories' tasks into DIR (``repo:DIR``),
the held-out ones' into DIR/heldout/; ``codeloop clean --source mint:DIR`` takes both, the
held-out ones as the frozen set heldout_mint. A repository that cannot be minted is a row
of the yield table (tried, kept, rejected by reason, seconds; printed and in
DIR/report.json) with its reason, and the others still mint; exit 0 when at least one
repository minted a task, 2 when none did, 3 when the sandbox failed. Defaults of the
knobs come from params.yaml's ``mint`` section (``--params``).
"""

from __future__ import annotations

import sys

from codeloop.sandbox.base import SandboxError

HELP = "Mint repository tasks (planted single-site bugs) from a repo with a pytest suite."


def add_arguments(p) -> None:
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--repo", help="repository dir or sdist .tar.gz")
    what.add_argument("--repos-list", nargs="?", const="", metavar="FILE",
                      help="list of pinned sdists (default: params mint.repos_list)")
    p.add_argument("--out", help="output directory (not needed with --fetch-only)")
    p.add_argument("--params", default="params.yaml",
                   help="params file whose mint section gives the defaults (optional)")
    p.add_argument("--max", type=int, help="tasks to keep at most (per repository)")
    p.add_argument("--seed", type=int, help="seed of the candidate order")
    p.add_argument("--workers", type=int, help="sandbox workers")
    p.add_argument("--hidden-fraction", type=float,
                   help="share of FAIL_TO_PASS test files kept hidden")
    p.add_argument("--sdist-cache", help="--repos-list: where the sdists are fetched once")
    p.add_argument("--fetch-only", action="store_true",
                   help="--repos-list: fetch and check every sdist, mint nothing")
    p.add_argument("--name", default="", help="repository name (default: its dir name)")
    p.add_argument("--license", default="unknown", help="licence recorded in each task")
    p.add_argument("--deps", default="",
                   help="dir of the repo's installed dependencies (pip install --target DIR)")
    p.add_argument("--no-install-deps", action="store_true",
                   help="do not pip-install the repo's declared dependencies")
    p.add_argument("--wheel-cache",
                   help="pip --find-links cache of the dependencies (offline once filled)")
    p.add_argument("--backend", choices=["local", "docker"], default="local")


def _section(args):
    """params' mint section with the flags given on the command line over it."""
    from pathlib import Path

    from codeloop.config import MintSection, load_params

    base = load_params(args.params).mint if Path(args.params).exists() else MintSection()
    given = {"max_tasks": args.max, "seed": args.seed, "workers": args.workers,
             "hidden_fraction": args.hidden_fraction, "wheel_cache": args.wheel_cache,
             "sdist_cache": args.sdist_cache}
    return MintSection.model_validate({**base.model_dump(),
                                       **{k: v for k, v in given.items() if v is not None}})


def run(args) -> int:
    from codeloop.config import ConfigError

    try:
        section = _section(args)
    except (ConfigError, ValueError) as exc:
        print(f"codeloop mint: {exc}", file=sys.stderr)
        return 2
    if not args.out and not (args.repo is None and args.fetch_only):
        print("codeloop mint: --out is required", file=sys.stderr)
        return 2
    if args.repo is None:
        return _run_list(args, section)
    from codeloop.data.repos.envbuild import EnvBuildError
    from codeloop.data.repos.mint import MintConfig, mint_repo
    from codeloop.data.repos.repo_deps import DepsError

    cfg = MintConfig(max_tasks=section.max_tasks, seed=section.seed, workers=section.workers,
                     hidden_fraction=section.hidden_fraction, name=args.name,
                     license=args.license, deps=args.deps,
                     install_deps=not args.no_install_deps,
                     wheel_cache=section.wheel_cache)
    try:
        res = mint_repo(args.repo, args.out, cfg, backend=args.backend)
    except (OSError, ValueError, RuntimeError) as exc:
        if isinstance(exc, SandboxError | DepsError | EnvBuildError):
            print(f"codeloop mint: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 3
        print(f"codeloop mint: {exc}", file=sys.stderr)
        return 2
    r = res.report
    print(f"{r['repo']}: tried {r['tried']}, kept {r['kept']}, rejected {r['rejected']}; "
          f"{r['tests']['stable']} stable tests; {r['seconds']} s")
    return 0


def _run_list(args, section) -> int:
    from codeloop.config import load_repos_list
    from codeloop.data.repos.mint_list import ListConfig, fetch_all, format_yield_table, mint_list
    from codeloop.data.repos.sdists import FetchError, PinMismatch

    path = args.repos_list or section.repos_list
    try:
        repos = load_repos_list(path).repos
    except ValueError as exc:
        print(f"codeloop mint: {exc}", file=sys.stderr)
        return 2
    cfg = ListConfig(max_tasks=section.max_tasks, seed=section.seed, workers=section.workers,
                     hidden_fraction=section.hidden_fraction, wheel_cache=section.wheel_cache,
                     sdist_cache=section.sdist_cache)

    def progress(row):
        print(f"{row['repo']} {row['version']} ({row['split']}): {row['status']}, "
              f"tried {row['tried']}, kept {row['kept']}, {row['seconds']} s"
              + (f"; {row['reason'][:300]}" if row["reason"] else ""), flush=True)

    try:
        if args.fetch_only:
            for name, got in fetch_all(repos, cfg.sdist_cache).items():
                print(f"{name}: {got}")
            return 0
        report = mint_list(repos, args.out, cfg, backend=args.backend, progress=progress)
    except (PinMismatch, FetchError) as exc:
        print(f"codeloop mint: {path}: {exc}", file=sys.stderr)
        return 2
    except SandboxError as exc:
        print(f"codeloop mint: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    except (OSError, ValueError) as exc:
        print(f"codeloop mint: {exc}", file=sys.stderr)
        return 2
    print(format_yield_table(report))
    return 0 if report["totals"]["kept"] else 2
