"""Small helpers over a Prefect server's REST API, for tests that read runs back."""

from __future__ import annotations

import httpx


def post(api: str, path: str, body: dict) -> list[dict]:
    """POST ``body`` to ``api + path``; the decoded JSON answer."""
    resp = httpx.post(f"{api}{path}", json=body, timeout=10)
    resp.raise_for_status()
    return resp.json()


def base_name(task_run_name: str) -> str:
    """'repro-train-3a1' -> 'repro-train' (Prefect appends a short suffix)."""
    return task_run_name.rsplit("-", 1)[0]
