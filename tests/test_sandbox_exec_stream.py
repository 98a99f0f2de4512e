"""`codeloop exec` judges samples while their tasks load: the verdicts and errors are those
of the whole file, and every slot's zygote starts before the first job."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from codeloop.cli import main
from codeloop.config import SandboxConfig
from codeloop.sandbox import ExecJob, make_executor
from codeloop.sandbox.local import Prestart
from codeloop.sandbox.procs import children
from codeloop.sandbox.uids import UID_LOCKS


def _task(task_id: str, expected: int) -> dict:
    return {"task_id": task_id, "prompt": "", "entry_point": "f", "canonical_solution": "pass",
            "test": f"def check(candidate):\n    assert candidate(1) == {expected}\n"}


def _exec(tmp_path: Path, tasks: list[dict], samples: list[dict]) -> tuple[int, list[dict]]:
    t, s, out = tmp_path / "tasks.jsonl", tmp_path / "samples.jsonl", tmp_path / "out.jsonl"
    t.write_text("".join(json.dumps(r) + "\n" for r in tasks))
    s.write_text("".join(json.dumps(r) + "\n" for r in samples))
    rc = main(["exec", "--tasks", str(t), "--samples", str(s), "--out", str(out),
               "--workers", "2", "--no-progress"])
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return rc, rows


def test_a_sample_of_a_repeated_task_id_is_judged_against_the_last_such_task(tmp_path):
    # the sample is sent with the first "T/1" as it loads; the file maps T/1 to the second
    tasks = [_task("T/1", 1), _task("T/2", 5), _task("T/1", 2)]
    sample = {"task_id": "T/1", "completion": "def f(x):\n    return 2\n"}
    rc, rows = _exec(tmp_path, tasks, [sample, {**sample, "task_id": "T/2"}])
    assert rc == 0
    assert [(r["task_id"], r["passed"]) for r in rows] == [("T/1", True), ("T/2", False)]


def test_an_unknown_task_still_stops_the_run_after_judging_began(tmp_path, capsys):
    good = {"task_id": "T/1", "completion": "def f(x):\n    return 1\n"}
    rc, rows = _exec(tmp_path, [_task("T/1", 1)], [good, {**good, "task_id": "T/9"}])
    assert rc == 2 and rows == []
    assert "samples.jsonl:2: field 'task_id': unknown task 'T/9'" in capsys.readouterr().err


def test_a_warm_executor_has_every_slots_zygote_running_before_any_job():
    ex = make_executor(SandboxConfig(backend="local", workers=3, timeout_s=2.0), warm=True)
    try:
        assert sorted(ex._zygotes) == [0, 1, 2]
        assert all(z.proc.poll() is None for z in ex._zygotes.values())
    finally:
        ex.close()


def test_a_sandbox_weaker_than_required_is_refused_even_when_no_sample_is_judged(tmp_path, capsys):
    rejected = {**_task("T/1", 1), "canonical_solution": ""}  # the one sample's: no job
    t, s, out = tmp_path / "tasks.jsonl", tmp_path / "samples.jsonl", tmp_path / "out.jsonl"
    t.write_text(json.dumps(rejected) + "\n" + json.dumps(_task("T/2", 1)) + "\n")
    s.write_text(json.dumps({"task_id": "T/1", "completion": "def f(x):\n    return 1\n"}))
    rc = main(["exec", "--tasks", str(t), "--samples", str(s), "--out", str(out),
               "--backend", "subprocess", "--no-progress", "--params", os.devnull])
    assert rc == 3 and not out.exists()
    assert "private_root" in capsys.readouterr().err


def _lease_free(uid: int) -> bool:
    """Whether no open file holds the lease of sandbox uid ``uid`` (pool.lease_uid's lock)."""
    fd = os.open(UID_LOCKS / str(uid), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _our_children() -> set[int]:
    return set(children())


def test_an_executor_judges_with_the_zygotes_prestarted_before_its_config():
    early = Prestart(2)
    started = [early._zygotes[slot].result() for slot in (0, 1)]
    cfg = SandboxConfig(backend="local", workers=2, timeout_s=2.0)
    ex = make_executor(cfg, warm=True, prestart=early)
    try:
        assert [ex._zygotes[slot] for slot in (0, 1)] == started and ex.uids == early.uids
        job = ExecJob(code="def f(x):\n    return x\n", tests=["assert f(3) == 3"])
        assert [r.passed for r in ex.run_many([job] * 4)] == [True] * 4
    finally:
        ex.close()


def test_prestarted_zygotes_that_do_not_fit_the_config_are_ended_and_their_uids_freed():
    early = Prestart(2)
    started = [early._zygotes[slot].result() for slot in (0, 1)]
    ex = make_executor(SandboxConfig(backend="local", workers=1), prestart=early)
    try:
        assert all(z.proc.poll() is not None for z in started)
        assert ex._zygotes[0] not in started
        if os.geteuid() == 0:  # (the executor may lease one of them again for itself)
            assert all(_lease_free(uid) for uid in set(early.uids) - set(ex.uids))
    finally:
        ex.close()


def test_exec_ends_its_prestarted_zygotes_when_the_params_file_is_unusable(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text("sandbox:\n  no_such_key: 1\n")
    t, s = tmp_path / "tasks.jsonl", tmp_path / "samples.jsonl"
    t.write_text(json.dumps(_task("T/1", 1)) + "\n")
    s.write_text(json.dumps({"task_id": "T/1", "completion": "def f(x):\n    return 1\n"}))
    before = _our_children()
    rc = main(["exec", "--tasks", str(t), "--samples", str(s), "--out", str(tmp_path / "o"),
               "--params", str(params), "--no-progress"])
    assert rc == 2 and "sandbox.no_such_key" in capsys.readouterr().err
    assert _our_children() == before
