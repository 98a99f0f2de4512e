"""Nightly flow wall time on tiny params, and what Prefect adds per stage.

Run: ``python bench/nightly_overhead.py [--toy] [--plain-only]``

1. Starts a real local Prefect server (as a team would run it), copies this repo into a
   temp git repo with tiny params (``--toy``: the two-stage toy pipeline of the tests
   instead) and runs ``python -m flows.nightly --no-pull`` there: the night's wall time.
2. Per stage, the ``repro_stage[<stage>]`` Prefect task's duration (from the server's API) beside
   the same command, ``dvc repro --single-item --force <stage>``, run directly with no
   Prefect task around it: the difference is the task wrapper's cost (state reporting,
   every output line streamed into the run log).
3. The floor every stage process pays to be a Prefect flow at all: ``import prefect``
   plus one empty flow run against the server, beside a bare ``python -c pass``.
4. A plain ``dvc repro`` with no ``PREFECT_API_URL`` (what ``dvc repro`` alone gives a
   newcomer), twice on fresh copies of the same tiny repo (``--toy``: a two-stage repo of
   Prefect flows): *before*, each stage process boots Prefect's own temporary server
   (``CODELOOP_SHARED_PREFECT_SERVER=0``); *after*, the stages share one local server
   (flows/_server.py). Wall times, server starts counted, and their ratio.
   ``--plain-only`` runs just this part.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flows._server import state_dir  # noqa: E402
from tests._prefect_api import base_name  # noqa: E402
from tests._prefect_server import local_prefect_server, server_env  # noqa: E402
from tests._shared_server_repo import make_probe_repo, processes_of  # noqa: E402
from tests._toy_pipeline import make_toy_repo  # noqa: E402

TINY = {
    "policy_init": {"vocab_size": 400, "n_layer": 1, "n_head": 2, "n_embd": 32,
                    "n_positions": 512},
    "sft": {"steps": 10, "batch_size": 8},
    "clean": {"sources": [{"kind": "synthetic", "n": 40, "seed": 1, "max_depth": 2}],
              "verify_runs": 1},
    "bucket": {"tasks_per_iteration": 6},
    "rollout": {"samples_per_task": 3, "max_steps": 2, "max_new_tokens": 24, "batch_size": 16},
    "train": {"steps": 1, "micro_batch_size": 4, "grad_accum": 1},
    "evaluate": {"max_tasks_per_set": 4, "max_new_tokens": 24},
}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base.get(k) or {}, v) if isinstance(v, dict) else v
    return out


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def tiny_repo(dst: Path) -> Path:
    """A fresh git repo holding this repo's files (as a clone would) on tiny params."""
    listed = _git(ROOT, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dst / rel)
    params = yaml.safe_load((dst / "params.yaml").read_text())
    (dst / "params.yaml").write_text(yaml.safe_dump(_merge(params, TINY), sort_keys=False))
    _git(dst, "init", "-q", "-b", "main")
    remote = dst.parent / "remote"
    cfg = (dst / ".dvc/config").read_text() if (dst / ".dvc/config").exists() else ""
    if "url" in cfg:  # point the repo's default remote at a temp dir, not the real one
        subprocess.run([sys.executable, "-m", "dvc", "remote", "modify", "--local",
                        _default_remote(dst), "url", str(remote)], cwd=dst, check=True)
    _git(dst, "add", "-A")
    _git(dst, "commit", "-qm", "tiny")
    return dst


