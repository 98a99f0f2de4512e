"""One local Prefect server shared by every stage process of a plain ``dvc repro``.

Why: with no ``PREFECT_API_URL``, Prefect boots a temporary server inside every flow
process (many seconds each under load, once per stage), and a stage killed with ``kill -9``
leaves that server running with no parent. Instead the first stage process starts a
small *supervisor* (this file, run by path) that owns one ``prefect server start``;
every stage process registers its pid and attaches to it; the supervisor stops the
server once no registered process has been alive for a grace period.

- State lives in ``$PREFECT_HOME/codeloop-server/`` (default ``~/.prefect``, the same
  home, hence the same database, Prefect's temporary server would use): ``server.json``
  (api_url, supervisor_pid, server_pid), ``clients/<pid>`` (one file per attached
  process, holding its start time so a reused pid is not mistaken for it),
  ``server.log``, and ``lock``: every read-and-decide step holds an exclusive flock,
  so two stages starting at once never start two servers and the supervisor never
  stops a server a stage is just attaching to.
- The server dies with its supervisor (``PR_SET_PDEATHSIG``), so even a SIGKILLed
  supervisor leaves nothing behind; the supervisor runs in its own session, so a
  signal to a stage's process group does not reach it.
- ``CODELOOP_SHARED_PREFECT_SERVER=0`` turns this off (Prefect's own temporary server
  per process); ``CODELOOP_PREFECT_SERVER_GRACE_S`` sets the grace period (default 30 s,
  longer than DVC's pause between two stages).

Standard library only: it runs before anything imports Prefect.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

OPT_OUT = "CODELOOP_SHARED_PREFECT_SERVER"
GRACE_ENV = "CODELOOP_PREFECT_SERVER_GRACE_S"
# Set in attached processes, so that their children (nightly's `dvc repro` stages)
# register too, although they inherit PREFECT_API_URL.
ATTACHED_ENV = "CODELOOP_PREFECT_SERVER_STATE"
STARTUP_TIMEOUT_S = 180.0
_PR_SET_PDEATHSIG = 1


def prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()


def state_dir(home: Path | None = None) -> Path:
    """Where the shared server's state lives (one server per Prefect home)."""
    return (home or prefect_home()) / "codeloop-server"


def _profile_api_url() -> str:
    """PREFECT_API_URL from the active profile of profiles.toml, if any ('' if none)."""
    path = prefect_home() / "profiles.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return ""
    name = os.environ.get("PREFECT_PROFILE") or data.get("active", "")
    profile = (data.get("profiles") or {}).get(name) or {}
    return str(profile.get("PREFECT_API_URL") or "")


