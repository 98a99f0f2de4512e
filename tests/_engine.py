"""The vLLM engine for tests: where it is, and a skip (or, in CI, a failure) without it.

``bash scripts/setup.sh --vllm`` installs it into .venv-vllm; .ci/run does, and sets
CODELOOP_REQUIRE_ENGINE=1 so an engine test never skips there. A helper, not a test module.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from codeloop.policy.vllm_engine import engine_python

FIND = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"


@functools.lru_cache(maxsize=1)
def engine_missing() -> str:
    """Why no engine can run here ("" when one can)."""
    py = engine_python()
    if not Path(py).exists():
        return f"no engine interpreter at {py}"
    if subprocess.run([py, "-c", FIND], capture_output=True).returncode != 0:
        return f"{py} has no vllm"
    return ""


def require_engine() -> None:
    """Skip (fail under CODELOOP_REQUIRE_ENGINE=1) when the engine is not installed."""
    why = engine_missing()
    if not why:
        return
    msg = f"vLLM engine not installed ({why}): bash scripts/setup.sh --vllm"
    if os.environ.get("CODELOOP_REQUIRE_ENGINE") == "1":
        pytest.fail(msg)
    pytest.skip(msg)
