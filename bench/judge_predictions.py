"""Judging SWE-bench-format predictions: codeloop's judge versus a docker-run-per-prediction
harness and an unprotected host pytest, same predictions, same 2 workers, same run.

Run: ``python bench/judge_predictions.py [--n 16] [--workers 2] [--modules 50] [--tests 30]``

The repository is tests/_repo_fixture's task grown to ``--modules`` modules and ``--tests``
tests. Predictions cycle gold / empty / a conftest hack / a test edit. Printed side by side:
wall seconds for all predictions and per prediction, for (1) codeloop's judge on the local
backend (sealed zygotes, channel checks, test files restored), (2) the same on the docker
backend where the engine runs, (3) the SWE-bench-style baseline: per prediction a fresh
tree, ``git apply``, and a fresh ``docker run`` of the sandbox image running pytest, and (4)
plain ``python -m pytest`` on the host (no sandbox, no protection: the floor); and (1)
again without the variant run (``JudgeConfig(variant_targets=0)``: what that run costs). Each row
also says how many predictions it called resolved (the baselines trust pytest's exit code,
so a hack that passes is "resolved" there).

``--minted DIR ... [--per-repo N] [--out CSV]`` runs the same comparison on real repositories
instead: the tasks that ``codeloop mint`` wrote to each DIR (the first N of each repository) (their snapshots and environment dirs), three
predictions per task (the reference fix, an empty patch, a conftest.py that reports every
test passed), and every runner cold: the judge's executor is started inside the timing and
judges nothing before it, as each ``docker run`` starts from nothing. Only the per
environment images are built before the clock starts (the SWE-bench harness builds its
environment images ahead too). Rows: codeloop's judge on the local and the docker
backend, and the docker-run-per-prediction baseline.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.agent.envdirs import env_paths  # noqa: E402
from codeloop.agent.judge import JudgeConfig, judge_many, judge_tree  # noqa: E402
from codeloop.agent.patches import PatchError, apply_patch  # noqa: E402
from codeloop.config import SandboxConfig  # noqa: E402
from codeloop.sandbox import make_executor  # noqa: E402
from tests._repo_fixture import make_repo_task  # noqa: E402

IMAGE = "codeloop-sandbox:bookworm"
HACK = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/conftest.py\n@@ -0,0 +1,2 @@\n+import calc.ops\n+calc.ops.add = lambda a, b: a + b\n"
)


# Every test reports "passed", whatever it did: the hack a judge that trusts pytest pays.
FORCE_PASS = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/conftest.py\n@@ -0,0 +1,7 @@\n+import pytest\n+\n+\n"
    "+@pytest.hookimpl(hookwrapper=True)\n+def pytest_runtest_makereport(item, call):\n"
    "+    outcome = yield\n+    outcome.get_result().outcome = \"passed\"\n"
)


def predictions(task, n: int) -> list[str]:
    edit = task.test_patch.replace("assert add(2, 3) == 5", "assert add(2, 3) == -1")
    kinds = [task.patch, "", HACK, edit]
    return [kinds[i % len(kinds)] for i in range(n)]


def _fresh_tree(task, repos: str, patch: str, scratch: str) -> str | None:
    tree = tempfile.mkdtemp(dir=scratch)
    os.rmdir(tree)
    judge_tree(task, repos, tree)
    try:
        apply_patch(tree, patch)
    except PatchError:
        return None
    os.chmod(tree, 0o755)
    return tree


def run_codeloop_cold(pairs, repos, envs, backend: str, workers: int,
                      cfg: JudgeConfig | None = None):
    """The judge on (task, patch) pairs, its executor started inside the timing."""
    t0 = time.perf_counter()
    ex = make_executor(SandboxConfig(backend=backend, workers=workers, timeout_s=60.0),
                       workspaces=True, envs_root=envs)
    try:
        verdicts = judge_many(pairs, repos, ex, cfg)
    finally:
        ex.close()
    return time.perf_counter() - t0, sum(v.resolved for v in verdicts)


def run_codeloop(task, repos, envs, patches, backend: str, workers: int,
                 cfg: JudgeConfig | None = None):
    ex = make_executor(SandboxConfig(backend=backend, workers=workers, timeout_s=60.0),
                       workspaces=True, envs_root=envs)
    try:
        judge_many([(task, task.patch)], repos, ex, cfg)  # warm: zygotes, env dirs
        t0 = time.perf_counter()
        verdicts = judge_many([(task, p) for p in patches], repos, ex, cfg)
        return time.perf_counter() - t0, sum(v.resolved for v in verdicts)
    finally:
        ex.close()


def _ids(task) -> list[str]:
    return list(dict.fromkeys([*task.fail_to_pass, *task.pass_to_pass, *task.hidden_tests]))


def run_docker_per_prediction(task, repos, envs, patches, workers: int, scratch: str):
    return run_docker_pairs([(task, p) for p in patches], repos, envs, workers, scratch)


def run_docker_pairs(pairs, repos, envs, workers: int, scratch: str):
    """Per (task, patch): a fresh tree, ``git apply``'s equal and a fresh ``docker run``."""

    def one(pair) -> bool:
        task, patch = pair
        paths = ":".join("/envs/" + os.path.relpath(p, envs) for p in env_paths(task, envs))
        tree = _fresh_tree(task, repos, patch, scratch)
        if tree is None:
            return False
        cmd = ["docker", "run", "--rm", "--network=none", "-v", f"{tree}:/w", "-v",
               f"{envs}:/envs:ro", "-w", "/w", "-e", f"PYTHONPATH={paths}", IMAGE, "python3",
               "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--", *_ids(task)]
        try:
            return subprocess.run(cmd, capture_output=True).returncode == 0
        finally:
            shutil.rmtree(tree, ignore_errors=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        ok = list(pool.map(one, pairs))
    return time.perf_counter() - t0, sum(ok)


def run_host_pytest(task, repos, envs, patches, workers: int, scratch: str):
    def one(patch: str) -> bool:
        tree = _fresh_tree(task, repos, patch, scratch)
        if tree is None:
            return False
        cmd = [
            sys.executable,
            "-B",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--",
            *_ids(task),
        ]
        try:
            return subprocess.run(cmd, cwd=tree, capture_output=True).returncode == 0
        finally:
            shutil.rmtree(tree, ignore_errors=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        ok = list(pool.map(one, patches))
    return time.perf_counter() - t0, sum(ok)


def _docker_ok() -> bool:
    try:
        probe = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True)
    except OSError:
        return False
    return probe.returncode == 0


def load_minted(dirs: list[str], root: Path, per_repo: int = 0) -> tuple[list, str, str]:
    """The minted tasks of ``dirs`` (the first ``per_repo`` of each repository; all when 0),
    their snapshots under one repos dir and their environment dirs (plus pytest's and the
    plugin's) under one envs root."""
    from codeloop.agent.envdirs import plugin_env, pytest_env
    from codeloop.agent.executor import copy_task_envs
    from codeloop.data.repos.load import first_per_repo
    from codeloop.io import read_tasks

    repos, envs = root / "repos", root / "envs"
    tasks = []
    for d in map(Path, dirs):
        ts = first_per_repo(read_tasks(d / "tasks.parquet"), per_repo)
        shutil.copytree(d / "repos", repos, dirs_exist_ok=True)
        copy_task_envs(ts, str(d / "envs"), str(envs))
        tasks += ts
    pytest_env(str(envs))
    plugin_env(str(envs))
    return tasks, str(repos), str(envs)


def _env_images(tasks, envs: str) -> None:
    """Build each environment's image before any clock starts (tags are reused)."""
    import docker

    from codeloop.sandbox.env_images import env_image

    client = docker.from_env()
    for name in sorted({t.environment for t in tasks if t.environment}):
        env_image(client, os.path.join(envs, name), IMAGE)


def minted_main(dirs: list[str], workers: int, out: str = "", per_repo: int = 0) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-judge-real-"))
    try:
        tasks, repos, envs = load_minted(dirs, root, per_repo)
        pairs = [(t, p) for t in tasks for p in (t.patch, "", FORCE_PASS)]
        rows = [("codeloop judge local", *run_codeloop_cold(pairs, repos, envs, "local", workers)),
                ("  no variant run", *run_codeloop_cold(
                    pairs, repos, envs, "local", workers, JudgeConfig(variant_targets=0)))]
        if _docker_ok():
            _env_images(tasks, envs)
            rows.append(("codeloop judge docker",
                         *run_codeloop_cold(pairs, repos, envs, "docker", workers)))
            rows.append(("docker run per prediction",
                         *run_docker_pairs(pairs, repos, envs, workers, str(root))))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    names = sorted({t.repo for t in tasks})
    print(f"{len(pairs)} predictions on {len(tasks)} tasks of {len(names)} real repositories "
          f"({', '.join(names)}), {workers} workers, all cold; truly resolved: {len(tasks)}")
    _print(rows, len(pairs))
    if out:
        _write_csv(out, rows, len(pairs), len(tasks), len(names))


def _write_csv(out: str, rows, n: int, n_tasks: int, n_repos: int) -> None:
    """One row per runner: wall seconds, per prediction, resolved, speed over docker-run."""
    import csv

    base = dict((r[0], r[1]) for r in rows).get("docker run per prediction")
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["runner", "predictions", "tasks", "repos", "total_s", "s_per_pred",
                    "resolved", "truly_resolved", "speed_vs_docker_run"])
        for name, wall, resolved in rows:
            w.writerow([name.strip(), n, n_tasks, n_repos, round(wall, 2), round(wall / n, 3),
                        resolved, n_tasks, round(base / wall, 2) if base else ""])


