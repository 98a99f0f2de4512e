"""`codeloop mint`: repository tasks from a local Python repository with a pytest suite.

    codeloop mint --repo PATH --out DIR [--max N] [--seed S] [--workers N]
                  [--hidden-fraction F] [--name NAME] [--license SPDX] [--deps DIR]
                  [--no-install-deps] [--wheel-cache DIR] [--backend local|docker]

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
"""

from __future__ import annotations

import sys

from codeloop.sandbox.base import SandboxError

HELP = "Mint repository tasks (planted single-site bugs) from a repo with a pytest suite."


def add_arguments(p) -> None:
    p.add_argument("--repo", required=True, help="repository dir or sdist .tar.gz")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--max", type=int, default=20, help="tasks to keep at most")
    p.add_argument("--seed", type=int, default=0, help="seed of the candidate order")
    p.add_argument("--workers", type=int, default=2, help="sandbox workers")
    p.add_argument("--hidden-fraction", type=float, default=0.0,
                   help="share of FAIL_TO_PASS test files kept hidden")
    p.add_argument("--name", default="", help="repository name (default: its dir name)")
    p.add_argument("--license", default="unknown", help="licence recorded in each task")
    p.add_argument("--deps", default="",
                   help="dir of the repo's installed dependencies (pip install --target DIR)")
    p.add_argument("--no-install-deps", action="store_true",
                   help="do not pip-install the repo's declared dependencies")
    p.add_argument("--wheel-cache", default=".cache/mint/wheels",
                   help="pip --find-links cache of the dependencies (offline once filled)")
    p.add_argument("--backend", choices=["local", "docker"], default="local")


def run(args) -> int:
    from codeloop.data.repos.envbuild import EnvBuildError
    from codeloop.data.repos.mint import MintConfig, mint_repo
    from codeloop.data.repos.repo_deps import DepsError

    cfg = MintConfig(max_tasks=args.max, seed=args.seed, workers=args.workers,
                     hidden_fraction=args.hidden_fraction, name=args.name,
                     license=args.license, deps=args.deps,
                     install_deps=not args.no_install_deps,
                     wheel_cache=args.wheel_cache)
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
