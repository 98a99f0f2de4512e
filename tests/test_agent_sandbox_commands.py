"""Commands in agent workspaces run sealed: they write their own workspace and nothing else."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from codeloop.config import SandboxConfig
from codeloop.sandbox import CmdJob, SandboxError, make_executor
from codeloop.sandbox.docker_backend import skip_without_docker_engine

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def ex(request):
    if request.param == "docker":
        skip_without_docker_engine()
    executor = make_executor(
        SandboxConfig(backend=request.param, workers=2, timeout_s=5.0), workspaces=True
    )
    yield executor
    executor.close()


def sh(ex, ws: str, script: str, **kw) -> object:
    (res,) = ex.run_commands([CmdJob(["/bin/sh", "-c", script], ws, **kw)])
    return res


def test_a_command_writes_its_workspace_and_the_host_sees_it(ex):
    ws = ex.workspaces.new_workspace()
    Path(ws, "in.txt").write_text("from the host\n")
    res = sh(ex, ws, "cat in.txt > out.txt; echo done")
    assert (res.status, res.exit_code, res.stdout) == ("exited", 0, "done\n")
    assert Path(ws, "out.txt").read_text() == "from the host\n"


def test_a_command_sees_no_host_path(ex):
    ws = ex.workspaces.new_workspace()
    venv = [sys.prefix] if sys.prefix not in ("/usr", "/") else []  # a venv, not the system
    paths = [str(REPO), str(REPO.parent / "shared"), "/work", *venv, ex.workspaces.path]
    res = sh(ex, ws, " ; ".join(f"test -e {p} && echo SEEN {p}" for p in paths) + "; true")
    assert res.exit_code == 0 and "SEEN" not in res.stdout, res.stdout


def test_no_other_workspace_can_be_listed(ex):
    ws, other = ex.workspaces.new_workspace(), ex.workspaces.new_workspace()
    tries = "ls -a / /ws /ws/.. /.ws-hidden /.ws-hidden/all; chmod 755 /ws /ws/.. /.ws-hidden"
    res = sh(ex, ws, f"{tries}; ls -a /ws/.. /.ws-hidden/all")
    assert os.path.basename(other) not in res.stdout + res.stderr


def test_a_sibling_workspace_is_unreadable_with_its_token(ex):
    mine, sibling = ex.workspaces.new_workspace(), ex.workspaces.new_workspace()
    Path(sibling, "secret.txt").write_text("the answer\n")
    sh(ex, sibling, "cat secret.txt; chmod 777 .")  # used (and opened up) by its own command
    token = os.path.basename(sibling)
    paths = [f"/ws/{token}", f"/.ws-hidden/all/{token}", f"../{token}"]
    res = sh(ex, mine, "; ".join(f"cat {p}/secret.txt; ls {p}" for p in paths))
    assert "the answer" not in res.stdout and "secret.txt" not in res.stdout


def test_a_command_past_its_time_is_killed_with_what_it_started(ex):
    ws = ex.workspaces.new_workspace()
    res = sh(ex, ws, "(sleep 61.37 &) ; sleep 61.37", timeout_s=0.5)
    assert res.status == "timeout" and res.timed_out
    assert host_processes_running(b"sleep\x0061.37\x00") == []


def host_processes_running(cmdline: bytes) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline:
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_a_missing_program_is_an_exit_code_not_a_fault(ex):
    ws = ex.workspaces.new_workspace()
    (res,) = ex.run_commands([CmdJob(["no-such-program-here"], ws)])
    assert res.exit_code == 127 and "no-such-program-here" in res.stderr


def test_a_cwd_outside_the_workspaces_is_refused(ex, tmp_path):
    with pytest.raises(SandboxError, match="not inside a workspace"):
        ex.run_commands([CmdJob(["true"], str(tmp_path))])


def test_commands_of_a_batch_come_back_in_order(ex):
    wss = [ex.workspaces.new_workspace() for _ in range(6)]
    res = ex.run_commands([CmdJob(["/bin/sh", "-c", f"echo {i}"], ws) for i, ws in enumerate(wss)])
    assert [r.stdout for r in res] == [f"{i}\n" for i in range(6)]


def test_an_executor_without_workspaces_refuses_commands(tmp_path):
    with make_executor(SandboxConfig(workers=1)) as plain:
        with pytest.raises(SandboxError, match="no workspaces"):
            plain.run_commands([CmdJob(["true"], str(tmp_path))])


def test_closing_the_executor_removes_every_workspace():
    executor = make_executor(SandboxConfig(workers=1), workspaces=True)
    ws = executor.workspaces.new_workspace()
    sh(executor, ws, "mkdir -p a/b && echo x > a/b/c && chmod 000 a")
    executor.close()
    assert not os.path.exists(executor.workspaces.path)


def test_workspaces_go_where_they_are_told(tmp_path):
    with make_executor(SandboxConfig(workers=1), workspaces=True, ws_parent=str(tmp_path)) as ex:
        ws = ex.workspaces.new_workspace()
        res = sh(ex, ws, "echo here > f")
        assert res.exit_code == 0 and Path(ws).parent.parent == tmp_path
        assert Path(ws, "f").read_text() == "here\n"
