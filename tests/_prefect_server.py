"""A real local Prefect server (``prefect server start``) as a subprocess, for tests and
scripts that need the full server with its UI rather than the test harness."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(home: str) -> dict[str, str]:
    """Environment for the server and its clients: own home, no analytics, no phoning home."""
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("PREFECT_")]:
        del env[key]  # never inherit a harness's API URL or settings
    env.update(
        PREFECT_HOME=home,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        DVC_NO_ANALYTICS="1",
    )
    return env


@contextmanager
def local_prefect_server(startup_timeout: float = 240.0) -> Iterator[tuple[str, dict[str, str]]]:
    """Start ``prefect server start`` on a free port; yield (api_url, client env); stop it.

    The start-up wait is generous: on a loaded machine (two test workers, a nightly run beside
    them) a first start that migrates its database can take well over a minute. The server
    runs in its own session so that stopping it by its PID's process group also ends the
    workers it spawned, and nothing else.
    """
    home = tempfile.mkdtemp(prefix="codeloop-prefect-server-")
    port = free_port()
    env = server_env(home)
    # The UI asks the server where the API is; it would say :4200 unless told the port.
    env["PREFECT_UI_API_URL"] = f"http://127.0.0.1:{port}/api"
    log = open(Path(home) / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
         "--port", str(port), "--analytics-off", "--no-late-runs"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prefect server exited {proc.returncode}: see {log.name}")
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"prefect server not healthy after {startup_timeout}s")
            time.sleep(0.5)
        yield api, {**env, "PREFECT_API_URL": api}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
