"""The vLLM engine for tests: a skip (or, in CI, a failure) where it is not installed.

``bash scripts/setup.sh --vllm`` installs it into .venv-vllm; .ci/run does, and sets
CODELOOP_REQUIRE_ENGINE=1 so an engine test never skips there. A helper, not a test module.
"""

from __future__ import annotations

import os

import pytest

from codeloop.policy.vllm_engine import engine_missing


def require_engine() -> None:
    """Skip (fail under CODELOOP_REQUIRE_ENGINE=1) when the engine is not installed."""
    why = engine_missing()
    if not why:
        return
    msg = f"vLLM engine not installed ({why}): bash scripts/setup.sh --vllm"
    if os.environ.get("CODELOOP_REQUIRE_ENGINE") == "1":
        pytest.fail(msg)
    pytest.skip(msg)