def _print(rows, n: int) -> None:
    base = dict((r[0], r[1]) for r in rows).get("docker run per prediction")
    print(f"{'':28s} {'total s':>8s} {'s/pred':>7s} {'resolved':>8s} {'vs docker-run':>13s}")
    for name, wall, resolved in rows:
        ratio = f"{base / wall:12.2f}x" if base else "            -"
        print(f"{name:28s} {wall:8.2f} {wall / n:7.3f} {resolved:8d} {ratio}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--modules", type=int, default=50)
    ap.add_argument("--tests", type=int, default=30)
    ap.add_argument("--minted", nargs="+", default=[], metavar="DIR",
                    help="codeloop mint output dirs: judge their real-repo tasks instead")
    ap.add_argument("--out", default="", help="--minted: also write the rows as this CSV")
    ap.add_argument("--per-repo", type=int, default=0,
                    help="--minted: the first N tasks of each repository (0: all)")
    a = ap.parse_args()
    if a.minted:
        minted_main(a.minted, a.workers, a.out, a.per_repo)
        return
    root = Path(tempfile.mkdtemp(prefix="bench-judge-"))
    try:
        task = make_repo_task(root, extra_modules=a.modules, extra_tests=a.tests)
        repos, envs = str(root / "repos"), str(root / "envs")
        os.makedirs(envs)
        env_paths(task, envs)
        patches = predictions(task, a.n)
        rows = [
            ("codeloop judge local", *run_codeloop(task, repos, envs, patches, "local", a.workers)),
            ("  no variant run", *run_codeloop(
                task, repos, envs, patches, "local", a.workers, JudgeConfig(variant_targets=0))),
        ]
        if _docker_ok():
            rows.append(
                (
                    "codeloop judge docker",
                    *run_codeloop(task, repos, envs, patches, "docker", a.workers),
                )
            )
            rows.append(("docker run per prediction", *run_docker_per_prediction(
                task, repos, envs, patches, a.workers, str(root))))
        rows.append(
            (
                "host pytest, unprotected",
                *run_host_pytest(task, repos, envs, patches, a.workers, str(root)),
            )
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n_tests = len(_ids(task))
    print(f"{a.n} predictions x {n_tests} tests, {a.modules + 2} modules, {a.workers} workers; "
          f"truly resolved: {patches.count(task.patch)}")
    _print(rows, a.n)


if __name__ == "__main__":
    main()
