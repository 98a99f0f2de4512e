"""Plain `dvc repro` (no PREFECT_API_URL): the stages share one local Prefect server,
started once, and no server outlives the run, even after `kill -9`.

Real processes throughout: a real `dvc repro` of a two-stage repo whose stages are
Prefect flows run as `python -m flows.probe` (tests/_shared_server_repo.py), the real
supervisor and `prefect server start`. Leftovers are found by scanning /proc for
processes carrying the test's own PREFECT_HOME, so nothing else on the machine counts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests._shared_server_repo import make_probe_repo, probe_env, processes_of, servers_of

pytestmark = pytest.mark.slow

STATE = "codeloop-server"


def _wait_for(pred, what: str, bound_s: float = 300.0):
    """Poll pred() until truthy; fail naming what after bound_s (a bound, not a timing)."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.3)
    pytest.fail(f"gave up waiting for {what} after {bound_s:.0f} s")


def _stop_all(home: Path) -> None:
    """Teardown: end what this test started (by pid), so no server outlives it."""
    info_path = home / STATE / "server.json"
    if info_path.exists():
        pid = json.loads(info_path.read_text())["supervisor_pid"]
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    _wait_for(lambda: not processes_of(home), "the test's Prefect processes to end", 120)


def _out(repo: Path, name: str) -> dict:
    return json.loads((repo / "out" / f"{name}.json").read_text())


def _probe(repo: Path, env: dict, name: str) -> None:
    subprocess.run([sys.executable, "-m", "flows.probe", name], cwd=repo, env=env, check=True,
                   capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def repro(tmp_path_factory) -> dict:
    """One plain `dvc repro` of stages a -> b, inspected while its server lives (60 s
    grace), then a stage naming that server from another Prefect home; teardown stops it."""
    root = tmp_path_factory.mktemp("repro")
    repo, home = make_probe_repo(root), root / "prefect-home"
    try:
        proc = subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=repo,
                              env=probe_env(home, grace_s=60), capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        api = _out(repo, "a")["api"]
        runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=10).json()
        other = root / "other-home"
        _probe(repo, {**probe_env(other, grace_s=60), "PREFECT_API_URL": api}, "named")
        yield {
            "output": proc.stdout + proc.stderr,
            "apis": [_out(repo, n)["api"] for n in ("a", "b")],
            "runs": runs,
            "servers": servers_of(home),
            "ui_settings": httpx.get(api.removesuffix("/api") + "/ui-settings", timeout=10).json(),
            "named": (_out(repo, "named")["api"], (other / STATE).exists()),
        }
    finally:
        _stop_all(home)


@pytest.fixture(scope="module")
def concurrent(tmp_path_factory) -> dict:
    """Four stage processes started at the same moment, with no server running yet."""
    root = tmp_path_factory.mktemp("concurrent")
    repo, home = make_probe_repo(root), root / "prefect-home"
    cmd = [sys.executable, "-m", "flows.probe"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    env = probe_env(home, grace_s=60)
    try:
        procs = [subprocess.Popen([*cmd, f"c{i}"], cwd=repo, env=env, **quiet) for i in range(4)]
        codes = [p.wait(timeout=600) for p in procs]
        yield {
            "codes": codes,
            "apis": {_out(repo, f"c{i}")["api"] for i in range(4) if codes[i] == 0},
            "servers": servers_of(home),
        }
    finally:
        _stop_all(home)


def test_both_stages_of_a_dvc_repro_report_to_one_server(repro):
    assert sorted(r["parameters"]["name"] for r in repro["runs"]) == ["a", "b"]


def test_both_stages_of_a_dvc_repro_were_given_the_same_api_url(repro):
    assert len(set(repro["apis"])) == 1


def test_a_dvc_repro_of_two_stages_starts_exactly_one_server(repro):
    assert len(repro["servers"]) == 1, repro["servers"]


def test_no_stage_boots_prefects_own_temporary_server(repro):
    assert "Starting temporary server" not in repro["output"]


def test_the_shared_servers_ui_is_told_its_own_api_url(repro):
    api = repro["apis"][0]
    assert not api.startswith("http://127.0.0.1:4200/")
    assert repro["ui_settings"]["api_url"] == api


def test_a_named_server_is_used_and_no_shared_one_started(repro):
    assert repro["named"] == (repro["apis"][0], False)


def test_concurrent_stage_starts_all_succeed(concurrent):
    assert concurrent["codes"] == [0, 0, 0, 0]


def test_concurrent_stage_starts_share_one_api_url(concurrent):
    assert len(concurrent["apis"]) == 1


def test_concurrent_stage_starts_leave_one_server_process(concurrent):
    assert len(concurrent["servers"]) == 1, concurrent["servers"]


def test_kill_9_of_a_stage_leaves_no_server_behind(tmp_path):
    repo = make_probe_repo(tmp_path)
    home = tmp_path / "prefect-home"
    env = {**probe_env(home, grace_s=2), "PROBE_HOLD": "b"}
    dvc = subprocess.Popen([sys.executable, "-m", "dvc", "repro"], cwd=repo, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out_b = repo / "out/b.json"
        _wait_for(out_b.exists, "stage b to start")
        _wait_for(lambda: servers_of(home), "the shared server")
        os.kill(json.loads(out_b.read_text())["pid"], signal.SIGKILL)
        assert dvc.wait(timeout=300) != 0
        deadline = time.monotonic() + 120
        while processes_of(home) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert processes_of(home) == {}
    finally:
        dvc.kill()
        dvc.wait()
        _stop_all(home)


def test_kill_9_of_the_supervisor_takes_its_server_down(tmp_path):
    repo = make_probe_repo(tmp_path)
    home = tmp_path / "prefect-home"
    env = {**probe_env(home, grace_s=60), "PROBE_HOLD": "h"}
    stage = subprocess.Popen([sys.executable, "-m", "flows.probe", "h"], cwd=repo, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for((repo / "out/h.json").exists, "the probe stage to start")
        info = json.loads((home / STATE / "server.json").read_text())
        os.kill(info["supervisor_pid"], signal.SIGKILL)
        deadline = time.monotonic() + 120
        while info["server_pid"] in servers_of(home) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert info["server_pid"] not in servers_of(home)
    finally:
        stage.kill()
        stage.wait()
        _stop_all(home)