def _default_remote(repo: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "dvc", "config", "core.remote"], cwd=repo,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _secs(run: dict) -> float:
    start, end = run.get("start_time"), run.get("end_time")
    if not (start and end):
        return float("nan")
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _timed(cmd: list[str], cwd: Path, env: dict) -> float:
    """Wall seconds of cmd; NaN (with its output tail printed) when it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"FAILED ({proc.returncode}): {' '.join(cmd[-3:])}\n{proc.stdout[-1500:]}"
              f"{proc.stderr[-1500:]}")
        return float("nan")
    return time.perf_counter() - t0


def plain_repro(root: Path, toy: bool, shared: bool) -> tuple[float, int]:
    """(wall seconds, Prefect servers started) of `dvc repro` with no PREFECT_API_URL."""
    root.mkdir()
    if toy:
        repo = make_probe_repo(root)
    else:
        (root / "repo").mkdir()
        repo = tiny_repo(root / "repo")
    home = root / "prefect-home"
    env = {**server_env(str(home)), "PYTHONPATH": str(ROOT), "CODELOOP_PREFECT_SERVER_GRACE_S": "5",
           "CODELOOP_SHARED_PREFECT_SERVER": "1" if shared else "0",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=repo, env=env,
                          capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-4000:])
        raise SystemExit(f"plain dvc repro failed (exit {proc.returncode})")
    starts = (proc.stdout + proc.stderr).count("Starting temporary server")
    log = state_dir(home) / "server.log"
    starts += log.read_text().count("Check out the dashboard") if log.exists() else 0
    deadline = time.monotonic() + 120  # the shared server leaves after its grace period
    while processes_of(home) and time.monotonic() < deadline:
        time.sleep(0.5)
    if processes_of(home):
        raise SystemExit(f"Prefect processes left behind: {processes_of(home)}")
    return secs, starts


def print_plain(work: Path, toy: bool) -> None:
    before, n_before = plain_repro(work / "plain-before", toy, shared=False)
    after, n_after = plain_repro(work / "plain-after", toy, shared=True)
    what = "two Prefect-flow stages" if toy else "codeloop on tiny params, 9 stages"
    print(f"plain dvc repro, no PREFECT_API_URL ({what}):")
    print(f"  before: a temporary server per stage  {before:7.1f} s  ({n_before} server starts)")
    print(f"  after:  one shared local server       {after:7.1f} s  ({n_after} server starts)")
    print(f"  after / before: {after / before:.2f}  (saved {before - after:.1f} s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toy", action="store_true", help="the tests' two-stage toy pipeline")
    ap.add_argument("--plain-only", action="store_true", help="only the plain dvc repro runs (a Prefect server per stage vs one shared)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-nightly-"))
    if args.plain_only:
        print_plain(work, args.toy)
        return 0
    if args.toy:
        repo = make_toy_repo(work)
    else:
        (work / "repo").mkdir()
        repo = tiny_repo(work / "repo")
    with local_prefect_server() as (api, env):
        env = {**env, "PYTHONPATH": str(ROOT),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "flows.nightly", "--no-pull"], cwd=repo,
                              env=env, capture_output=True, text=True)
        night = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-4000:])
            raise SystemExit(f"nightly failed (exit {proc.returncode})")
        time.sleep(2)  # task runs are recorded from events, asynchronously
        flows = {"flows": {"name": {"any_": ["nightly"]}}}
        (run,) = httpx.post(f"{api}/flow_runs/filter", json=flows, timeout=10).json()
        body = {"flow_runs": {"id": {"any_": [run["id"]]}}, "limit": 200}
        runs = httpx.post(f"{api}/task_runs/filter", json=body, timeout=10).json()
        runs.sort(key=lambda r: r.get("start_time") or "")  # pipeline order
        task_secs = {base_name(r["name"]): _secs(r) for r in runs}
        stages = [
            n.removeprefix("repro_stage[").removesuffix("]")
            for n in task_secs
            if n.startswith("repro_stage[")
        ]
        direct = {
            s: _timed(
                [sys.executable, "-m", "dvc", "repro", "--single-item", "--force", s], repo, env
            )
            for s in stages
        }
        bare = _timed([sys.executable, "-c", "pass"], repo, env)
        floor = _timed([sys.executable, "-c", "from prefect import flow\n"
                        "flow(name='noop')(lambda: None)()"], repo, env)
        _git(repo, "checkout", "--", ".")

    print(f"pipeline: {'toy (2 stages)' if args.toy else 'codeloop on tiny params'}")
    print(f"nightly flow wall time (python -m flows.nightly, real server): {night:.1f} s")
    print(f"{'stage':<14}{'as Prefect task':>17}{'direct dvc repro':>18}{'overhead':>10}")
    for s in stages:
        t, d = task_secs[f"repro_stage[{s}]"], direct[s]
        print(f"{s:<14}{t:>15.1f} s{d:>16.1f} s{t - d:>+9.1f} s")
    total_t = sum(task_secs[f"repro_stage[{s}]"] for s in stages)
    total_d = sum(direct.values())
    print(f"{'all stages':<14}{total_t:>15.1f} s{total_d:>16.1f} s{total_t - total_d:>+9.1f} s")
    other = {k: v for k, v in task_secs.items() if not k.startswith("repro_stage[")}
    print("other nightly tasks: " + ", ".join(f"{k} {v:.1f} s" for k, v in other.items()))
    print(f"per-stage Prefect floor: import + empty flow run {floor:.1f} s vs bare python "
          f"{bare:.2f} s")
    print_plain(work, args.toy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
