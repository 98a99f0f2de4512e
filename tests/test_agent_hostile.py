"""An agent trying to get out of its workspace: host files through the file tools, bash
and the tests it runs, links it made, ``..``, a sibling episode's workspace, history in
``.git``, processes left behind. Each case: no host file read or changed, no leftover."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from codeloop.sandbox.docker_backend import skip_without_docker_engine
from tests._repo_fixture import open_agent_env

REPO = Path(__file__).resolve().parents[1]
SECRET = "agent-hostile-secret-9f3a"
VENV = [Path(sys.prefix)] if sys.prefix not in ("/usr", "/") else []  # a venv, not the system


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def agent(request, tmp_path_factory):
    if request.param == "docker":
        skip_without_docker_engine()
    root = tmp_path_factory.mktemp("hostile")
    env, ex, task = open_agent_env(root, backend=request.param, bash=True,
                                   invalid_call_limit=500, max_steps=500)
    secret = root / "host-secret.txt"  # a host file the agent must never read
    secret.write_text(SECRET + "\n")
    secret.chmod(0o644)
    yield env, task, secret
    ex.close()


@pytest.fixture
def ep(agent):
    env, task, _ = agent
    episode = env.reset(task)
    yield episode
    episode.close()


def call(ep, tool, **args):
    return ep.step({"tool": tool, "args": args})


def bash(ep, command):
    return call(ep, "bash", command=command)


@pytest.mark.parametrize("path", ["/etc/passwd", "../../../../etc/passwd", "calc/../../x",
                                  str(REPO / "pyproject.toml")])
def test_file_tools_refuse_paths_outside_the_workspace(ep, path):
    for tool, extra in (("read_file", {}), ("write_file", {"content": "x"}),
                        ("edit", {"old": "a", "new": "b"}), ("list_files", {})):
        assert call(ep, tool, path=path, **extra).error_kind == "outside_workspace"


def test_a_link_to_a_host_file_is_never_read_nor_written(ep, agent):
    secret = agent[2]
    bash(ep, f"ln -s {secret} s; ln -s {secret.parent} d")
    outs = [call(ep, "read_file", path="s"), call(ep, "read_file", path="d/host-secret.txt"),
            call(ep, "edit", path="s", old=SECRET, new="pwned"),
            call(ep, "write_file", path="s", content="pwned"),
            call(ep, "write_file", path="d/new.txt", content="pwned"),
            call(ep, "list_files", path="d")]
    assert all(o.error_kind == "symlink" for o in outs), [o.output for o in outs]
    assert secret.read_text() == SECRET + "\n" and not (secret.parent / "new.txt").exists()


def test_a_link_is_not_followed_into_the_final_diff(ep, agent):
    bash(ep, f"ln -s {agent[2]} calc/leak.py")
    assert SECRET not in ep.final_diff() and "leak.py" not in ep.final_diff()


def test_bash_cannot_read_host_files(ep, agent):
    targets = [agent[2], REPO / "pyproject.toml", REPO.parent / "shared", *VENV]
    out = bash(ep, "; ".join(f"cat {t} 2>/dev/null; ls {t} 2>/dev/null" for t in targets)).output
    assert SECRET not in out and "[project]" not in out and "bin" not in out.split()


def test_a_conftest_the_agent_writes_cannot_read_host_files(ep, agent):
    conftest = (f"def test_peek():\n    with open({str(agent[2])!r}) as fh:\n"
                "        assert fh.read() == ''\n")
    call(ep, "write_file", path="conftest.py", content=conftest)
    obs = call(ep, "run_tests", selection=["conftest.py::test_peek"])
    assert SECRET not in obs.output and (
        "No such file" in obs.output or "FileNotFound" in obs.output
    )


def test_a_sibling_workspace_cannot_be_found(agent, ep):
    env, task, _ = agent
    other = env.reset(task)
    try:
        token = os.path.basename(other.workspace.path)
        out = bash(
            ep,
            "ls -a / /ws /ws/.. /.ws-hidden /.ws-hidden/all; chmod 755 /ws/.. "
            f"/.ws-hidden; cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ | grep -c {token}",
        )
        assert token not in out.output
    finally:
        other.close()


def test_a_sibling_workspace_is_unreadable_with_its_token(agent, ep):
    env, task, _ = agent
    other = env.reset(task)
    try:
        bash(other, "echo sibling-note-71 > note.txt; chmod 777 .")  # it even opens itself up
        token = os.path.basename(other.workspace.path)
        paths = [f"/ws/{token}", f"/.ws-hidden/all/{token}", f"../{token}"]
        out = bash(ep, "; ".join(f"cat {p}/note.txt; ls {p}" for p in paths)).output
        assert "sibling-note-71" not in out and "README.md" not in out
    finally:
        other.close()


def test_there_is_no_history_to_mine(ep):
    out = bash(
        ep, "git log --all --oneline 2>&1; find / -name .git -not -path '/proc/*' 2>/dev/null"
    )
    assert "fatal" in out.output or "not found" in out.output
    assert ".git\n" not in out.output and "/.git" not in out.output


def test_hidden_tests_are_nowhere_in_reach(ep):
    out = bash(ep, "grep -rl test_add_negative / --exclude-dir=proc --exclude-dir=usr 2>/dev/null")
    # exit 1: no match; 2: no match, and some dirs could not be read
    assert "test_add_negative" not in out.output and out.output.strip() in ("[exit 1]", "[exit 2]")


def test_no_process_outlives_its_command_or_episode(agent):
    env, task, _ = agent
    ep = env.reset(task)
    bash(ep, "(setsid sleep 321.75 &) ; (nohup sleep 321.75 >/dev/null 2>&1 &) ; true")
    ep.close()
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00321.75\x00":
                left.append(pid)
        except OSError:
            pass
    assert left == []
