"""Small pieces of work a Ray worker runs in tests/test_rollout_runners_ray.py.

Apart, with nothing heavy to import: a worker imports the module a function comes from,
and the test module would pull torch and the sandbox into every fresh worker.
"""

from __future__ import annotations

import os


def where(chunk: list[int]) -> list[tuple[int, int, str]]:
    """Each item with the worker's pid and the address of the cluster it belongs to."""
    import ray

    gcs = ray.get_runtime_context().gcs_address
    return [(x, os.getpid(), gcs) for x in chunk]


def fail_on_three(chunk: list[int]) -> list[int]:
    if 3 in chunk:
        raise ValueError("three is not allowed")
    return chunk


def threads_setting(chunk: list[int]) -> list[str]:
    """CODELOOP_THREADS as the worker sees it, once per item."""
    return [os.environ.get("CODELOOP_THREADS", "") for _ in chunk]
