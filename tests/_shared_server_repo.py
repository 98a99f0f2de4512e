"""A two-stage DVC repo whose stages are Prefect flows run as `python -m flows.probe`,
for tests of the shared local Prefect server (flows/__init__.py, flows/_server.py).

The repo carries copies of the real flows/__init__.py and flows/_server.py (the code
under test) plus flows/probe.py: a flow that writes out/<name>.json with its pid and the
PREFECT_API_URL it ran against, and with ``PROBE_HOLD=<name>`` waits to be killed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from tests._prefect_server import server_env
from tests._toy_pipeline import REPO_ROOT, git

PROBE = textwrap.dedent(
    """
    import json, os, pathlib, sys, time
    from prefect import flow

    @flow(name="probe")
    def probe(name: str) -> None:
        out = pathlib.Path("out")
        out.mkdir(exist_ok=True)
        info = {"pid": os.getpid(), "api": os.environ.get("PREFECT_API_URL", "")}
        (out / f"{name}.json").write_text(json.dumps(info))
        while os.environ.get("PROBE_HOLD") == name:  # until killed
            time.sleep(0.2)

    if __name__ == "__main__":
        probe(sys.argv[1])
    """
)


def make_probe_repo(root: Path) -> Path:
    """root/repo: git + dvc repo with stages a -> b, each `python -m flows.probe <name>`."""
    repo = root / "repo"
    (repo / "flows").mkdir(parents=True)
    for name in ("__init__.py", "_server.py"):
        shutil.copy2(REPO_ROOT / "flows" / name, repo / "flows" / name)
    (repo / "flows/probe.py").write_text(PROBE)
    stages = {
        "a": {"cmd": "python -m flows.probe a", "deps": ["flows"], "outs": ["out/a.json"]},
        "b": {"cmd": "python -m flows.probe b", "deps": ["out/a.json"], "outs": ["out/b.json"]},
    }
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    git(repo, "init", "-q", "-b", "main")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=repo, check=True,
                   env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "probe pipeline")
    return repo


def probe_env(home: Path, grace_s: float) -> dict[str, str]:
    """A stage environment naming no Prefect server, with its own Prefect home."""
    env = server_env(str(home))
    env.pop("CODELOOP_PREFECT_SERVER_STATE", None)
    env.pop("CODELOOP_SHARED_PREFECT_SERVER", None)
    env["CODELOOP_PREFECT_SERVER_GRACE_S"] = str(grace_s)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def processes_of(home: Path) -> dict[int, str]:
    """pid -> command line of every live process whose environment has PREFECT_HOME=home."""
    found = {}
    needle = f"PREFECT_HOME={home}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state != "Z":
            found[int(proc.name)] = cmd
    return found


def servers_of(home: Path) -> dict[int, str]:
    """The `prefect server start` / uvicorn processes among processes_of(home)."""
    return {
        pid: cmd
        for pid, cmd in processes_of(home).items()
        if "server start" in cmd or "uvicorn" in cmd
    }
