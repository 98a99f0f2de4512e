"""The agent environment's speed, ours beside the baselines, in one run.

    .venv/bin/python bench/agent_env.py [--reps 30] [--no-docker]

On a 50-file repository with 30 visible tests (tests/_repo_fixture.make_repo_task):
  1. per-action median of read_file / edit / search (local backend, 2 workers);
  2. run_tests (the 30 tests in the sealed sandbox) against a plain host ``pytest -q`` of
     the same tests in a copy of the same tree (our venv's python, no sandbox);
  3. episode set-up (reset: workspace ready to act; and reset + a first sandboxed action)
     on local and docker, against a fresh ``docker run`` per episode and ``docker exec``
     per action (as SWE-bench-style harnesses do);
  4. 200 concurrent-episode steps on 2 workers (20 episodes x 10 batched turns), then the
     leak check: host processes, this process's fds, host mounts, workspace dirs.
Targets, so that an episode's cost is the model's turns, not the environment's: actions
<= 20 ms, run_tests <= 1.5x host pytest, set-up <= 50 ms local and <= 1 s docker.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.sandbox.docker_backend import IMAGE, engine_problem  # noqa: E402
from tests._repo_fixture import open_agent_env  # noqa: E402

OPS = "calc/ops.py"


def med_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(times)


def check(obs) -> None:
    if obs.error_kind:
        raise RuntimeError(f"bench action failed: {obs.error_kind}: {obs.output[:300]}")


def actions(env, task, reps: int) -> dict[str, float]:
    ep = env.reset(task)
    flip = iter(range(10**6))

    def edit():
        a, b = (
            ("return a - b", "return a + b")
            if next(flip) % 2 == 0
            else ("return a + b", "return a - b")
        )
        check(ep.step({"tool": "edit", "args": {"path": OPS, "old": a, "new": b}}))

    out = {
        "read_file": med_ms(
            lambda: check(ep.step({"tool": "read_file", "args": {"path": OPS}})), reps
        ),
        "edit": med_ms(edit, reps),
        "search": med_ms(
            lambda: check(ep.step({"tool": "search", "args": {"pattern": r"def value_\d+"}})), reps
        ),
        "list_files": med_ms(
            lambda: check(ep.step({"tool": "list_files", "args": {"depth": 3}})), reps
        ),
    }
    ep.close()
    return out


def run_tests_vs_host(env, task, reps: int) -> tuple[float, float, float, int]:
    """(ours, host pytest -q as installed, host with plugin autoload off) medians, passes."""
    ep = env.reset(task)
    obs = ep.step({"tool": "run_tests", "args": {}})  # warm the page cache once
    ours = med_ms(lambda: ep.step({"tool": "run_tests", "args": {}}), reps)
    passed = obs.tests_passed
    host_dir = tempfile.mkdtemp(prefix="bench-host-pytest-")
    shutil.copytree(ep.workspace.base, host_dir, dirs_exist_ok=True)
    cmd = [
        sys.executable,
        "-B",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *task.visible_tests,
    ]
    host = []
    for extra in ({}, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}):
        env_vars = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **extra}
        run = lambda e=env_vars: subprocess.run(cmd, cwd=host_dir, capture_output=True, env=e)  # noqa: E731
        run()
        host.append(med_ms(run, reps))
    shutil.rmtree(host_dir)
    ep.close()
    return ours, host[0], host[1], passed


def setup_times(env, task, reps: int) -> tuple[float, float]:
    def reset_only():
        env.reset(task).close()

    def reset_and_act():
        ep = env.reset(task)
        check(ep.step({"tool": "search", "args": {"pattern": "def add"}}))
        ep.close()

    return med_ms(reset_only, reps), med_ms(reset_and_act, reps)


def docker_baseline(env, task, reps: int) -> tuple[float, float]:
    """(fresh ``docker run`` + workspace copy + first exec, one ``docker exec``) medians."""
    import docker

    client = docker.from_env()
    base = env.cache.get(task)
    conts = []

    def start():
        d = tempfile.mkdtemp(prefix="bench-dock-ws-")
        shutil.copytree(base, d, dirs_exist_ok=True)
        c = client.containers.run(IMAGE, ["sleep", "600"], detach=True, network_mode="none",
                                  volumes={d: {"bind": "/ws", "mode": "rw"}}, working_dir="/ws")
        c.exec_run(["grep", "-rn", "def add", "."])
        conts.append((c, d))

    try:
        run_ms = med_ms(start, max(3, reps // 5))
        c = conts[0][0]
        exec_ms = med_ms(lambda: c.exec_run(["cat", OPS]), reps)
    finally:
        for c, d in conts:
            c.remove(force=True)
            shutil.rmtree(d, ignore_errors=True)
        client.close()
    return run_ms, exec_ms


def processes_of(uids: set) -> list[str]:
    """Host processes running as one of ``uids`` (the executor's leased sandbox uids)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid = int(status.split("\nUid:\t", 1)[1].split()[0])
        if uid in uids:
            out.append(pid)
    return out


def snapshot_host(uids: set, marks: list[str]) -> dict:
    """Our processes, fds, and host mounts naming our dirs (other users' come and go)."""
    mounts = [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines()
              if any(m in ln for m in marks)]
    return {"procs": processes_of(uids), "fds": len(os.listdir("/proc/self/fd")),
            "mounts": len(mounts)}


def concurrent_steps(env, ex, task) -> dict:
    uids = {u for u in ex.uids if u is not None}
    marks = [ex.workspaces.path, ex.workspaces.envs_root or "/nonexistent", "codeloop"]
    before = snapshot_host(uids, marks)
    eps = [env.reset(task) for _ in range(20)]
    half = [{"tool": "read_file", "args": {"path": OPS}},
            {"tool": "search", "args": {"pattern": "return"}},
            {"tool": "edit", "args": {"path": OPS, "old": "return a - b", "new": "return a + b"}},
            {"tool": "run_tests", "args": {"selection": ["tests/test_f2p.py"]}},
            {"tool": "list_files", "args": {}}]
    back = {"tool": "edit", "args": {"path": OPS, "old": "return a + b", "new": "return a - b"}}
    turns = half + half[:2] + [back] + half[3:]
    t = time.perf_counter()
    errors = 0
    for call in turns:
        errors += sum(bool(o.error_kind) for o in env.step_many([(ep, call) for ep in eps]))
    wall = time.perf_counter() - t
    for ep in eps:
        ep.close()
    after = snapshot_host(uids, marks)
    return {"steps": 20 * len(turns), "wall_s": wall, "errors": errors,
            "new_procs": sorted(set(after["procs"]) - set(before["procs"])),
            "fds": after["fds"] - before["fds"], "mounts": after["mounts"] - before["mounts"],
            "dirs_left": len(os.listdir(ex.workspaces.path))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-docker", action="store_true")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-agent-env-")
    env, ex, task = open_agent_env(root, workers=2, extra_modules=46, extra_tests=26,
                                   max_steps=500, invalid_call_limit=500)
    n_files = sum(len(f) for _, _, f in os.walk(env.cache.get(task)))
    print(f"repository: {n_files} files, {len(task.visible_tests)} visible tests; workers 2")
    try:
        acts = actions(env, task, args.reps)
        print("\nper-action median, local backend (target <= 20 ms)")
        for name, ms in acts.items():
            print(f"  {name:10} {ms:8.2f} ms")
        ours, host, bare, passed = run_tests_vs_host(env, task, max(5, args.reps // 6))
        print(f"\nrun_tests, {passed} passing tests (target <= 1.5x host)")
        print(f"  sealed sandbox {ours:8.1f} ms | host pytest -q {host:8.1f} ms ({ours / host:.2f}x)"
              f" | host, plugin autoload off {bare:8.1f} ms ({ours / bare:.2f}x)")
        local_reset, local_act = setup_times(env, task, args.reps)
        print("\nepisode set-up (target <= 50 ms local, <= 1 s docker)")
        print(
            f"  local   reset {local_reset:8.2f} ms | reset + first sandboxed action {local_act:8.2f} ms"
        )
        leak = concurrent_steps(env, ex, task)
    finally:
        ex.close()
    problem = "" if not args.no_docker else "--no-docker"
    problem = problem or engine_problem()
    if problem:
        print(f"  docker  skipped: {problem}")
    else:
        denv, dex, dtask = open_agent_env(
            Path(root) / "docker", backend="docker", workers=2, extra_modules=46, extra_tests=26
        )
        try:
            d_reset, d_act = setup_times(denv, dtask, args.reps)
            run_ms, exec_ms = docker_baseline(denv, dtask, args.reps)
        finally:
            dex.close()
        print(f"  docker  reset {d_reset:8.2f} ms | reset + first sandboxed action {d_act:8.2f} ms")
        print(f"  baseline: fresh docker run + copy + first exec {run_ms:8.1f} ms"
              f" ({run_ms / d_act:.0f}x ours); docker exec per action {exec_ms:6.1f} ms"
              f" vs our read_file {acts['read_file']:.2f} ms / search {acts['search']:.2f} ms")
    print(
        f"\n{leak['steps']} concurrent-episode steps on 2 workers: {leak['wall_s']:.1f} s, "
        f"{leak['errors']} error observations"
    )
    print(
        f"  leaks: processes {len(leak['new_procs'])}, fds {leak['fds']:+d}, "
        f"host mounts {leak['mounts']:+d}, workspace dirs left {leak['dirs_left']}"
    )
    ws_left = [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("codeloop-ws-")
               and Path(tempfile.gettempdir(), p) == Path(ex.workspaces.path)]
    print(f"  executor's workspace root removed at close: {not ws_left}")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
