"""Small helpers over a Prefect server's REST API, for tests that read runs back."""

from __future__ import annotations

import httpx


def post(api: str, path: str, body: dict) -> list[dict]:
    """POST ``body`` to ``api + path``; the decoded JSON answer."""
    resp = httpx.post(f"{api}{path}", json=body, timeout=10)
    resp.raise_for_status()
    return resp.json()


def base_name(task_run_name: str) -> str:
    """'dvc_pull-3a1' -> 'dvc_pull' (Prefect appends a short suffix to a task's name);
    a run named by the flow ('repro_stage[train]') is its own base name."""
    return task_run_name if task_run_name.endswith("]") else task_run_name.rsplit("-", 1)[0]
