"""codeloop.rollout.runners: order-preserving fan-out over threads and a real Dask LocalCluster."""

from __future__ import annotations

import os
import sys

import pytest

from codeloop.config import RunnerConfig
from codeloop.rollout.runners import RunnerError, chunked, fan_out


def square_and_pid(chunk: list[int]) -> list[tuple[int, int]]:
    return [(x * x, os.getpid()) for x in chunk]


def fail_on_three(chunk: list[int]) -> list[int]:
    if 3 in chunk:
        raise ValueError("three is not allowed")
    return chunk


def test_chunked_keeps_every_item_in_order():
    items = list(range(11))
    chunks = chunked(items, 4)
    assert len(chunks) == 4
    assert [x for c in chunks for x in c] == items


def test_chunked_never_returns_empty_chunks():
    assert chunked([1, 2], 5) == [[1], [2]]
    assert chunked([], 3) == []


def test_threads_results_come_back_in_chunk_order():
    chunks = chunked(list(range(20)), 5)
    out = fan_out(square_and_pid, chunks, RunnerConfig(kind="threads", workers=3))
    assert [v for part in out for v, _ in part] == [x * x for x in range(20)]


def test_an_error_in_the_work_propagates_unchanged():
    with pytest.raises(ValueError, match="three"):
        fan_out(fail_on_three, [[1], [3]], RunnerConfig(kind="threads", workers=2))


def test_ray_without_ray_installed_names_the_missing_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an install without ray imports as
    with pytest.raises(RunnerError, match="needs Ray installed"):
        fan_out(square_and_pid, [[1]], RunnerConfig(kind="ray"))


@pytest.mark.slow
def test_dask_local_cluster_runs_in_worker_processes_and_keeps_order():
    chunks = chunked(list(range(12)), 4)
    out = fan_out(square_and_pid, chunks, RunnerConfig(kind="dask", workers=2))
    assert [v for part in out for v, _ in part] == [x * x for x in range(12)]
    pids = {pid for part in out for _, pid in part}
    assert os.getpid() not in pids  # the work really left this process


def test_dask_with_an_unreachable_scheduler_is_a_runner_error():
    cfg = RunnerConfig(kind="dask", address="tcp://127.0.0.1:9")
    with pytest.raises(RunnerError, match="runner.address"):
        fan_out(square_and_pid, [[1]], cfg)
