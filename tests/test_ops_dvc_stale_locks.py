"""A killed run's DVC stage locks are dropped; a live process's lock is kept."""

from __future__ import annotations

import json
import os
import subprocess
import time

from codeloop.ops.vcs import DVC_RWLOCK, clear_stale_dvc_locks


def _rwlock(repo, write: dict, read: dict) -> None:
    path = repo / DVC_RWLOCK
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"write": write, "read": read}))


def test_locks_of_gone_and_zombie_processes_are_dropped_and_live_ones_kept(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid no longer exists
    zombie = subprocess.Popen(["true"])  # exits, never reaped while we look
    time.sleep(0.5)
    me = {"pid": os.getpid(), "cmd": "dvc repro live"}
    _rwlock(tmp_path,
            write={"/r/models/candidate": {"pid": zombie.pid, "cmd": "dvc repro train"},
                   "/r/metrics": me},
            read={"/r/data": [{"pid": gone.pid, "cmd": "dvc repro score"}, me]})
    try:
        dropped = clear_stale_dvc_locks(tmp_path)
    finally:
        zombie.wait()
    assert dropped == sorted([gone.pid, zombie.pid])
    data = json.loads((tmp_path / DVC_RWLOCK).read_text())
    assert data == {"write": {"/r/metrics": me}, "read": {"/r/data": [me]}}


def test_without_a_lock_file_nothing_is_dropped(tmp_path):
    assert clear_stale_dvc_locks(tmp_path) == []
