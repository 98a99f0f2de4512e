"""What the hostile sandbox suites share: the executor and listener fixtures, the planted
rows, and the checks every hostile program must meet (no pass, bounded, no process left,
scratch empty, no host file, the next job passes). A helper, not a test module, so test
modules import it instead of each other (and the ordinary-user run copies it).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from codeloop.config import SandboxConfig
from codeloop.sandbox import ExecJob, make_executor
from codeloop.sandbox.docker_backend import skip_without_docker_engine
from codeloop.sandbox.verdicts import wall_cap

REPO = Path(__file__).resolve().parents[1]
SECRET = "codeloop-hostile-secret-5d1e"
HOST_MARK = REPO / ".hostile-was-here"  # a model writing here would leave a host effect
TESTS = ["assert f(1) == 7919"]
PLANT_NAME = "codeloop-hostile-plant.jsonl"
PLANT_ROW = '{"task_id": "hostile/1", "test_list": ["assert f(1) == 7919"]}\n'
PLANT_DIRS = ["/tmp", "/var/tmp", "/srv", "/opt", "/mnt", "/home", "/root", "/work", "/dev/shm",
              str(REPO), str(REPO / "data"), str(REPO.parent / "shared"), sys.prefix,
              os.path.expanduser("~")]


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def executor(request):
    if request.param == "docker":
        skip_without_docker_engine()
    os.environ["CODELOOP_TEST_SECRET"] = SECRET  # present in the parent: must not reach the child
    ex = make_executor(
        SandboxConfig(backend=request.param, timeout_s=2.0, workers=1, memory_mb=256)
    )
    ex.run(ExecJob(code="def f(x): return x", tests=["assert f(1) == 1"]))  # start the zygote
    yield ex
    ex.close()
    os.environ.pop("CODELOOP_TEST_SECRET", None)


def zygote_pid(ex) -> int:
    (z,) = ex._zygotes.values()
    return z.host_pid()


def zygote_children(pid: int) -> list[str]:
    return [
        c
        for t in os.listdir(f"/proc/{pid}/task")
        for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()
    ]


def scratch_entries(pid: int) -> dict[str, list[str]]:
    """What is left in the zygote's scratch dirs (those its root has: a private root has
    no /var/tmp) and in its work root."""
    root = Path(f"/proc/{pid}/root")
    out = {d: sorted(os.listdir(root / d[1:])) for d in SCRATCH if (root / d[1:]).is_dir()}
    out["work"] = sorted(os.listdir(root / "tmp/codeloop-work"))
    return out


SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
CLEAN = {"/tmp": ["codeloop-work"], "/var/tmp": [], "/dev/shm": [], "work": []}


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.2)
    got, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                got.append(srv.accept())
            except OSError:
                continue

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    yield srv.getsockname()[1], got
    stop.set()
    th.join()
    srv.close()


def assert_no_pass_and_no_trace(executor, code: str, connections: list) -> None:
    """The checks every hostile program must meet (see the module docstring)."""
    pid = zygote_pid(executor)
    t0 = time.monotonic()
    r = executor.run(ExecJob(code=code, tests=TESTS))
    wall = time.monotonic() - t0
    assert not r.passed and r.tests_passed == 0, (r.status, r.test_results, r.stdout[-2000:])
    # Bounded: the time budget (2 s) is charged in CPU and non-waiting time, so on a
    # loaded host a CPU burner may run longer in wall time, never past the hard cap.
    assert wall < wall_cap(2.0) + 5.0
    assert SECRET not in r.stdout + r.stderr + "".join(t.got + t.message for t in r.test_results)
    assert os.getpid() and zygote_pid(executor) == pid  # we and the zygote are alive
    assert zygote_children(pid) == []
    left = scratch_entries(pid)
    assert left == {k: v for k, v in CLEAN.items() if k in left}
    assert not HOST_MARK.exists()
    assert connections == []
    follow = executor.run(ExecJob(code="def f(x): return 7919", tests=TESTS))
    assert follow.passed, follow
