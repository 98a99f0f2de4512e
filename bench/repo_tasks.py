"""Repository-task data costs, each beside a baseline measured in the same run.

Run: ``python bench/repo_tasks.py [--tasks 40] [--workers 2]``

- generation: synthetic repository tasks per second (codeloop.data.repos.synth), beside
  the function-task generator (codeloop.data.generator) on the same count;
- executability filter: the clean stage's sealed-sandbox verification of each task (base
  and reference fix, codeloop.data.repos.curate_repos), batched (several pytest runs per
  interpreter start-up, the default) beside one command per run, and plain host pytest on the
  same two trees, one process per tree, serial, plugin autoload off as in the sandbox
  (what a harness without a sandbox pays);
- mint: the pinned inflection sdist (.cache/mint, fetched by scripts/setup.sh) minted to
  5 tasks: seconds, candidates tried, kept, yield.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.agent.patches import apply_patch  # noqa: E402
from codeloop.agent.workspace import copy_tree  # noqa: E402
from codeloop.config import parse_params  # noqa: E402
from codeloop.data.generator import generate_tasks  # noqa: E402
from codeloop.data.repos.curate_repos import RepoVerifier, verify_repo_tasks  # noqa: E402
from codeloop.data.repos.mint import MintConfig, mint_repo  # noqa: E402
from codeloop.data.repos.store import store_files  # noqa: E402
from codeloop.data.repos.synth import generate_repo_tasks  # noqa: E402

SDIST = Path(__file__).resolve().parents[1] / ".cache" / "mint" / "inflection-0.5.1.tar.gz"


def _host_pytest(tasks, repos: Path, tmp: Path) -> float:
    # as the sandbox runs it: no third-party plugin autoload (the venv has several)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    for i, t in enumerate(tasks):
        for side in ("base", "fixed"):
            d = tmp / f"{i}-{side}"
            d.mkdir()
            copy_tree(str(repos / t.snapshot), str(d))
            apply_patch(str(d), t.bug_patch)
            if side == "fixed":
                apply_patch(str(d), t.patch)
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=d, capture_output=True, check=False, env=env)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    n = args.tasks
    t0 = time.perf_counter()
    tasks, trees = generate_repo_tasks(n, seed=0)
    gen_repo = time.perf_counter() - t0
    t0 = time.perf_counter()
    generate_tasks(n, seed=0)
    gen_fn = time.perf_counter() - t0
    print(f"generation ({n} tasks): repo {n / gen_repo:.0f} tasks/s, function {n / gen_fn:.0f} "
          f"tasks/s (repo tasks cost {gen_repo / gen_fn:.1f}x; {len(trees)} repositories)")
    with tempfile.TemporaryDirectory() as tmp:
        repos = Path(tmp, "clean", "repos")
        for files in trees.values():
            store_files(files, repos)
        params = parse_params({"clean": {"repo_verify_runs": 1},
                               "sandbox": {"backend": "local", "workers": args.workers}})
        v = RepoVerifier(params, repos)
        v.verify(tasks[:2])  # opens the executor, builds the env dirs (not timed)
        timed = {}
        for batched in (False, True):
            t0 = time.perf_counter()
            got = verify_repo_tasks(tasks, str(repos), v._executor, 1, v.envs_root, 30.0,
                                    batched=batched)
            timed[batched] = (time.perf_counter() - t0, got)
        v.close()
        (plain, (kept, dropped)), (batch, same) = timed[False], timed[True]
        assert [t.task_id for t in same[0]] == [t.task_id for t in kept], "verdicts differ"
        host = _host_pytest(tasks, repos, Path(tmp))
        print(f"executability filter ({n} tasks, 2 trees each, {args.workers} workers, kept "
              f"{len(kept)}, dropped {len(dropped)}; batched: the same verdicts): "
              f"batched {batch:.1f} s ({1000 * batch / n:.0f} ms/task) vs one command per run "
              f"{plain:.1f} s ({1000 * plain / n:.0f} ms/task): ratio {batch / plain:.2f}; "
              f"host pytest serial {host:.1f} s ({1000 * host / n:.0f} ms/task)")
        if SDIST.exists():
            t0 = time.perf_counter()
            res = mint_repo(SDIST, Path(tmp, "mint"), MintConfig(max_tasks=5, workers=args.workers))
            r = res.report
            print(f"mint inflection-0.5.1 (max 5): {time.perf_counter() - t0:.1f} s, tried "
                  f"{r['tried']}, kept {r['kept']} (yield {r['kept'] / max(1, r['tried']):.2f}), "
                  f"rejected {r['rejected']}, {r['tests']['stable']} stable tests")
        else:
            print(f"mint: {SDIST} absent (scripts/setup.sh fetches it)")


if __name__ == "__main__":
    main()