def wanted() -> bool:
    """True when this process should use the shared server: nobody named a server."""
    if os.environ.get(OPT_OUT, "1") == "0":
        return False
    if os.environ.get(ATTACHED_ENV) == str(state_dir()):
        return True  # the child of an attached process: it inherited the shared URL
    return not (os.environ.get("PREFECT_API_URL") or _profile_api_url())


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[None]:
    with open(state / "lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _start_time(pid: int) -> str:
    """The process's start time (jiffies since boot) or '' when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[1].split()
    return "" if fields[0] in ("Z", "X") else fields[19]


def alive(pid: int, start: str | None = None) -> bool:
    """Is pid running (and, given its recorded start time, still the same process)?"""
    now = _start_time(pid)
    return bool(now) and (start is None or start == now)


def _live_clients(state: Path) -> list[int]:
    """Registered pids still alive; files of dead ones are removed."""
    live = []
    for f in (state / "clients").glob("*"):
        try:
            pid, start = int(f.name), f.read_text().strip()
        except (OSError, ValueError):
            continue
        if alive(pid, start):
            live.append(pid)
        else:
            f.unlink(missing_ok=True)
    return live


def _register(state: Path, pid: int) -> Path:
    (state / "clients").mkdir(exist_ok=True)
    path = state / "clients" / str(pid)
    path.write_text(_start_time(pid))
    return path


def read_server(state: Path) -> dict | None:
    """server.json when its supervisor and server are both alive, else None."""
    try:
        info = json.loads((state / "server.json").read_text())
    except (OSError, ValueError):
        return None
    if alive(info["supervisor_pid"]) and alive(info["server_pid"]):
        return info
    return None


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _spawn_supervisor(state: Path) -> dict:
    """Start the supervisor (own session) and wait until it reports a healthy server."""
    (state / "server.json").unlink(missing_ok=True)
    grace = os.environ.get(GRACE_ENV, "30")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--supervise", str(state), grace],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        info = read_server(state)
        if info and info["supervisor_pid"] == proc.pid:
            return info
        if proc.poll() is not None:
            raise RuntimeError(
                f"shared Prefect server did not start (exit {proc.returncode}): see "
                f"{state / 'server.log'}; set {OPT_OUT}=0 to use Prefect's own temporary one"
            )
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)  # its server dies with it (PDEATHSIG)
    raise TimeoutError(f"shared Prefect server not healthy after {STARTUP_TIMEOUT_S}s")


def attach() -> str:
    """Register this process with the shared server (starting it if none runs), point
    PREFECT_API_URL at it, and return that URL."""
    state = state_dir()
    state.mkdir(parents=True, exist_ok=True)
    with _locked(state):
        mine = _register(state, os.getpid())  # before a start: the supervisor sees a client
        info = read_server(state) or _spawn_supervisor(state)
    atexit.register(mine.unlink, missing_ok=True)
    os.environ["PREFECT_API_URL"] = info["api_url"]
    os.environ[ATTACHED_ENV] = str(state)
    return info["api_url"]


# --- the supervisor (runs as `python flows/_server.py --supervise STATE GRACE`) ---


def _die_with(parent: int):
    """preexec_fn: the child gets SIGKILL when the parent (the supervisor) dies."""
    import ctypes  # here, not in the forked child: no imports between fork and exec

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(state: Path) -> tuple[subprocess.Popen, str]:
    """`prefect server start` on a free port, healthy; the UI told where its API is."""
    for _ in range(3):  # a free port can be taken before the server binds it
        port = _free_port()
        api = f"http://127.0.0.1:{port}/api"
        env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", ATTACHED_ENV)}
        env.update(PREFECT_UI_API_URL=api, PREFECT_SERVER_ANALYTICS_ENABLED="false")
        with open(state / "server.log", "ab") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                 "--port", str(port), "--analytics-off"],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with(os.getpid()),
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while server.poll() is None and time.monotonic() < deadline:
            if _healthy(api):
                return server, api
            time.sleep(0.3)
        _stop(server)
    raise RuntimeError(f"prefect server start failed 3 times: see {state / 'server.log'}")


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def supervise(state: Path, grace_s: float) -> int:
    """Own one server; stop it when no registered client has lived for grace_s."""
    server, api = _start_server(state)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # runs the finally below
    try:
        tmp = state / "server.json.tmp"
        info = {"api_url": api, "supervisor_pid": os.getpid(), "server_pid": server.pid}
        tmp.write_text(json.dumps(info))
        os.replace(tmp, state / "server.json")
        idle_since = None
        while server.poll() is None:
            time.sleep(0.5)
            if _live_clients(state):
                idle_since = None
                continue
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since < grace_s:
                continue
            with _locked(state):  # an attaching client holds this lock while it registers
                if _live_clients(state):
                    idle_since = None
                    continue
                (state / "server.json").unlink(missing_ok=True)
                _stop(server)
                return 0
        return 1  # the server died on its own; the next stage starts a new one
    finally:
        _stop(server)
        with contextlib.suppress(OSError, ValueError):
            if json.loads((state / "server.json").read_text())["supervisor_pid"] == os.getpid():
                (state / "server.json").unlink()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "--supervise":
        sys.exit("usage: python flows/_server.py --supervise STATE_DIR GRACE_SECONDS")
    sys.exit(supervise(Path(sys.argv[2]), float(sys.argv[3])))
